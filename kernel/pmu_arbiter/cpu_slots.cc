#include "kernel/pmu_arbiter/cpu_slots.h"

namespace pfm {
namespace arbiter_internal {

void CpuSlots::Tell(const Request& r, int slot, bool on, uint64_t now) {
  ScheduleChange c;
  c.cpu = cpu_;
  c.request = r.id;
  c.session = r.session;
  c.pid = r.pid;
  c.slot = slot;
  c.on = on;
  c.now = now;
  observer_->OnSchedule(c);
}

CpuSlots::CpuSlots(int cpu, const PmuShape& shape, uint64_t* work_units)
    : cpu_(cpu),
      shape_(shape),
      work_units_(work_units),
      gp_free_(shape.gp_mask),
      fixed_free_(LowMask(shape.fixed_counters)),
      dr_free_(LowMask(shape.debug_registers)) {}

void CpuSlots::TakeAll(uint64_t now, const Context* only) {
  auto take = [&](Request* r) {
    if (r != nullptr && (only == nullptr || r->context == only)) Take(r, now);
  };
  for (int i = 0; i < shape_.gp_counters; ++i) take(gp_[i]);
  for (int i = 0; i < shape_.fixed_counters; ++i) take(fixed_[i]);
  for (int i = 0; i < shape_.debug_registers; ++i) take(dr_[i]);
}

void CpuSlots::InstallPinned(const PinnedSet* cpu_context,
                             const PinnedSet* task_context, uint64_t now) {
  const PinnedSet* sets[2] = {cpu_context, task_context};
  // Three passes make greedy placement optimal (see Admission::AdmitPinned):
  // fixed counters first, then PEBS, then everything else.
  for (int pass = 0; pass < 3; ++pass) {
    for (const PinnedSet* set : sets) {
      if (set == nullptr) continue;
      for (Request* r : set->requests[ResourceClass::kCounter]) {
        ++*work_units_;
        if (r->on_cpu >= 0) continue;
        if (pass == 0 && !(r->fixed_counter >= 0 &&
                           (fixed_free_ & (1u << r->fixed_counter))))
          continue;
        if (pass == 1 && !r->pebs) continue;
        const int slot = FindFreeCounter(*r);
        assert(slot >= 0 && "admission guarantees pinned counters fit");
        if (slot >= 0) Put(r, slot, now);
      }
    }
  }
  for (const PinnedSet* set : sets) {
    if (set == nullptr) continue;
    for (Request* r : set->requests[ResourceClass::kBreakpoint]) {
      ++*work_units_;
      const int slot = FindFreeDebugRegister();
      assert(slot >= 0 && "admission guarantees pinned breakpoints fit");
      if (slot >= 0) Put(r, slot, now);
    }
  }
}

Request* CpuSlots::OnCounter(int counter) const {
  if (counter >= 0 && counter < shape_.gp_counters) return gp_[counter];
  if (counter >= kFixedCounterBase &&
      counter < kFixedCounterBase + shape_.fixed_counters)
    return fixed_[counter - kFixedCounterBase];
  return nullptr;
}

}  // namespace arbiter_internal
}  // namespace pfm
