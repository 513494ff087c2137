// The flexible pool: requests that wait for a slot, how the free slots of a
// CPU are dealt to them, and how the next round starts (rotation). The
// policy, with examples, is docs/arbiter.md "Scheduling".
//
// A context has one FlexiblePool per resource class. In a pool, each session
// has a SessionQueue: its requests in rotation order, and per fixed counter
// a FixedQueue of those among them that may use it. The sessions form a
// ring (the round-robin), and for each fixed counter the sessions with a
// request for it form another ring (who gets that fixed counter next once
// the GP counters are full). All of these are IntrusiveRings.
//
// Cost: a deal does one step per slot it fills (plus bounded skips of PEBS
// requests), a rotation one step per request the last deal placed; neither
// walks the waiting requests or allocates. Add and Remove are O(log
// sessions) and are the control path.
#ifndef PFM_KERNEL_PMU_ARBITER_FLEXIBLE_POOL_H_
#define PFM_KERNEL_PMU_ARBITER_FLEXIBLE_POOL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "kernel/pmu_arbiter/cpu_slots.h"
#include "kernel/pmu_arbiter/intrusive_ring.h"
#include "kernel/pmu_arbiter/request.h"

namespace pfm {
namespace arbiter_internal {

// A session's requests that may use one fixed counter, in rotation order
// (its rotation ring restricted to them). The front is the first of them at
// or after the front of the session's rotation order.
struct FixedQueue {
  IntrusiveRing<Request, &Request::fixed_links> requests;
  // On the pool's ring for this fixed counter while `requests` is not empty.
  RingLinks<FixedQueue> ring_links;
};

// One session's requests in one pool. The first 64 bytes are what a deal
// touches.
struct SessionQueue {
  RingLinks<SessionQueue> ring_links;  // on the pool's ring of sessions
  // In rotation order; the current round starts at the front.
  IntrusiveRing<Request, &Request::rotation_links> requests;
  int count = 0;
  // Deal state; valid only while stamp == the pool's deal stamp, which
  // makes resetting it O(1) per visited session instead of O(sessions).
  int visited = 0;
  uint64_t stamp = 0;
  Request* next_to_visit = nullptr;
  uint64_t session = 0;

  FixedQueue fixed[kFixedEligible];  // by fixed counter
};

// The flexible requests of one context and one resource class.
class FlexiblePool {
 public:
  FlexiblePool();
  FlexiblePool(const FlexiblePool&) = delete;
  FlexiblePool& operator=(const FlexiblePool&) = delete;

  // `r` (flexible; session, resource class, fixed counter and PEBS set)
  // joins the back of its session's rotation order, and of its session's
  // queue for its fixed counter. A new session joins the back of the session
  // ring, and of the ring for that fixed counter: it waits its turn.
  void Add(Request* r);
  // Takes `r` (in this pool) out; its session goes when it was the last.
  void Remove(Request* r);

  int total() const { return total_; }
  // The last deal left a request waiting.
  bool oversubscribed() const { return total_ > 0 && left_waiting_; }

  // Deals the free slots of `cpu` of class `resource` to the flexible
  // requests of the CPU context (`cpu_pool`) and of the task context running
  // there (`task_pool`); either may be null. Pinned requests must be on
  // `cpu` already. See flexible_pool.cc for the policy.
  static void Deal(ResourceClass resource, FlexiblePool* cpu_pool,
                   FlexiblePool* task_pool, CpuSlots& cpu, uint64_t now,
                   uint64_t* work_units);

  // Starts the next round after the last deal, if that deal is still valid
  // (no Add/Remove since), left a request waiting and placed one. Returns
  // whether it did (the CPU must then be dealt again).
  bool Rotate(uint64_t* work_units);

 private:
  using SessionRing = IntrusiveRing<SessionQueue, &SessionQueue::ring_links>;
  using RotationRing = IntrusiveRing<Request, &Request::rotation_links>;
  using FixedRing = IntrusiveRing<FixedQueue, &FixedQueue::ring_links>;

  void StartDeal();
  Request* NextCandidate(uint64_t* work_units);
  void UnhideSessions();
  void Place(CpuSlots& cpu, Request* r, int slot, uint64_t now);

  SessionRing sessions_;  // the current round starts at the front
  int total_ = 0;
  int pebs_total_ = 0;  // PEBS requests among them
  // Per fixed counter, the sessions with requests for it; the front is the
  // next to get it when the GP counters are full.
  FixedRing fixed_rings_[kFixedEligible];
  std::map<uint64_t, std::unique_ptr<SessionQueue>> by_session_;

  // The last deal, which rotation continues from.
  uint64_t last_stamp_ = 0;  // stamps handed out by deals and rotations
  uint64_t deal_stamp_ = 0;  // the last deal's
  bool deal_valid_ = false;    // no Add/Remove since
  bool left_waiting_ = false;  // some request was not placed
  int visited_ = 0;
  int pebs_visited_ = 0;
  SessionQueue* walk_ = nullptr;         // where the deal continues
  SessionQueue* last_served_ = nullptr;  // last one served in step 1
  FixedQueue* fixed_served_[kFixedEligible] = {};  // got the fixed counter
  std::vector<Request*> placed_;        // in placement order, capacity fixed
  std::vector<SessionQueue*> hidden_;   // exhausted, hidden for the deal
};

// A context's flexible requests: a pool per resource class, rotated together
// once per mux interval of the context's own clock.
struct FlexibleRequests {
  ByResourceClass<FlexiblePool> pools;
  // Context clock at the last rotation (or while not oversubscribed).
  uint64_t rotated_at = 0;

  // Rotates the pools if one is oversubscribed and `context_now` is a mux
  // interval past the last rotation; returns whether any rotated. While
  // none is oversubscribed the interval does not run.
  bool RotateIfDue(uint64_t context_now, uint64_t mux_interval_ns,
                   uint64_t* work_units);
};

}  // namespace arbiter_internal
}  // namespace pfm

#endif  // PFM_KERNEL_PMU_ARBITER_FLEXIBLE_POOL_H_
