#include "kernel/pfm_kernel.h"

#include <cassert>

namespace pfm {

Kernel::Kernel(const MachineInfo& machine, const KernelOptions& options)
    : machine_(machine),
      ds_(machine.cpus > 0 ? machine.cpus : 1, options.ds),
      arbiter_(machine, options.mux_interval_ns),
      running_(machine.cpus > 0 ? machine.cpus : 1) {
  ds_.set_pebs_router(this);
}

Kernel::~Kernel() { ds_.set_pebs_router(nullptr); }

DsArea* Kernel::Area(int cpu) { return ds_.Area(cpu); }

void Kernel::DsInterrupt(int cpu, uint64_t now_ns) { ds_.Drain(cpu, now_ns); }

void Kernel::ContextSwitch(int cpu, uint64_t now_ns, TaskId prev, TaskId next,
                           bool preempt) {
  assert(cpu >= 0 && cpu < static_cast<int>(running_.size()));
  ds_.Switch(cpu, now_ns, prev, next, preempt);  // drains with prev's counters
  arbiter_.SwitchOut(cpu, now_ns);
  arbiter_.SwitchIn(cpu, next, now_ns);
  running_[cpu] = next;
}

void Kernel::TaskExit(TaskId task, uint64_t now_ns, int64_t status) {
  ds_.TaskExit(task, now_ns, status);
}

TraceConfig Kernel::TaskConfig(int cpu, TaskId task) {
  return ds_.Config(cpu, task);
}

bool Kernel::TaskHeld(TaskId task) { return ds_.Held(task); }

int Kernel::ScheduledCounters(int cpu, ScheduledCounter* out, int max) {
  return arbiter_.Scheduled(cpu, out, max);
}

void Kernel::AddCount(uint32_t request, uint64_t delta) {
  arbiter_.AddCount(request, delta);
}

void Kernel::Tick(int cpu, uint64_t now_ns) {
  // A rotation may give a PEBS counter to another event: samples already in
  // the buffer belong to the one that held it.
  if (ds_.Area(cpu)->pebs_count() != 0) ds_.Drain(cpu, now_ns);
  arbiter_.Tick(cpu, now_ns);
}

uint32_t Kernel::OwnerOf(int cpu, int counter) const {
  return arbiter_.OnCounter(cpu, counter);
}

TaskId Kernel::Running(int cpu) const {
  return cpu >= 0 && cpu < static_cast<int>(running_.size()) ? running_[cpu]
                                                             : TaskId{};
}

}  // namespace pfm
