// The hardware underneath kernel/: what a driver is, what it reports to the
// core, and what the core asks of it.
//
// A driver (sim, perf, ptrace) runs tasks or watches them and produces raw
// hardware data: BTS/PEBS records written through a per-CPU DsArea, context
// switches, counter increments, task exits. It reports those to the core
// through CoreHooks; the core (kernel/ds + kernel/pmu_arbiter) never calls
// the operating system itself.
#ifndef PFM_KERNEL_DRIVERS_DRIVER_H_
#define PFM_KERNEL_DRIVERS_DRIVER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernel/uapi/pfm_uapi.h"

namespace pfm {

class DsArea;

struct TaskId {
  int32_t pid = 0;  // 0 = idle / no task
  int32_t tid = 0;
  bool operator==(const TaskId& o) const { return pid == o.pid && tid == o.tid; }
  bool operator!=(const TaskId& o) const { return !(*this == o); }
};

// What the PMU of a machine offers. For the sim this comes from libpfm4's
// tables for the named PMU; for the host from sysfs, libpfm4 and probing.
struct MachineInfo {
  int cpus = 0;
  std::string pmu;          // libpfm4 PMU name ("skl") or "none"
  std::string pmu_desc;     // libpfm4 description, or why there is none
  int gp_counters = 0;      // general-purpose counters per CPU
  int fixed_counters = 0;   // fixed-function counters per CPU
  uint32_t pebs_counter_mask = 0;  // which GP counters can do PEBS
  int debug_registers = 0;  // hardware breakpoint slots per task/CPU
  bool bts = false;
  bool pebs = false;
  bool lbr = false;
  bool pt = false;
  bool software_events = false;  // perf software events (host)
  bool soft_bts = false;         // ptrace single-step branch tracing (host)
  // With soft_bts: what it covers and where its switch records come from
  // (probed by pfmd), for `status`.
  std::string soft_bts_scope;
  std::string source;            // how this was found out, for `status`
};

// What the hardware configuration of a task (or CPU) should be: the union of
// what its attached consumers need. Drivers read it before running a task.
struct TraceConfig {
  bool bts_user = false;
  bool bts_kernel = false;
  uint32_t pebs_counters = 0;  // GP counters armed for PEBS
  uint64_t pebs_reset[PFM_DS_MAX_PEBS_COUNTERS] = {};
  bool any() const { return bts_user || bts_kernel || pebs_counters != 0; }
};

// A counter the arbiter has scheduled on a CPU right now.
struct ScheduledCounter {
  uint32_t request = 0;  // arbiter request id
  int counter = -1;      // hardware counter index (GP 0..n-1, fixed 32+)
  uint32_t type = 0;     // perf attr.type
  uint64_t config = 0;   // perf attr.config
};

// The core's side of the hardware interface. Implemented by kernel/ (the
// Kernel facade). All calls for one CPU come from one thread at a time and
// carry non-decreasing times (ns on the driver's clock).
class CoreHooks {
 public:
  virtual ~CoreHooks() = default;

  // The DS area of `cpu`; drivers write raw BTS/PEBS records through it.
  virtual DsArea* Area(int cpu) = 0;
  // The DS area reached its interrupt threshold (or the driver wants a
  // drain): translate, stamp and fan out what it holds.
  virtual void DsInterrupt(int cpu, uint64_t now_ns) = 0;
  // `prev` stops and `next` starts running on `cpu`. The core drains the DS
  // area first, so records are attributed to the task that ran.
  virtual void ContextSwitch(int cpu, uint64_t now_ns, TaskId prev,
                             TaskId next, bool preempt) = 0;
  // `task` exited with wait status `status`. A driver that traces a group
  // of tasks (see TaskCreated) reports each; the group's context ends with
  // the exit of its last live task.
  virtual void TaskExit(TaskId task, uint64_t now_ns, int64_t status) = 0;
  // A traced task created another that the driver traces from now on, in
  // the same context: a thread (child.pid == parent.pid) or, when the
  // driver follows children, a process. Reported before any record of
  // `child`. Default: no such driver.
  virtual void TaskCreated(TaskId parent, TaskId child, uint64_t now_ns) {}
  // `task` exec'd a new program (its process's mappings are new).
  virtual void TaskExec(TaskId task, uint64_t now_ns) {}
  // The driver stopped tracing `task`, which runs on untraced (not an exit:
  // its context stays, but it no longer counts as a live task of a group).
  virtual void TaskDetached(TaskId task, uint64_t now_ns) {}
  // What to trace for `task` (union of its consumers and the CPU's).
  virtual TraceConfig TaskConfig(int cpu, TaskId task) = 0;
  // True when a blocking lossless consumer of `task` is full: the driver must
  // hold the task (not run it) until this turns false.
  virtual bool TaskHeld(TaskId task) = 0;
  // Counters scheduled on `cpu` for the task running there; the driver adds
  // what they counted with AddCount.
  virtual int ScheduledCounters(int cpu, ScheduledCounter* out, int max) = 0;
  virtual void AddCount(uint32_t request, uint64_t delta) = 0;
  // The multiplexing timer: lets the arbiter rotate flexible requests.
  virtual void Tick(int cpu, uint64_t now_ns) = 0;

  // ---- Task-level tracing ----
  // For a driver that traces one task outside the per-CPU Debug Store
  // (soft BTS: a ptrace tracer sees its tracee wherever it runs). It writes
  // the task's own DS area, exactly as the CPU writes a CPU's, and raises
  // TaskDsInterrupt instead of DsInterrupt. Defaults: no such driver.
  //
  // The DS area of `task`'s context, or null when no consumer traces it.
  // Valid until the next call into the core.
  virtual DsArea* TaskArea(TaskId task) { return nullptr; }
  // `task`'s area reached its threshold, or the driver hands over what it
  // holds (before a stop, an exit, a signal or a CPU change, on demand):
  // the core drains it as having run on `cpu`, and resets it.
  virtual void TaskDsInterrupt(TaskId task, int cpu, uint64_t now_ns) {}
  // A fatal-looking signal is about to be delivered to `task` (its area was
  // handed over just before): its history consumers freeze, so a snapshot
  // shows how it got there.
  virtual void TaskSignaled(TaskId task, uint64_t now_ns, int signo) {}
};

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_DRIVER_H_
