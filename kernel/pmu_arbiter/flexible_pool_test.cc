// The flexible pool. First FlexiblePool on its own, on one CPU's slots:
// the round-robin between sessions and contexts, the fixed-counter rings,
// PEBS skips, rotation and its timer. Then its policy through PmuArbiter:
// max-min fair share between sessions (and for the fixed counters), and
// rotation. The work it costs: flexible_pool_cost_test.cc; the policy
// against a plain model: flexible_pool_model_test.cc.
#include "kernel/pmu_arbiter/flexible_pool.h"

#include <linux/perf_event.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernel/pmu_arbiter/arbiter.h"
#include "kernel/pmu_arbiter/arbiter_test_util.h"
#include "kernel/pmu_arbiter/cpu_slots.h"
#include "kernel/pmu_arbiter/request.h"

namespace pfm {
namespace arbiter_test {
namespace {

using arbiter_internal::CpuSlots;
using arbiter_internal::FlexiblePool;
using arbiter_internal::FlexibleRequests;
using arbiter_internal::PmuShape;
using arbiter_internal::Request;
using arbiter_internal::ResourceClass;

PmuShape Shape(int gp, int fixed, uint32_t pebs_mask, int dr) {
  MachineInfo m;
  m.cpus = 1;
  m.gp_counters = gp;
  m.fixed_counters = fixed;
  m.pebs_counter_mask = pebs_mask;
  m.debug_registers = dr;
  return PmuShape::From(m);
}

// One CPU's slots and the requests of the pools dealt onto it.
class OneCpu {
 public:
  OneCpu(int gp, int fixed, uint32_t pebs_mask, int dr = 0)
      : shape_(Shape(gp, fixed, pebs_mask, dr)), slots_(0, shape_, &work_) {}

  // A flexible request of `session` (ids 1, 2, ... in creation order).
  Request* New(uint64_t session, int fixed_counter = -1, bool pebs = false,
               ResourceClass resource = ResourceClass::kCounter) {
    auto r = std::make_unique<Request>();
    r->id = static_cast<RequestId>(requests_.size() + 1);
    r->session = session;
    r->fixed_counter = static_cast<int8_t>(fixed_counter);
    r->pebs = pebs;
    r->resource = resource;
    requests_.push_back(std::move(r));
    return requests_.back().get();
  }

  // Clears the slots and deals them afresh, as a switch does.
  void Deal(FlexiblePool* task_pool, FlexiblePool* cpu_pool = nullptr,
            ResourceClass resource = ResourceClass::kCounter) {
    slots_.TakeAll(0);
    FlexiblePool::Deal(resource, cpu_pool, task_pool, slots_, 0, &work_);
  }

  RequestId Gp(int i) const { return Id(slots_.gp(i)); }
  RequestId Fixed(int i) const { return Id(slots_.fixed(i)); }
  RequestId Dr(int i) const { return Id(slots_.debug_register(i)); }
  uint64_t work() const { return work_; }

 private:
  static RequestId Id(const Request* r) { return r != nullptr ? r->id : 0; }

  PmuShape shape_;
  uint64_t work_ = 0;
  CpuSlots slots_;
  std::vector<std::unique_ptr<Request>> requests_;
};

TEST(FlexiblePoolTest, DealsRoundRobinBetweenSessionsAndRotates) {
  OneCpu cpu(3, 0, 0);
  FlexiblePool pool;
  Request* a1 = cpu.New(1);
  Request* a2 = cpu.New(1);
  Request* a3 = cpu.New(1);
  Request* b1 = cpu.New(2);
  for (Request* r : {a1, a2, a3, b1}) pool.Add(r);
  EXPECT_EQ(pool.total(), 4);
  cpu.Deal(&pool);
  // A, B, then A again: B has nothing more to give.
  EXPECT_EQ(cpu.Gp(0), a1->id);
  EXPECT_EQ(cpu.Gp(1), b1->id);
  EXPECT_EQ(cpu.Gp(2), a2->id);
  EXPECT_EQ(cpu.work(), 3u + 3u);  // 3 requests visited, 3 slots filled
  EXPECT_TRUE(pool.oversubscribed());

  // The next round starts after A (served last) and at A's a3.
  uint64_t work = 0;
  EXPECT_TRUE(pool.Rotate(&work));
  EXPECT_EQ(work, 3u);  // one step per request placed
  EXPECT_FALSE(pool.Rotate(&work));  // once per deal
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Gp(0), b1->id);
  EXPECT_EQ(cpu.Gp(1), a3->id);
  EXPECT_EQ(cpu.Gp(2), a1->id);
}

TEST(FlexiblePoolTest, NewSessionWaitsItsTurnAndRemoveKeepsTheRing) {
  OneCpu cpu(1, 0, 0);
  FlexiblePool pool;
  Request* a1 = cpu.New(1);
  Request* a2 = cpu.New(1);
  pool.Add(a1);
  pool.Add(a2);
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Gp(0), a1->id);
  Request* b1 = cpu.New(2);
  pool.Add(b1);
  uint64_t work = 0;
  EXPECT_FALSE(pool.Rotate(&work));  // changed since the deal: deal first
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Gp(0), a1->id);  // the same round: B is behind A
  ASSERT_TRUE(pool.Rotate(&work));
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Gp(0), b1->id);
  ASSERT_TRUE(pool.Rotate(&work));
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Gp(0), a2->id);
  // B's only request goes, and B with it; A keeps its order.
  cpu.Deal(nullptr);
  pool.Remove(b1);
  EXPECT_EQ(pool.total(), 2);
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Gp(0), a2->id);
  ASSERT_TRUE(pool.Rotate(&work));
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Gp(0), a1->id);
}

// Once the GP counters are full, a free fixed counter goes to the next
// session in that counter's ring, without visiting GP-only requests.
TEST(FlexiblePoolTest, FreeFixedCounterGoesRoundItsSessions) {
  OneCpu cpu(1, 1, 0);
  FlexiblePool pool;
  Request* g1 = cpu.New(1);
  Request* i1 = cpu.New(2, 0);
  Request* i2 = cpu.New(2, 0);
  Request* i3 = cpu.New(3, 0);
  for (Request* r : {g1, i1, i2, i3}) pool.Add(r);
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Gp(0), g1->id);
  EXPECT_EQ(cpu.Fixed(0), i1->id);
  // g1 visited and placed, i1 picked and placed.
  EXPECT_EQ(cpu.work(), 4u);
  uint64_t work = 0;
  ASSERT_TRUE(pool.Rotate(&work));
  // The session ring starts after A, so B's i2 is first and takes fixed0,
  // then C's i3 the GP counter.
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Fixed(0), i2->id);
  EXPECT_EQ(cpu.Gp(0), i3->id);
}

// A PEBS request while the PEBS counters are taken is skipped and keeps
// its place at the front: it is first in the next round.
TEST(FlexiblePoolTest, SkippedPebsRequestKeepsItsPlace) {
  OneCpu cpu(2, 0, 0x1);
  FlexiblePool pool;
  Request* p1 = cpu.New(1, -1, true);
  Request* p2 = cpu.New(1, -1, true);
  Request* g1 = cpu.New(1);
  for (Request* r : {p1, p2, g1}) pool.Add(r);
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Gp(0), p1->id);
  EXPECT_EQ(cpu.Gp(1), g1->id);
  EXPECT_EQ(cpu.work(), 3u + 2u);  // p2 visited for nothing
  uint64_t work = 0;
  ASSERT_TRUE(pool.Rotate(&work));
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Gp(0), p2->id);
  EXPECT_EQ(cpu.Gp(1), g1->id);
}

TEST(FlexiblePoolTest, CpuContextDealsFirstThenContextsAlternate) {
  OneCpu cpu(0, 0, 0, 3);
  FlexiblePool cpu_pool, task_pool;
  std::vector<Request*> c, t;
  for (int i = 0; i < 3; ++i) {
    c.push_back(cpu.New(1, -1, false, ResourceClass::kBreakpoint));
    cpu_pool.Add(c.back());
    t.push_back(cpu.New(1, -1, false, ResourceClass::kBreakpoint));
    task_pool.Add(t.back());
  }
  cpu.Deal(&task_pool, &cpu_pool, ResourceClass::kBreakpoint);
  EXPECT_EQ(cpu.Dr(0), c[0]->id);
  EXPECT_EQ(cpu.Dr(1), t[0]->id);
  EXPECT_EQ(cpu.Dr(2), c[1]->id);
}

TEST(FlexiblePoolTest, RotationRunsOnTheContextClockOnlyWhileOversubscribed) {
  OneCpu cpu(2, 0, 0);
  FlexibleRequests flexible;
  FlexiblePool& pool = flexible.pools[ResourceClass::kCounter];
  Request* r1 = cpu.New(1);
  Request* r2 = cpu.New(1);
  Request* r3 = cpu.New(1);
  for (Request* r : {r1, r2, r3}) pool.Add(r);
  uint64_t work = 0;
  EXPECT_FALSE(flexible.RotateIfDue(0, 10, &work));  // never dealt
  EXPECT_EQ(flexible.rotated_at, 0u);
  cpu.Deal(&pool);
  EXPECT_FALSE(flexible.RotateIfDue(9, 10, &work));
  EXPECT_TRUE(flexible.RotateIfDue(10, 10, &work));
  EXPECT_EQ(flexible.rotated_at, 10u);
  cpu.Deal(&pool);
  EXPECT_EQ(cpu.Gp(0), r3->id);
  EXPECT_FALSE(flexible.RotateIfDue(19, 10, &work));
  // Not oversubscribed any more: the interval restarts when it is again.
  pool.Remove(r2);
  cpu.Deal(&pool);
  EXPECT_FALSE(flexible.RotateIfDue(100, 10, &work));
  EXPECT_EQ(flexible.rotated_at, 100u);
}

// Through PmuArbiter.

TEST(FlexiblePoolTest, FlexiblePebsWaitsForPebsCounter) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 4; ++i)
    ASSERT_GT(
        a.Add(Raw(kPid, i, PFM_REQ_PINNED | PFM_REQ_PEBS), 1, "p", 0, nullptr),
        0);
  const int flex = a.Add(Raw(kPid, 9, PFM_REQ_PEBS), 2, "flex", 0, nullptr);
  ASSERT_GT(flex, 0);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  RunCpu(a, 0, 0, 100 * kMs, 4 * kMs, [](RequestId, uint64_t) { return 1; });
  // GP 4-7 are free but can't do PEBS.
  EXPECT_FALSE(MustRead(a, flex, 100 * kMs).counted);
}

TEST(FlexiblePoolTest, DebuggerBreakpointsStayPinnedWhileWatchpointsRotate) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  const int bp0 = a.Add(TaskBp(kPid, 0x401000, 1, PFM_BP_X, PFM_REQ_PINNED), 1,
                        "0x401000:1:x", 0, nullptr);
  const int bp1 = a.Add(TaskBp(kPid, 0x401200, 1, PFM_BP_X, PFM_REQ_PINNED), 1,
                        "0x401200:1:x", 0, nullptr);
  ASSERT_GT(bp0, 0);
  ASSERT_GT(bp1, 0);
  std::vector<int> watch;
  for (int i = 0; i < 6; ++i) {
    watch.push_back(a.Add(TaskBp(kPid, 0x601000 + 8 * i, 8, PFM_BP_W, 0), 2,
                          "watch", 0, nullptr));
    ASSERT_GT(watch.back(), 0);
  }
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  RequestId slots[4];
  for (uint64_t t = 4 * kMs; t <= 1000 * kMs; t += 4 * kMs) {
    a.Tick(0, t);
    ASSERT_EQ(a.ScheduledBreakpoints(0, slots), 4);
  }
  const uint64_t end = 1000 * kMs;
  EXPECT_DOUBLE_EQ(MustRead(a, bp0, end).ratio, 1.0);
  EXPECT_DOUBLE_EQ(MustRead(a, bp1, end).ratio, 1.0);
  double sum = 0;
  for (int id : watch) {
    const PmuArbiter::Reading r = MustRead(a, id, end);
    EXPECT_TRUE(r.counted);
    EXPECT_GT(r.ratio, 0.3);
    EXPECT_LT(r.ratio, 0.37);
    sum += r.ratio;
  }
  EXPECT_NEAR(sum, 2.0, 0.01);
}

TEST(FlexiblePoolTest, FairShareIsBetweenSessionsNotEvents) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  std::vector<int> big;
  for (int i = 0; i < 10; ++i) {
    big.push_back(a.Add(Raw(kPid, i, 0), 1, "A", 0, nullptr));
    ASSERT_GT(big.back(), 0);
  }
  const int small = a.Add(Raw(kPid, 20, 0), 2, "B", 0, nullptr);
  ASSERT_GT(small, 0);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  for (uint64_t t = 4 * kMs; t <= 1000 * kMs; t += 4 * kMs) a.Tick(0, t);
  const uint64_t end = 1000 * kMs;
  EXPECT_DOUBLE_EQ(MustRead(a, small, end).ratio, 1.0);
  double sum = 0;
  for (int id : big) {
    const double ratio = MustRead(a, id, end).ratio;
    EXPECT_NEAR(ratio, 0.7, 0.02) << "request " << id;
    sum += ratio;
  }
  EXPECT_NEAR(sum, 7.0, 0.01);
}

TEST(FlexiblePoolTest, EqualSessionsShareEqually) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  std::vector<int> s1, s2;
  for (int i = 0; i < 12; ++i)
    s1.push_back(a.Add(Raw(kPid, i, 0), 1, "A", 0, nullptr));
  for (int i = 0; i < 3; ++i)
    s2.push_back(a.Add(Raw(kPid, 20 + i, 0), 2, "B", 0, nullptr));
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  for (uint64_t t = 4 * kMs; t <= 1200 * kMs; t += 4 * kMs) a.Tick(0, t);
  // 8 slots, B needs 3 <= its fair half: B runs fully, A gets 5 of 8.
  double sa = 0, sb = 0;
  for (int id : s1) sa += MustRead(a, id, 1200 * kMs).ratio;
  for (int id : s2) sb += MustRead(a, id, 1200 * kMs).ratio;
  EXPECT_NEAR(sb, 3.0, 0.01);
  EXPECT_NEAR(sa, 5.0, 0.01);
}

// The fixed counters no longer depend on how far the deal probes: an
// instructions event behind 100 GP-only events gets fixed0 every round
// (before, only in the rounds where it came within 2*slots+2 of the front),
// and the GP-only events share the 8 GP counters equally and scale.
TEST(FlexiblePoolTest, FixedEligibleEventFarBehindGpOnlyEventsKeepsFixedCounter) {
  for (bool one_session : {false, true}) {
    SCOPED_TRACE(one_session ? "one session" : "one session per request");
    PmuArbiter a(Skl(1), kDefaultMuxIntervalNs);
    std::vector<int> gp;
    for (int i = 0; i < 100; ++i) {
      gp.push_back(a.Add(Raw(kPid, i, 0), one_session ? 1 : 1 + i, "ev", 0,
                         nullptr));
      ASSERT_GT(gp.back(), 0);
    }
    const int inst = a.Add(TaskCounter(kPid, PERF_TYPE_HARDWARE,
                                       PERF_COUNT_HW_INSTRUCTIONS, 0),
                           one_session ? 1 : 200, "instructions", 0, nullptr);
    ASSERT_GT(inst, 0);
    a.SwitchIn(0, TaskId{kPid, kPid}, 0);
    auto count = [](RequestId, uint64_t t) -> uint64_t {
      return (t / (7 * kMs)) % 2 ? 1500 : 500;
    };
    const uint64_t end = 4000 * kMs;
    RunCpu(a, 0, 0, end, kMs, count);
    uint64_t truth = 0;
    for (uint64_t t = 0; t < end; t += kMs) truth += count(0, t);
    EXPECT_DOUBLE_EQ(MustRead(a, inst, end).ratio, 1.0);
    EXPECT_EQ(a.OnCounter(0, kFixedCounterBase + 0),
              static_cast<RequestId>(inst));
    double sum = 0;
    for (int id : gp) {
      const PmuArbiter::Reading r = MustRead(a, id, end);
      EXPECT_NEAR(r.ratio, 0.08, 0.005) << "request " << id;
      EXPECT_NEAR(r.scaled, static_cast<double>(truth), 0.1 * truth)
          << "request " << id;
      sum += r.ratio;
    }
    EXPECT_NEAR(sum, 8.0, 0.01);
  }
}

// With the GP counters full (pinned), a fixed counter is dealt round-robin
// between the sessions that have events for it, max-min fair: B's one
// instructions event runs half the time, each of A's five a tenth.
TEST(FlexiblePoolTest, FixedCounterIsSharedBetweenSessionsNotEvents) {
  PmuArbiter a(Skl(1), kDefaultMuxIntervalNs);
  for (int i = 0; i < 8; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 9, "pin", 0, nullptr), 0);
  const pfm_pmu_req inst_req =
      TaskCounter(kPid, PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, 0);
  std::vector<int> a_inst;
  for (int i = 0; i < 5; ++i) {
    a_inst.push_back(a.Add(inst_req, 1, "A", 0, nullptr));
    ASSERT_GT(a_inst.back(), 0);
  }
  const int b_inst = a.Add(inst_req, 2, "B", 0, nullptr);
  const int c_cyc = a.Add(
      TaskCounter(kPid, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 0), 3,
      "C", 0, nullptr);
  ASSERT_GT(b_inst, 0);
  ASSERT_GT(c_cyc, 0);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  const uint64_t end = 1000 * kMs;
  for (uint64_t t = 4 * kMs; t <= end; t += 4 * kMs) {
    a.Tick(0, t);
    ScheduledCounter sc[16];
    ASSERT_EQ(a.Scheduled(0, sc, 16), 10);  // 8 pinned, fixed0, fixed1
  }
  EXPECT_NEAR(MustRead(a, b_inst, end).ratio, 0.5, 0.01);
  double sum = 0;
  for (int id : a_inst) {
    const double ratio = MustRead(a, id, end).ratio;
    EXPECT_NEAR(ratio, 0.1, 0.01) << "request " << id;
    sum += ratio;
  }
  EXPECT_NEAR(sum, 0.5, 0.01);
  EXPECT_DOUBLE_EQ(MustRead(a, c_cyc, end).ratio, 1.0);
}

// A pinned instructions event keeps fixed0; flexible instructions events
// then compete for the GP counters like any other event, max-min fair
// between the sessions (4 GP counters each).
TEST(FlexiblePoolTest, PinnedKeepsFixedCounterWhileFlexibleOnesShareGp) {
  PmuArbiter a(Skl(1), kDefaultMuxIntervalNs);
  const pfm_pmu_req inst_req =
      TaskCounter(kPid, PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, 0);
  pfm_pmu_req pinned_req = inst_req;
  pinned_req.flags = PFM_REQ_PINNED;
  const int pinned = a.Add(pinned_req, 3, "pinned", 0, nullptr);
  ASSERT_GT(pinned, 0);
  std::vector<int> flex_inst, flex_gp;
  for (int i = 0; i < 10; ++i) {
    flex_inst.push_back(a.Add(inst_req, 1, "A", 0, nullptr));
    flex_gp.push_back(a.Add(Raw(kPid, i, 0), 2, "B", 0, nullptr));
  }
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  const uint64_t end = 1000 * kMs;
  for (uint64_t t = 4 * kMs; t <= end; t += 4 * kMs) {
    a.Tick(0, t);
    ASSERT_EQ(a.OnCounter(0, kFixedCounterBase + 0),
              static_cast<RequestId>(pinned));
  }
  EXPECT_DOUBLE_EQ(MustRead(a, pinned, end).ratio, 1.0);
  for (const std::vector<int>* ids : {&flex_inst, &flex_gp}) {
    double sum = 0;
    for (int id : *ids) {
      const double ratio = MustRead(a, id, end).ratio;
      EXPECT_NEAR(ratio, 0.4, 0.02) << "request " << id;
      sum += ratio;
    }
    EXPECT_NEAR(sum, 4.0, 0.01);
  }
}

TEST(FlexiblePoolTest, NoRotationWhenNotOversubscribed) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 8; ++i)
    a.Add(Raw(kPid, i, 0), 1 + i % 2, "ev", 0, nullptr);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  const uint64_t before = a.work_units();
  for (uint64_t t = 4 * kMs; t <= 400 * kMs; t += 4 * kMs) a.Tick(0, t);
  EXPECT_EQ(a.work_units(), before);
}

TEST(FlexiblePoolTest, RotationWaitsForTheMuxInterval) {
  PmuArbiter a(Skl(), 10 * kMs);
  for (int i = 0; i < 9; ++i) a.Add(Raw(kPid, i, 0), 1, "ev", 0, nullptr);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  const std::vector<RequestId> first = OnHardware(a, 0);
  ASSERT_EQ(first.size(), 8u);
  a.Tick(0, 4 * kMs);
  a.Tick(0, 8 * kMs);
  EXPECT_EQ(OnHardware(a, 0), first);
  a.Tick(0, 12 * kMs);
  const std::vector<RequestId> second = OnHardware(a, 0);
  EXPECT_EQ(second.size(), 8u);
  EXPECT_NE(second, first);
}

TEST(FlexiblePoolTest, RotationContinuesAfterRequestsComeAndGo) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  std::vector<int> ids;
  for (int i = 0; i < 10; ++i)
    ids.push_back(a.Add(Raw(kPid, i, 0), 1, "ev", 0, nullptr));
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  // Churn in another session right before every timer tick.
  for (uint64_t t = 4 * kMs; t <= 400 * kMs; t += 4 * kMs) {
    const int tmp = a.Add(Raw(kPid, 40, 0), 2, "churn", t - kMs, nullptr);
    a.Remove(tmp, t - kMs / 2);
    a.Tick(0, t);
  }
  for (int id : ids) {
    const PmuArbiter::Reading r = MustRead(a, id, 400 * kMs);
    EXPECT_NEAR(r.ratio, 0.8, 0.03) << "request " << id;
  }
}

TEST(FlexiblePoolTest, CpuContextSharesSlotsWithRunningTask) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  pfm_pmu_req cpu_req = Raw(0, 1, 0);
  cpu_req.ctx_kind = PFM_CTX_CPU;
  cpu_req.cpu = 0;
  std::vector<int> cpu_ids, task_ids;
  for (int i = 0; i < 8; ++i)
    cpu_ids.push_back(a.Add(cpu_req, 1, "c", 0, nullptr));
  for (int i = 0; i < 8; ++i)
    task_ids.push_back(a.Add(Raw(kPid, i, 0), 2, "t", 0, nullptr));
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  for (uint64_t t = 4 * kMs; t <= 400 * kMs; t += 4 * kMs) a.Tick(0, t);
  // Alternate dealing: each context gets half of the 8 GP counters.
  double sc = 0, st = 0;
  for (int id : cpu_ids) sc += MustRead(a, id, 400 * kMs).ratio;
  for (int id : task_ids) st += MustRead(a, id, 400 * kMs).ratio;
  EXPECT_NEAR(sc, 4.0, 0.01);
  EXPECT_NEAR(st, 4.0, 0.01);
}

}  // namespace
}  // namespace arbiter_test
}  // namespace pfm
