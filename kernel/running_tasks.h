// What runs on each CPU now: the one table of it (Linux's rq->curr).
//
// Written by whoever delivers context switches: Kernel::ContextSwitch, after
// the DS allocator has drained the outgoing task's records and before the
// arbiter installs the incoming task's counters. Read by the DS allocator
// (whose task a drain's records belong to; whether a task given a context
// is running already) and by the arbiter (the same question for counters).
//
// A component driven on its own (its unit tests, the benchmarks) keeps a
// table of its own, written by its own switch hooks; inside the Kernel both
// read the Kernel's, and only the Kernel writes it.
//
// Not thread-safe: the kernel lock serialises it with everything else.
#ifndef PFM_KERNEL_RUNNING_TASKS_H_
#define PFM_KERNEL_RUNNING_TASKS_H_

#include <cassert>
#include <vector>

#include "kernel/drivers/driver.h"

namespace pfm {

class RunningTasks {
 public:
  explicit RunningTasks(int cpus) : on_(cpus > 0 ? cpus : 1) {}

  int cpus() const { return static_cast<int>(on_.size()); }
  // The task running on `cpu` (pid 0: idle or not known); TaskId{} for a
  // CPU out of range.
  TaskId on(int cpu) const {
    return cpu >= 0 && cpu < cpus() ? on_[cpu] : TaskId{};
  }
  void Set(int cpu, TaskId task) {
    assert(cpu >= 0 && cpu < cpus());
    on_[cpu] = task;
  }

 private:
  std::vector<TaskId> on_;
};

}  // namespace pfm

#endif  // PFM_KERNEL_RUNNING_TASKS_H_
