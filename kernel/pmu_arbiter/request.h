// The arbiter's data model, shared by admission (admission.h), the CPU's
// slots (cpu_slots.h) and the flexible pool (flexible_pool.h): the machine's
// shape, resource classes, pinned demand, and one request.
//
// RequestId and the hardware counter numbering are part of PmuArbiter's API
// (arbiter.h includes this header for them); everything in
// arbiter_internal is not.
#ifndef PFM_KERNEL_PMU_ARBITER_REQUEST_H_
#define PFM_KERNEL_PMU_ARBITER_REQUEST_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernel/drivers/driver.h"
#include "kernel/pmu_arbiter/intrusive_ring.h"

namespace pfm {

using RequestId = uint32_t;  // > 0; 0 means "none"

// Hardware counter numbering shared with drivers (ScheduledCounter::counter):
// GP counters are 0..gp_counters-1, fixed counter i is kFixedCounterBase + i.
inline constexpr int kFixedCounterBase = 32;

// One request going on or off one CPU's hardware: the arbiter's schedule as
// it happens (PmuArbiter::set_schedule_observer).
struct ScheduleChange {
  int cpu = 0;
  RequestId request = 0;
  uint64_t session = 0;
  int32_t pid = 0;  // the task context's pid; 0 for a CPU context
  int slot = -1;    // counter number (as above) or debug register
  bool on = false;
  uint64_t now = 0;
};

// Told of every ScheduleChange, synchronously, under the caller's lock (the
// kernel's). Must not call back into the arbiter.
class ScheduleObserver {
 public:
  virtual ~ScheduleObserver() = default;
  virtual void OnSchedule(const ScheduleChange& change) = 0;
};

namespace arbiter_internal {

inline constexpr int kMaxSlots = 32;       // per kind of slot (GP, fixed, DR)
inline constexpr int kFixedEligible = 3;   // instructions, cycles, ref-cycles
inline constexpr int kLabelBytes = 48;     // PmuArbiter::kLabelBytes

inline uint32_t LowMask(int n) { return n >= 32 ? 0xffffffffu : (1u << n) - 1; }
inline uint64_t SatSub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

// What the arbiter hands out: counters (GP + fixed) and debug registers,
// admitted and multiplexed independently of each other.
enum class ResourceClass : uint8_t { kCounter = 0, kBreakpoint = 1 };
inline constexpr int kResourceClasses = 2;

// One T per resource class, indexed by the class.
template <typename T>
struct ByResourceClass {
  std::array<T, kResourceClasses> of;

  T& operator[](ResourceClass c) { return of[static_cast<int>(c)]; }
  const T& operator[](ResourceClass c) const {
    return of[static_cast<int>(c)];
  }
  T* begin() { return of.data(); }
  T* end() { return of.data() + kResourceClasses; }
  const T* begin() const { return of.data(); }
  const T* end() const { return of.data() + kResourceClasses; }
};

// The machine as the arbiter sees it: every count clamped to kMaxSlots, the
// PEBS mask restricted to the GP counters that exist.
struct PmuShape {
  int cpus = 0;
  int gp_counters = 0;
  int fixed_counters = 0;
  int debug_registers = 0;
  uint32_t gp_mask = 0;    // the GP counters
  uint32_t pebs_mask = 0;  // the PEBS-capable GP counters

  static PmuShape From(const MachineInfo& m) {
    PmuShape s;
    s.cpus = m.cpus;
    s.gp_counters = std::clamp(m.gp_counters, 0, kMaxSlots);
    s.fixed_counters = std::clamp(m.fixed_counters, 0, kMaxSlots);
    s.debug_registers = std::clamp(m.debug_registers, 0, kMaxSlots);
    s.gp_mask = LowMask(s.gp_counters);
    s.pebs_mask = m.pebs_counter_mask & s.gp_mask;
    return s;
  }
  int pebs_counters() const { return __builtin_popcount(pebs_mask); }
  // Slots a deal of class `c` can fill on one CPU.
  int slots(ResourceClass c) const {
    return c == ResourceClass::kCounter ? gp_counters + fixed_counters
                                        : debug_registers;
  }
};

// Pinned demand of a context, in the units the admission formula needs
// (admission.cc).
struct Demand {
  int pebs = 0;                    // PEBS counters: only in pebs_mask
  int generic = 0;                 // any GP counter
  int fixed[kFixedEligible] = {};  // may use fixed counter i or any GP
  int bp = 0;                      // debug registers

  void Add(const Demand& o, int sign) {
    pebs += sign * o.pebs;
    generic += sign * o.generic;
    for (int i = 0; i < kFixedEligible; ++i) fixed[i] += sign * o.fixed[i];
    bp += sign * o.bp;
  }
  // GP counters needed: fixed-eligible events beyond the first of their kind
  // spill onto GP counters. Fixed counters that don't exist were never
  // counted in fixed[] (such events are generic).
  int GpNeed() const {
    int n = pebs + generic;
    for (int i = 0; i < kFixedEligible; ++i) n += std::max(0, fixed[i] - 1);
    return n;
  }
};

struct SessionQueue;  // flexible_pool.h
struct Context;       // context.h

// One admitted request. Hot fields first: a deal, a rotation and a slot
// change touch only the first 64 bytes of each request they visit (one or
// two cache lines; alignas(64) measured no faster in bench/arbiter and costs
// 25% more memory per request), not fields spread over the whole object.
struct Request {
  // Flexible: on its session queue's ring, in rotation order.
  RingLinks<Request> rotation_links;
  SessionQueue* session_queue = nullptr;  // flexible only
  Context* context = nullptr;
  uint64_t placed_stamp = 0;  // == its pool's stamp: placed in the last deal
  // Accounting: on_since is `now` when it went on the hardware.
  uint64_t on_since = 0;
  uint64_t running = 0;
  int32_t on_cpu = -1;
  int8_t slot = -1;           // counter (GP i / kFixedCounterBase + i) or DR
  int8_t fixed_counter = -1;  // the fixed counter it may use, -1 = GP only
  bool pebs = false;
  ResourceClass resource = ResourceClass::kCounter;

  // Flexible and fixed-eligible: on its session's ring of requests for
  // fixed_counter, in the same order as rotation_links.
  RingLinks<Request> fixed_links;
  RequestId id = 0;
  bool pinned = false;
  uint32_t type = 0;
  uint64_t config = 0;
  uint64_t session = 0;
  int32_t pid = 0;  // its task context's pid; 0 for a CPU context
  uint64_t value = 0;
  uint64_t enabled_base = 0;  // on the context clock
  Demand demand;  // what it adds to its context's pinned demand
  char label[kLabelBytes] = {};
};
static_assert(offsetof(Request, fixed_links) == 64,
              "what a deal touches is a request's first 64 bytes");

// A context's pinned requests, and what they demand together.
struct PinnedSet {
  Demand demand;
  ByResourceClass<std::vector<Request*>> requests;

  void Add(Request* r) {
    requests[r->resource].push_back(r);
    demand.Add(r->demand, +1);
  }
  void Remove(Request* r) {
    std::vector<Request*>& v = requests[r->resource];
    v.erase(std::find(v.begin(), v.end(), r));
    demand.Add(r->demand, -1);
  }
  bool holds(ResourceClass c) const { return !requests[c].empty(); }
};

}  // namespace arbiter_internal
}  // namespace pfm

#endif  // PFM_KERNEL_PMU_ARBITER_REQUEST_H_
