// The Kernel facade: the arbitration core, as drivers (CoreHooks) and its
// owner (pfmd) see it. It joins the DS allocator (kernel/ds) and the PMU
// arbiter (kernel/pmu_arbiter), owns the kernel lock, and orders their work
// on every hardware event:
//   - a context switch drains the DS buffers first (records and PEBS
//     samples are attributed and routed with the counters that were on the
//     hardware while they were written), then switches the counters;
//   - a multiplexing tick drains pending PEBS samples before a rotation can
//     hand their counter to another event.
//
// Locking: kernel/kernel_lock.h has the rules. Every entry point below (the
// owner's verbs and the CoreHooks) asserts that the caller holds lock().
// Errors are negative errnos with an ErrorDetail, as in kernel/ds and
// kernel/pmu_arbiter; nothing here allocates on the record path or reads a
// clock (times come in as arguments).
#ifndef PFM_KERNEL_PFM_KERNEL_H_
#define PFM_KERNEL_PFM_KERNEL_H_

#include <cstdint>
#include <vector>

#include "kernel/drivers/driver.h"
#include "kernel/ds/ds_allocator.h"
#include "kernel/kernel_lock.h"
#include "kernel/pmu_arbiter/arbiter.h"
#include "kernel/running_tasks.h"

namespace pfm {

struct KernelOptions {
  DsLimits ds;
  uint64_t mux_interval_ns = 4000000;  // 4 ms
};

class Kernel : public CoreHooks, public PebsRouter, public ScheduleObserver {
 public:
  Kernel(const MachineInfo& machine, const KernelOptions& options);
  ~Kernel() override;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  KernelLock& lock() const ABSL_LOCK_RETURNED(lock_) { return lock_; }
  const MachineInfo& machine() const { return machine_; }
  // Fixed at construction: no lock needed.
  const DsLimits& ds_limits() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return ds_.limits();
  }

  // ---- the owner's verbs ----
  // Consumers of a context's Debug Store stream (kernel/ds/ds_allocator.h).
  int AttachConsumer(const ConsumerParams& params, uint64_t now, ErrorDetail* d)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  void DetachConsumer(ConsumerId id, uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  Ring* ConsumerRing(ConsumerId id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  int ConsumerStatsOf(ConsumerId id, ConsumerStats* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  int64_t ResizeTaskBuffer(int32_t pid, uint32_t bts_records, uint64_t now,
                           ErrorDetail* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // Trace memory the core holds (rings and DS buffers), for accounting.
  uint64_t HeldBytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // DsAllocator::TaskContextOf.
  int32_t TaskContextOf(int32_t pid) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_) {
    lock_.AssertHeld();
    return ds_.TaskContextOf(pid);
  }
  // DsAllocator::LiveTaskContextOfConsumer.
  int32_t LiveTaskContextOfConsumer(ConsumerId id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_) {
    lock_.AssertHeld();
    return ds_.LiveTaskContextOfConsumer(id);
  }
  // Brings consumers up to date: drains the area of `cpu` now.
  void DrainCpu(int cpu, uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);

  // Counters and breakpoints (kernel/pmu_arbiter/arbiter.h).
  int AddRequest(const pfm_pmu_req& req, uint64_t session, const char* label,
                 uint64_t now, ErrorDetail* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  void RemoveRequest(RequestId id, uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  int ReadRequest(RequestId id, uint64_t now, PmuArbiter::Reading* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  void DescribeHolders(uint64_t now, std::vector<PmuArbiter::Holder>* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // The arbiter's rotations so far (PmuArbiter::rotations), for metrics.
  uint64_t Rotations() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);

  // The allocator itself, for benchmarks that drive it as a whole
  // (bench/compact.cc); pfmd uses the verbs above.
  DsAllocator& ds_for_benchmarks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_) {
    lock_.AssertHeld();
    return ds_;
  }

  // What runs on each CPU now (for `resources` and on-demand drains).
  TaskId Running(int cpu) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);

  // ---- CoreHooks (the hardware side) ----
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
  DsArea* TaskArea(TaskId task) override;
  void TaskDsInterrupt(TaskId task, int cpu, uint64_t now_ns) override;
  void TaskSignaled(TaskId task, uint64_t now_ns, int signo) override;
  void TaskCreated(TaskId parent, TaskId child, uint64_t now_ns) override;
  void TaskDetached(TaskId task, uint64_t now_ns) override;
  void TaskExec(TaskId task, uint64_t now_ns) override;

  // PebsRouter (called back by the DS allocator during a drain).
  uint32_t OwnerOf(int cpu, int counter) const override;
  // ScheduleObserver (called back by the arbiter): a SCHEDULE record to the
  // consumers of the request's session that asked for it.
  void OnSchedule(const ScheduleChange& change) override;

 private:
  mutable KernelLock lock_;
  const MachineInfo machine_;
  // What runs on each CPU: written here (ContextSwitch) only; the DS
  // allocator and the arbiter read it. Declared before them: they keep a
  // pointer to it.
  RunningTasks running_ ABSL_GUARDED_BY(lock_);
  DsAllocator ds_ ABSL_GUARDED_BY(lock_);
  PmuArbiter arbiter_ ABSL_GUARDED_BY(lock_);
};

}  // namespace pfm

#endif  // PFM_KERNEL_PFM_KERNEL_H_
