// The deal and rotation of the flexible pool, through PmuArbiter, against a
// plain O(waiting) model of the rules in docs/arbiter.md.
#include <linux/perf_event.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernel/pmu_arbiter/arbiter.h"
#include "kernel/pmu_arbiter/arbiter_test_util.h"

namespace pfm {
namespace arbiter_test {
namespace {

// A plain model of the dealing and rotation rules of docs/arbiter.md for one
// task context's flexible counters, with O(waiting) lists where the arbiter
// keeps cursors, counts and per-fixed-counter rings. The arbiter must put
// exactly the same requests on exactly the same counters.
class DealModel {
 public:
  // Request classes: GP-only, PEBS, or may use fixed counter 0/1/2.
  static constexpr int kGeneric = -2;
  static constexpr int kPebsOnly = -1;

  DealModel(int gp, uint32_t pebs_mask, int fixed)
      : gp_(gp), pebs_mask_(pebs_mask), fixed_(fixed) {}

  void Add(RequestId id, uint64_t session, int cls) {
    cls_[id] = cls;
    session_[id] = session;
    std::vector<RequestId>& order = order_[session];
    if (order.empty()) ring_.push_back(session);
    if (cls >= 0 && FixedCount(session, cls) == 0)
      fixed_ring_[cls].push_back(session);
    order.push_back(id);
  }

  void Remove(RequestId id) {
    const uint64_t s = session_.at(id);
    const int cls = cls_.at(id);
    std::vector<RequestId>& order = order_[s];
    order.erase(std::find(order.begin(), order.end(), id));
    if (cls >= 0 && FixedCount(s, cls) == 0) Erase(fixed_ring_[cls], s);
    if (order.empty()) {
      order_.erase(s);
      Erase(ring_, s);
    }
    cls_.erase(id);
    session_.erase(id);
  }

  // Deals every counter afresh; returns request -> counter.
  std::map<RequestId, int> Deal() {
    uint32_t gp_free = gp_ >= 32 ? ~0u : (1u << gp_) - 1;
    uint32_t fixed_free = (1u << fixed_) - 1;
    placed_.clear();
    slot_.clear();
    has_last_served_ = false;
    for (bool& b : has_fixed_served_) b = false;
    std::map<uint64_t, size_t> visited;
    size_t total = 0, pebs_total = 0, nvisited = 0, pebs_visited = 0;
    for (const auto& [id, cls] : cls_) {
      ++total;
      if (cls == kPebsOnly) ++pebs_total;
    }
    int budget = 2 * (gp_ + fixed_) + 2;
    size_t walk = 0;
    while (gp_free != 0 && budget > 0 && nvisited < total) {
      if ((gp_free & pebs_mask_) == 0 &&
          nvisited - pebs_visited == total - pebs_total)
        break;
      // The next session in ring order with a request not yet visited.
      size_t k = walk;
      while (visited[ring_[k % ring_.size()]] ==
             order_[ring_[k % ring_.size()]].size())
        ++k;
      const uint64_t s = ring_[k % ring_.size()];
      walk = (k + 1) % ring_.size();
      const RequestId r = order_[s][visited[s]++];
      ++nvisited;
      const int cls = cls_[r];
      if (cls == kPebsOnly) ++pebs_visited;
      int slot = -1;
      if (cls >= 0 && (fixed_free & (1u << cls))) {
        slot = kFixedCounterBase + cls;
        fixed_free &= ~(1u << cls);
      } else {
        uint32_t m = gp_free & pebs_mask_;
        if (cls != kPebsOnly && (gp_free & ~pebs_mask_) != 0)
          m = gp_free & ~pebs_mask_;
        if (m != 0) {
          slot = __builtin_ctz(m);
          gp_free &= ~(1u << slot);
        }
      }
      if (slot < 0) {
        --budget;
        continue;
      }
      Place(r, slot);
      last_served_ = s;
      has_last_served_ = true;
    }
    if (gp_free == 0) {
      for (int f = 0; f < fixed_; ++f) {
        if (!(fixed_free & (1u << f)) || fixed_ring_[f].empty()) continue;
        const uint64_t s = fixed_ring_[f].front();
        for (RequestId r : order_[s]) {
          if (cls_[r] != f) continue;
          Place(r, kFixedCounterBase + f);
          break;
        }
        fixed_served_[f] = s;
        has_fixed_served_[f] = true;
      }
    }
    return slot_;
  }

  bool Oversubscribed() const { return placed_.size() < cls_.size(); }

  // The next round, after the last Deal.
  void Rotate() {
    if (placed_.empty() || !Oversubscribed()) return;
    std::map<uint64_t, std::vector<RequestId>> moved;  // in placement order
    std::map<uint64_t, size_t> front;  // placed requests at the front
    for (auto& [s, order] : order_) {
      size_t n = 0;
      while (n < order.size() && slot_.count(order[n])) ++n;
      front[s] = n;
    }
    for (RequestId r : placed_) {
      const uint64_t s = session_[r];
      const std::vector<RequestId>& order = order_[s];
      const size_t pos = std::find(order.begin(), order.end(), r) - order.begin();
      if (pos >= front[s]) moved[s].push_back(r);
    }
    for (auto& [s, order] : order_) {
      if (front[s] == order.size()) continue;  // all placed: unchanged
      std::vector<RequestId> next;
      for (RequestId r : order)
        if (!slot_.count(r)) next.push_back(r);
      next.insert(next.end(), order.begin(), order.begin() + front[s]);
      for (RequestId r : moved[s]) next.push_back(r);
      order = next;
    }
    if (has_last_served_) StartAfter(ring_, last_served_);
    for (int f = 0; f < 3; ++f)
      if (has_fixed_served_[f]) StartAfter(fixed_ring_[f], fixed_served_[f]);
  }

 private:
  void Place(RequestId r, int slot) {
    slot_[r] = slot;
    placed_.push_back(r);
  }
  size_t FixedCount(uint64_t s, int f) const {
    auto it = order_.find(s);
    if (it == order_.end()) return 0;
    size_t n = 0;
    for (RequestId r : it->second) n += cls_.at(r) == f;
    return n;
  }
  static void Erase(std::vector<uint64_t>& ring, uint64_t s) {
    ring.erase(std::find(ring.begin(), ring.end(), s));
  }
  static void StartAfter(std::vector<uint64_t>& ring, uint64_t s) {
    auto it = std::find(ring.begin(), ring.end(), s);
    std::rotate(ring.begin(), it + 1, ring.end());
  }

  int gp_;
  uint32_t pebs_mask_;
  int fixed_;
  std::map<RequestId, int> cls_;
  std::map<RequestId, uint64_t> session_;
  std::map<uint64_t, std::vector<RequestId>> order_;  // rotation order
  std::vector<uint64_t> ring_;                        // from the cursor
  std::vector<uint64_t> fixed_ring_[3];
  std::vector<RequestId> placed_;
  std::map<RequestId, int> slot_;
  uint64_t last_served_ = 0;
  bool has_last_served_ = false;
  uint64_t fixed_served_[3] = {};
  bool has_fixed_served_[3] = {};
};

std::map<RequestId, int> Placement(const PmuArbiter& a) {
  ScheduledCounter sc[64];
  const int n = a.Scheduled(0, sc, 64);
  std::map<RequestId, int> m;
  for (int i = 0; i < n; ++i) m[sc[i].request] = sc[i].counter;
  return m;
}

// Random adds, removes, switches and rotations (deterministic seeds) on two
// machine shapes; after every step the arbiter's counters match the model's.
TEST(FlexiblePoolTest, DealAndRotationMatchAPlainModel) {
  struct Shape {
    int gp;
    uint32_t pebs_mask;
  };
  for (const Shape shape : {Shape{8, 0xf}, Shape{4, 0x3}}) {
    for (uint64_t seed0 : {1u, 2u, 3u}) {
      SCOPED_TRACE("gp " + std::to_string(shape.gp) + " seed " +
                   std::to_string(seed0));
      MachineInfo m = Skl(1);
      m.gp_counters = shape.gp;
      m.pebs_counter_mask = shape.pebs_mask;
      PmuArbiter a(m, kMs);
      DealModel model(shape.gp, shape.pebs_mask, 3);
      uint64_t seed = seed0;
      auto rnd = [&seed](uint64_t n) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        return (seed >> 33) % n;
      };
      std::vector<RequestId> live;
      const TaskId task{kPid, kPid};
      uint64_t t = 0;
      a.SwitchIn(0, task, t);
      model.Deal();
      bool dirty = false;
      for (int step = 0; step < 3000; ++step) {
        const uint64_t op = rnd(10);
        if (op < 4 || live.size() < 4) {  // add
          const uint64_t session = 1 + rnd(6);
          const uint64_t kind = rnd(10);
          pfm_pmu_req req = Raw(kPid, static_cast<int>(rnd(50)), 0);
          int cls = DealModel::kGeneric;
          if (kind < 2) {
            req.flags = PFM_REQ_PEBS;
            cls = DealModel::kPebsOnly;
          } else if (kind < 5) {
            const uint64_t cfg[3] = {0xc0, 0x3c, 0x300};
            cls = static_cast<int>(rnd(3));
            req.config = cfg[cls];
          }
          const int id = a.Add(req, session, "x", t, nullptr);
          ASSERT_GT(id, 0);
          model.Add(static_cast<RequestId>(id), session, cls);
          live.push_back(static_cast<RequestId>(id));
          dirty = true;
        } else if (op < 6) {  // remove
          const size_t i = rnd(live.size());
          a.Remove(live[i], t);
          model.Remove(live[i]);
          live.erase(live.begin() + static_cast<long>(i));
          dirty = true;
        } else if (op < 7) {  // switch out and back in: the same round
          a.SwitchOut(0, t);
          a.SwitchIn(0, task, t);
          model.Deal();
          dirty = false;
        } else {  // the mux timer, a mux interval later: rotates
          t += kMs;
          a.Tick(0, t);
          if (dirty) model.Deal();
          dirty = false;
          if (model.Oversubscribed()) {
            model.Rotate();
            model.Deal();
          }
        }
        if (dirty) continue;  // the arbiter refills at the next Tick
        const std::map<RequestId, int> want = model.Deal();
        ASSERT_EQ(Placement(a), want) << "step " << step;
      }
    }
  }
}

}  // namespace
}  // namespace arbiter_test
}  // namespace pfm
