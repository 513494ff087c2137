// Runs a real program under the soft-BTS tracer with its branches drained
// into a DsAllocator, the way pfmd's host driver does (bench-only glue).
//
// The core forwards every tracer report (CoreHooks, task-level) to the
// allocator under one mutex (the tracer thread is the only caller while the
// trace runs; the mutex makes the hand-over to the caller's thread
// explicit). Needs permission to
// ptrace the child (root here).
#ifndef PFM_BENCH_SOFT_BTS_RUN_H_
#define PFM_BENCH_SOFT_BTS_RUN_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kernel/drivers/ptrace/soft_bts.h"
#include "kernel/ds/ds_allocator.h"

namespace pfm::bench {

class DsSink : public CoreHooks {
 public:
  explicit DsSink(DsAllocator* ds) : ds_(ds) {}
  DsArea* TaskArea(TaskId task) override;
  void TaskDsInterrupt(TaskId task, int cpu, uint64_t now_ns) override;
  bool TaskHeld(TaskId task) override;
  void ContextSwitch(int cpu, uint64_t now_ns, TaskId prev, TaskId next,
                     bool preempt) override;
  void TaskExit(TaskId task, uint64_t now_ns, int64_t wait_status) override;
  void TaskSignaled(TaskId task, uint64_t now_ns, int signo) override;
  // The per-CPU hooks: never called by a task-level driver.
  DsArea* Area(int) override { return nullptr; }
  void DsInterrupt(int, uint64_t) override {}
  TraceConfig TaskConfig(int, TaskId) override { return TraceConfig{}; }
  int ScheduledCounters(int, ScheduledCounter*, int) override { return 0; }
  void AddCount(uint32_t, uint64_t) override {}
  void Tick(int, uint64_t) override {}
  int64_t exit_status() const;
  // Blocks until Exited() was called or `timeout` passed; true if it was.
  bool WaitExited(std::chrono::milliseconds timeout);

 private:
  DsAllocator* const ds_;
  mutable std::mutex mu_;
  std::condition_variable exited_cv_;
  bool exited_ = false;
  int64_t exit_status_ = -1;
};

struct SoftBtsRunResult {
  double seconds = 0;  // Release to tracee exit
  SoftBtsTracer::Stats stats;
  int64_t exit_status = -1;
};

// Spawns `argv` stopped, attaches consumers built by `attach(pid)` (called
// before the program runs; returns 0 or -errno), traces it to its exit with
// `opt` and fills *out. Returns 0 or a negative errno with a message on
// stderr. The calling thread sleeps in the sink until the exit: it must not
// wake up periodically, since on a pinned CPU every wake-up is a context
// switch inside the tracer/tracee ping-pong being measured.
template <typename AttachFn>
int TraceProgram(const std::vector<std::string>& argv, DsAllocator* ds,
                 AttachFn attach, SoftBtsRunResult* out,
                 const SoftBtsOptions& opt = SoftBtsOptions());

// Attaches to `ds` the consumer pfmd's host driver gives a profiler: task
// context of `pid`, lossless BTS, user branches, fixed format, a 64 MiB
// ring. Its id, or a negative errno with a message on stderr prefixed by
// `who`.
int AttachLosslessConsumer(DsAllocator* ds, pid_t pid, const char* who);

// TraceProgram into a fresh DsAllocator with that consumer (what pfmd's host
// driver does for a profiler); *ring_records and *lost: the consumer's
// counts at the end. 0 or a negative errno (message on stderr, by `who`).
int TraceLossless(const std::vector<std::string>& argv, const SoftBtsOptions& opt,
                  const char* who, SoftBtsRunResult* res, uint64_t* ring_records,
                  uint64_t* lost);

// The minimum any single-stepping tracer pays, the baseline of
// bench/softbts and bench/watchpoint: fork, PTRACE_TRACEME, exec `argv`,
// `at_exec(pid)` at the exec stop (0 or -errno; nothing by default), then
// one PTRACE_SINGLESTEP and one waitpid per instruction to the exit, timed
// from the exec stop. 0 or a negative errno.
struct BareStepResult {
  double seconds = 0;
  uint64_t steps = 0;
};
int BareStepLoop(const std::vector<std::string>& argv, BareStepResult* out,
                 const std::function<int(pid_t)>& at_exec = nullptr);

// Non-template part of TraceProgram.
int TraceSpawned(pid_t pid, DsAllocator* ds, const SoftBtsOptions& opt,
                 SoftBtsRunResult* out);
int SpawnForTrace(const std::vector<std::string>& argv, pid_t* pid);

template <typename AttachFn>
int TraceProgram(const std::vector<std::string>& argv, DsAllocator* ds,
                 AttachFn attach, SoftBtsRunResult* out,
                 const SoftBtsOptions& opt) {
  pid_t pid = -1;
  if (int rc = SpawnForTrace(argv, &pid); rc != 0) return rc;
  if (int rc = attach(pid); rc != 0) {
    Abandon(pid, nullptr);
    return rc;
  }
  return TraceSpawned(pid, ds, opt, out);
}

}  // namespace pfm::bench

#endif  // PFM_BENCH_SOFT_BTS_RUN_H_
