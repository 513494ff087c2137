#include "kernel/pmu_arbiter/flexible_pool.h"

#include <cassert>
#include <cstddef>

namespace pfm {
namespace arbiter_internal {

namespace {

// Per deal of one class: slots (GP + fixed counters), and requests visited
// (one per slot placed plus the unfit budget, 2 * slots + 2).
constexpr int kMaxDealSlots = 2 * kMaxSlots;
constexpr int kMaxDealVisits = 3 * kMaxDealSlots + 2;

static_assert(offsetof(SessionQueue, fixed) <= 64,
              "what a deal touches is a session's first 64 bytes");

}  // namespace

FlexiblePool::FlexiblePool() {
  // A deal places at most one request per slot and visits at most
  // slots + unfit-budget requests (see Deal): nothing grows on the
  // scheduling path.
  placed_.reserve(kMaxDealSlots);
  hidden_.reserve(kMaxDealVisits);
}

void FlexiblePool::Add(Request* r) {
  std::unique_ptr<SessionQueue>& owned = by_session_[r->session];
  if (!owned) {
    owned = std::make_unique<SessionQueue>();
    owned->session = r->session;
    sessions_.PushBack(owned.get());
  }
  SessionQueue* s = owned.get();
  r->session_queue = s;
  s->requests.PushBack(r);
  ++s->count;
  ++total_;
  if (r->pebs) ++pebs_total_;
  if (r->fixed_counter >= 0) {
    FixedQueue& q = s->fixed[r->fixed_counter];
    if (q.requests.empty()) fixed_rings_[r->fixed_counter].PushBack(&q);
    q.requests.PushBack(r);
  }
  deal_valid_ = false;
}

void FlexiblePool::Remove(Request* r) {
  SessionQueue* s = r->session_queue;
  if (r->fixed_counter >= 0) {
    FixedQueue& q = s->fixed[r->fixed_counter];
    q.requests.Remove(r);
    if (q.requests.empty()) fixed_rings_[r->fixed_counter].Remove(&q);
  }
  if (r->pebs) --pebs_total_;
  if (s->count == 1) {
    sessions_.Remove(s);
    by_session_.erase(s->session);
  } else {
    s->requests.Remove(r);
    --s->count;
  }
  r->session_queue = nullptr;
  --total_;
  deal_valid_ = false;
}

void FlexiblePool::StartDeal() {
  deal_stamp_ = ++last_stamp_;
  deal_valid_ = true;
  visited_ = 0;
  pebs_visited_ = 0;
  walk_ = sessions_.front();
  last_served_ = nullptr;
  for (FixedQueue*& q : fixed_served_) q = nullptr;
  placed_.clear();
  hidden_.clear();
}

// The next flexible request of a deal: from the session at the walk
// position, that session's next request. Sessions whose requests were all
// visited in this deal are hidden for the rest of it (dancing links,
// restored by UnhideSessions), so every step yields a request and the work
// is bounded by what gets placed, not by what waits.
Request* FlexiblePool::NextCandidate(uint64_t* work_units) {
  if (visited_ >= total_ || walk_ == nullptr) return nullptr;
  if (hidden_.size() == hidden_.capacity()) return nullptr;  // budget
  ++*work_units;
  SessionQueue* s = walk_;
  if (s->stamp != deal_stamp_) {
    s->stamp = deal_stamp_;
    s->next_to_visit = s->requests.front();
    s->visited = 0;
  }
  Request* r = s->next_to_visit;
  s->next_to_visit = RotationRing::Next(r);
  ++s->visited;
  ++visited_;
  if (r->pebs) ++pebs_visited_;
  walk_ = SessionRing::Next(s);
  if (s->visited == s->count && visited_ < total_) {
    SessionRing::Hide(s);
    hidden_.push_back(s);
  }
  return r;
}

void FlexiblePool::UnhideSessions() {
  for (auto it = hidden_.rbegin(); it != hidden_.rend(); ++it)
    SessionRing::Unhide(*it);
  hidden_.clear();
}

void FlexiblePool::Place(CpuSlots& cpu, Request* r, int slot, uint64_t now) {
  cpu.Put(r, slot, now);
  r->placed_stamp = deal_stamp_;
  placed_.push_back(r);
}

/*
 * Flexible dealing for one class on one CPU. Free slots go one at a time,
 * alternating between the CPU context and the task context (CPU first), and
 * inside each context round-robin over its sessions, each session giving its
 * next request in rotation order. A session gets at most as many slots as it
 * has requests, so what a small session does not need goes to the others:
 * max-min fair between sessions.
 *
 * Counters are dealt in two steps, so that no step probes a request that
 * cannot fit:
 *  1. While a GP counter is free, every request but PEBS fits one, so the
 *     round-robin above runs as is (a fixed-eligible request takes its fixed
 *     counter if free). A PEBS request while the PEBS counters are taken is
 *     skipped and keeps its place (at most 2*slots+2 skips per deal), and a
 *     context whose unvisited requests are all PEBS stops there (counts).
 *  2. Once the GP counters are full, only fixed counter i's own events fit
 *     fixed counter i. If it is still free, none of them was visited in
 *     step 1 (the first would have taken it), so it goes straight to the
 *     first such request of the next session in the context's ring for
 *     fixed counter i; contexts keep alternating. Nothing is visited for a
 *     fixed counter no waiting request can use.
 * Debug registers are dealt by step 1 alone.
 * Work: one step per slot filled, plus PEBS skips; never per waiting request.
 */
void FlexiblePool::Deal(ResourceClass resource, FlexiblePool* cpu_pool,
                        FlexiblePool* task_pool, CpuSlots& cpu, uint64_t now,
                        uint64_t* work_units) {
  FlexiblePool* pools[2] = {cpu_pool, task_pool};
  for (FlexiblePool*& p : pools) {
    if (p != nullptr && p->total_ == 0) p = nullptr;
    if (p != nullptr) p->StartDeal();
  }
  if (pools[0] == nullptr && pools[1] == nullptr) return;
  const bool counters = resource == ResourceClass::kCounter;
  const uint32_t pebs_mask = cpu.shape().pebs_mask;
  int unfit_budget = 2 * cpu.shape().slots(resource) + 2;
  int turn = 0;  // the context whose turn is next
  // Step 1: the round-robin, while a GP counter (debug register) is free.
  auto general_slot_free = [&]() {
    return counters ? cpu.gp_free() != 0 : cpu.dr_free() != 0;
  };
  while (general_slot_free() && unfit_budget > 0) {
    bool any = false;
    for (int i = 0; i < 2 && general_slot_free(); ++i) {
      FlexiblePool* p = pools[i];
      if (p == nullptr) continue;
      // Only PEBS requests left and no PEBS counter free: none can fit.
      if (counters && (cpu.gp_free() & pebs_mask) == 0 &&
          p->visited_ - p->pebs_visited_ == p->total_ - p->pebs_total_)
        continue;
      Request* r = p->NextCandidate(work_units);
      if (r == nullptr) continue;
      any = true;
      const int slot =
          counters ? cpu.FindFreeCounter(*r) : cpu.FindFreeDebugRegister();
      if (slot < 0) {
        --unfit_budget;
        continue;
      }
      p->Place(cpu, r, slot, now);
      p->last_served_ = r->session_queue;
      turn = 1 - i;
    }
    if (!any) break;
  }
  for (FlexiblePool* p : pools)
    if (p != nullptr) p->UnhideSessions();
  // Step 2: fixed counters still free once the GP counters are full.
  if (counters && cpu.gp_free() == 0) {
    for (uint32_t m = cpu.fixed_free(); m != 0; m &= m - 1) {
      const int f = __builtin_ctz(m);
      for (int k = 0; k < 2; ++k) {
        const int i = (turn + k) % 2;
        FlexiblePool* p = pools[i];
        if (p == nullptr || p->fixed_rings_[f].empty()) continue;
        ++*work_units;
        FixedQueue* q = p->fixed_rings_[f].front();
        Request* r = q->requests.front();
        assert(r->on_cpu < 0 &&
               "fixed counter free: none of its events placed");
        if (r->on_cpu >= 0) continue;
        p->Place(cpu, r, kFixedCounterBase + f, now);
        p->fixed_served_[f] = q;
        turn = 1 - i;
        break;
      }
    }
  }
  for (FlexiblePool* p : pools)
    if (p != nullptr)
      p->left_waiting_ = static_cast<int>(p->placed_.size()) < p->total_;
}

/*
 * Starts the next round after the last deal. In each session, the requests
 * that were placed move to the back of its rotation order (those already at
 * its front stay in their order, the others follow in the order they were
 * placed); the ones left waiting keep their order at the front: those
 * visited but not placed (no free counter fit them, e.g. PEBS while the PEBS
 * counters were taken), then those not visited. So every request waits at
 * most as many rounds as there are requests ahead of it. The session ring
 * starts after the last session served in step 1 of the deal, and each fixed
 * counter's ring after the session that got that fixed counter in step 2,
 * so sessions take turns for any odd leftover slot.
 * Work: one step per request placed by the deal (walked past at the front,
 * or moved).
 */
bool FlexiblePool::Rotate(uint64_t* work_units) {
  if (!deal_valid_ || !left_waiting_ || placed_.empty()) return false;
  // Marks the sessions whose new start is settled (the deal's per-session
  // state is not needed any more: the next deal starts afresh).
  const uint64_t settled = ++last_stamp_;
  for (Request* r : placed_) {
    SessionQueue* s = r->session_queue;
    if (s->stamp != settled) {
      s->stamp = settled;
      // The new start: the first request not placed. Those placed before it
      // are at the back once the start moves past them.
      Request* q = s->requests.front();
      for (int k = 0; k < s->count && q->placed_stamp == deal_stamp_; ++k) {
        ++*work_units;
        q->placed_stamp = 0;
        q = RotationRing::Next(q);
      }
      s->requests.StartAt(q);  // all placed: back at the start, no change
    }
    // The placed ones of a fixed counter's queue are its first ones, met
    // here in queue order (see Deal): the queue follows the rotation.
    if (r->fixed_counter >= 0) {
      FixedQueue& fq = s->fixed[r->fixed_counter];
      assert(fq.requests.front() == r);
      fq.requests.StartAfter(r);
    }
    if (r->placed_stamp != deal_stamp_) continue;  // already at the back
    ++*work_units;
    r->placed_stamp = 0;
    s->requests.MoveToBack(r);
  }
  if (last_served_ != nullptr) sessions_.StartAfter(last_served_);
  for (int f = 0; f < kFixedEligible; ++f)
    if (fixed_served_[f] != nullptr)
      fixed_rings_[f].StartAfter(fixed_served_[f]);
  deal_valid_ = false;
  return true;
}

bool FlexibleRequests::RotateIfDue(uint64_t context_now,
                                   uint64_t mux_interval_ns,
                                   uint64_t* work_units) {
  bool waiting = false;
  for (const FlexiblePool& p : pools) waiting |= p.oversubscribed();
  if (!waiting) {
    rotated_at = context_now;  // the interval starts when requests wait
    return false;
  }
  if (SatSub(context_now, rotated_at) < mux_interval_ns) return false;
  bool rotated = false;
  // A pool changed since its last deal is re-dealt first and rotates at the
  // next check.
  for (FlexiblePool& p : pools) rotated |= p.Rotate(work_units);
  if (rotated) rotated_at = context_now;
  return rotated;
}

}  // namespace arbiter_internal
}  // namespace pfm
