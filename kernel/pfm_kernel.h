// The Kernel facade: the arbitration core a driver talks to (CoreHooks).
// It joins the DS allocator (kernel/ds) and the PMU arbiter
// (kernel/pmu_arbiter) and orders their work on every hardware event:
//   - a context switch drains the DS buffers first (records and PEBS
//     samples are attributed and routed with the counters that were on the
//     hardware while they were written), then switches the counters;
//   - a multiplexing tick drains pending PEBS samples before a rotation can
//     hand their counter to another event.
//
// Locking: the Kernel is not thread-safe. Its owner (pfmd) holds one lock
// ("the kernel lock") around every call, hooks included:
//   1. the sim driver runs under the kernel lock (SimMachine::Run is called
//      with it held, so its hooks run with it held);
//   2. a ptrace tracer thread takes the kernel lock in its sink before
//      calling DrainForeign/Switch/TaskExit;
//   3. nothing that waits (I/O, sleeps, joins) happens with it held.
#ifndef PFM_KERNEL_PFM_KERNEL_H_
#define PFM_KERNEL_PFM_KERNEL_H_

#include <cstdint>

#include "kernel/drivers/driver.h"
#include "kernel/ds/ds_allocator.h"
#include "kernel/pmu_arbiter/arbiter.h"

namespace pfm {

struct KernelOptions {
  DsLimits ds;
  uint64_t mux_interval_ns = 4000000;  // 4 ms
};

class Kernel : public CoreHooks, public PebsRouter {
 public:
  Kernel(const MachineInfo& machine, const KernelOptions& options);
  ~Kernel() override;

  DsAllocator& ds() { return ds_; }
  PmuArbiter& arbiter() { return arbiter_; }
  const MachineInfo& machine() const { return machine_; }

  // CoreHooks
  DsArea* Area(int cpu) override;
  void DsInterrupt(int cpu, uint64_t now_ns) override;
  void ContextSwitch(int cpu, uint64_t now_ns, TaskId prev, TaskId next,
                     bool preempt) override;
  void TaskExit(TaskId task, uint64_t now_ns, int64_t status) override;
  TraceConfig TaskConfig(int cpu, TaskId task) override;
  bool TaskHeld(TaskId task) override;
  int ScheduledCounters(int cpu, ScheduledCounter* out, int max) override;
  void AddCount(uint32_t request, uint64_t delta) override;
  void Tick(int cpu, uint64_t now_ns) override;

  // PebsRouter
  uint32_t OwnerOf(int cpu, int counter) const override;

  // What runs on each CPU now (for `resources`).
  TaskId Running(int cpu) const;

 private:
  MachineInfo machine_;
  DsAllocator ds_;
  PmuArbiter arbiter_;
  std::vector<TaskId> running_;
};

}  // namespace pfm

#endif  // PFM_KERNEL_PFM_KERNEL_H_
