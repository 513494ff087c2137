// CpuSlots: what one CPU's PMU holds now (the request in each GP counter,
// fixed counter and debug register), where a request may go, and the
// accounting of a request's time on the hardware.
//
// Both kinds of requests get here: pinned ones through InstallPinned (in the
// order admission's guarantee assumes, admission.cc) and flexible ones
// through the deal (flexible_pool.cc). Put/Take/FindFree* are inline: the
// deal calls them once per slot it fills. Every slot fill and clear counts
// one work unit (PmuArbiter::work_units()).
#ifndef PFM_KERNEL_PMU_ARBITER_CPU_SLOTS_H_
#define PFM_KERNEL_PMU_ARBITER_CPU_SLOTS_H_

#include <cassert>
#include <cstdint>

#include "kernel/pmu_arbiter/request.h"

namespace pfm {
namespace arbiter_internal {

class CpuSlots {
 public:
  // All slots of `shape` free. Slot fills and clears are added to
  // *work_units, which must outlive this.
  CpuSlots(int cpu, const PmuShape& shape, uint64_t* work_units);
  CpuSlots(const CpuSlots&) = delete;
  CpuSlots& operator=(const CpuSlots&) = delete;

  int cpu() const { return cpu_; }
  // Told of every Put and Take from now on (null: nobody); must outlive this.
  void set_observer(ScheduleObserver* o) { observer_ = o; }
  const PmuShape& shape() const { return shape_; }
  uint32_t gp_free() const { return gp_free_; }  // bit i: GP counter i free
  uint32_t fixed_free() const { return fixed_free_; }
  uint32_t dr_free() const { return dr_free_; }

  // Counters: the fixed counter if `r` may use it and it is free; a PEBS
  // request a PEBS-capable counter; any other a GP counter without PEBS
  // first, so the PEBS counters stay for PEBS requests. -1 if none fits.
  int FindFreeCounter(const Request& r) const {
    if (r.fixed_counter >= 0 && (fixed_free_ & (1u << r.fixed_counter)))
      return kFixedCounterBase + r.fixed_counter;
    uint32_t m = gp_free_ & shape_.pebs_mask;
    if (!r.pebs) {
      const uint32_t plain = gp_free_ & ~shape_.pebs_mask;
      if (plain != 0) m = plain;
    }
    return m != 0 ? __builtin_ctz(m) : -1;
  }
  int FindFreeDebugRegister() const {
    return dr_free_ != 0 ? __builtin_ctz(dr_free_) : -1;
  }
  int FindFree(const Request& r) const {
    return r.resource == ResourceClass::kCounter ? FindFreeCounter(r)
                                                 : FindFreeDebugRegister();
  }

  // Puts `r` (on no hardware) in the free `slot` (a FindFree* result) from
  // `now`.
  void Put(Request* r, int slot, uint64_t now) {
    assert(r->on_cpu < 0);
    ++*work_units_;
    if (r->resource == ResourceClass::kBreakpoint) {
      assert(dr_[InRange(slot)] == nullptr);
      dr_[InRange(slot)] = r;
      dr_free_ &= ~(1u << slot);
    } else if (slot >= kFixedCounterBase) {
      const int f = slot - kFixedCounterBase;
      assert(fixed_[f] == nullptr);
      fixed_[f] = r;
      fixed_free_ &= ~(1u << f);
    } else {
      assert(gp_[slot] == nullptr);
      gp_[slot] = r;
      gp_free_ &= ~(1u << slot);
    }
    r->on_cpu = cpu_;
    r->slot = static_cast<int8_t>(slot);
    r->on_since = now;
    if (observer_ != nullptr) Tell(*r, slot, true, now);
  }

  // Takes `r` (on this CPU) off and adds the interval to its running time.
  void Take(Request* r, uint64_t now) {
    assert(r->on_cpu == cpu_);
    ++*work_units_;
    const int slot = r->slot;
    if (r->resource == ResourceClass::kBreakpoint) {
      dr_[slot] = nullptr;
      dr_free_ |= 1u << slot;
    } else if (slot >= kFixedCounterBase) {
      const int f = slot - kFixedCounterBase;
      fixed_[f] = nullptr;
      fixed_free_ |= 1u << f;
    } else {
      gp_[slot] = nullptr;
      gp_free_ |= 1u << slot;
    }
    r->running += SatSub(now, r->on_since);
    r->on_cpu = -1;
    r->slot = -1;
    if (observer_ != nullptr) Tell(*r, slot, false, now);
  }

  // Takes off every request here, or only those of context `only`.
  void TakeAll(uint64_t now, const Context* only = nullptr);

  // Installs the pinned requests of the CPU context and the running task's
  // context (either may be null) into the free slots. Admission guarantees
  // they fit when the slots are empty but for pinned requests.
  void InstallPinned(const PinnedSet* cpu_context,
                     const PinnedSet* task_context, uint64_t now);

  Request* gp(int i) const { return gp_[i]; }
  Request* fixed(int i) const { return fixed_[i]; }
  Request* debug_register(int i) const { return dr_[i]; }
  // The request on hardware counter number `counter` (GP i or
  // kFixedCounterBase + i), or null.
  Request* OnCounter(int counter) const;

 private:
  void Tell(const Request& r, int slot, bool on, uint64_t now);

  // A debug register's slot in Put: below kMaxSlots, as FindFree* gives
  // (asserted, and said to the compiler: inlined into a caller that puts a
  // fixed counter, GCC -O2 sees that slot reach dr_ on the path the
  // request's resource rules out, and warns -Warray-bounds).
  static int InRange(int slot) {
    assert(slot >= 0 && slot < kMaxSlots);
    if (slot < 0 || slot >= kMaxSlots) __builtin_unreachable();
    return slot;
  }

  ScheduleObserver* observer_ = nullptr;
  const int cpu_;
  const PmuShape shape_;
  uint64_t* const work_units_;
  uint32_t gp_free_;
  uint32_t fixed_free_;
  uint32_t dr_free_;
  Request* gp_[kMaxSlots] = {};
  Request* fixed_[kMaxSlots] = {};
  Request* dr_[kMaxSlots] = {};
};

}  // namespace arbiter_internal
}  // namespace pfm

#endif  // PFM_KERNEL_PMU_ARBITER_CPU_SLOTS_H_
