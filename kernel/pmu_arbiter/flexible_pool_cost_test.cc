// The work of a switch and of a rotation, as PmuArbiter::work_units()
// counts it: O(slots), and the same however many flexible requests wait
// (issue 7). bench/arbiter.cc measures the time of the same operations.
#include <linux/perf_event.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernel/pmu_arbiter/arbiter.h"
#include "kernel/pmu_arbiter/arbiter_test_util.h"

namespace pfm {
namespace arbiter_test {
namespace {

// Work per SwitchIn/Tick must not depend on how many flexible requests wait.
uint64_t SwitchAndTickWork(int waiting) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 2; ++i)
    a.Add(TaskBp(kPid, 0x401000 + i, 1, PFM_BP_X, PFM_REQ_PINNED), 1, "bp", 0,
          nullptr);
  for (int i = 0; i < waiting; ++i) {
    a.Add(Raw(kPid, i % 64, 0), 1 + i % 4, "ev", 0, nullptr);
    a.Add(TaskBp(kPid, 0x600000 + 8 * i, 8, PFM_BP_W, 0), 1 + i % 4, "w", 0,
          nullptr);
  }
  pfm_pmu_req cpu_req = Raw(0, 1, 0);
  cpu_req.ctx_kind = PFM_CTX_CPU;
  cpu_req.cpu = 0;
  for (int i = 0; i < waiting; ++i)
    a.Add(cpu_req, 7 + i % 3, "cpu", 0, nullptr);

  uint64_t t = 0;
  std::vector<uint64_t> per_op;
  for (int round = 0; round < 20; ++round) {
    uint64_t before = a.work_units();
    a.SwitchIn(0, TaskId{kPid, kPid}, t);
    per_op.push_back(a.work_units() - before);
    t += 4 * kMs;
    before = a.work_units();
    a.Tick(0, t);
    per_op.push_back(a.work_units() - before);
    before = a.work_units();
    a.SwitchOut(0, t);
    per_op.push_back(a.work_units() - before);
  }
  uint64_t max = 0;
  for (uint64_t w : per_op) max = std::max(max, w);
  return max;
}

TEST(FlexiblePoolCostTest, SwitchAndTickWorkIsIndependentOfWaitingRequests) {
  const uint64_t small = SwitchAndTickWork(16);
  const uint64_t large = SwitchAndTickWork(4096);
  EXPECT_GT(small, 0u);
  EXPECT_EQ(small, large);
  // And it is bounded by the slots (11 counters + 4 debug registers).
  EXPECT_LE(large, 8u * (11 + 4));
}

// Work per switch (SwitchOut + SwitchIn inside one mux interval) and per
// rotation (Tick a mux interval later), maximum over `rounds` of each, with
// `waiting` flexible GP-only requests on one task context (bench/arbiter.cc's
// set-up), either one session per request or all in one session. With
// `with_fixed`, instructions, cycles and ref-cycles (raw 0xc0, 0x3c, 0x300)
// are added too: one at the front, one in the middle, one at the end.
struct OpWork {
  uint64_t switch_max = 0;
  uint64_t rotate_max = 0;
};

OpWork SwitchAndRotationWork(int waiting, bool one_session, bool with_fixed) {
  PmuArbiter a(Skl(1), kDefaultMuxIntervalNs);
  const uint64_t fixed_cfg[3] = {0xc0, 0x3c, 0x300};
  const int fixed_at[3] = {0, waiting / 2, waiting};
  uint64_t session = 1;
  auto add = [&](const pfm_pmu_req& r) {
    ASSERT_GT(a.Add(r, one_session ? 1 : session++, "ev", 0, nullptr), 0);
  };
  for (int i = 0; i <= waiting; ++i) {
    for (int f = 0; f < 3; ++f)
      if (with_fixed && fixed_at[f] == i)
        add(TaskCounter(kPid, PERF_TYPE_RAW, fixed_cfg[f], 0));
    if (i < waiting) add(Raw(kPid, i, 0));
  }
  const TaskId task{kPid, kPid};
  uint64_t t = 1;
  a.SwitchIn(0, task, t);
  a.Tick(0, t);
  OpWork w;
  for (int round = 0; round < 64; ++round) {
    for (int k = 0; k < 4; ++k) {
      const uint64_t before = a.work_units();
      a.SwitchOut(0, ++t);
      a.SwitchIn(0, task, ++t);
      w.switch_max = std::max(w.switch_max, a.work_units() - before);
    }
    t += kDefaultMuxIntervalNs;
    const uint64_t before = a.work_units();
    a.Tick(0, t);
    w.rotate_max = std::max(w.rotate_max, a.work_units() - before);
  }
  return w;
}

// Issue 7: once more requests wait than there are counters, the work of a
// switch and of a rotation must not depend on how many wait. Raw GP-only
// events can't use the fixed counters: the deal must not probe them once
// the GP counters are full (it used to, up to its skip budget).
TEST(FlexiblePoolCostTest, SwitchAndRotationWorkIsFlatForGpOnlyRequests) {
  for (bool one_session : {false, true}) {
    SCOPED_TRACE(one_session ? "one session" : "one session per request");
    const OpWork w16 = SwitchAndRotationWork(16, one_session, false);
    const OpWork w256 = SwitchAndRotationWork(256, one_session, false);
    const OpWork w4096 = SwitchAndRotationWork(4096, one_session, false);
    EXPECT_EQ(w16.switch_max, w256.switch_max);
    EXPECT_EQ(w16.switch_max, w4096.switch_max);
    EXPECT_EQ(w16.rotate_max, w256.rotate_max);
    EXPECT_EQ(w16.rotate_max, w4096.rotate_max);
    // 8 GP counters: a switch clears and fills 8 slots and visits the 8
    // requests placed, nothing else; a rotation also moves those 8.
    EXPECT_EQ(w4096.switch_max, 3u * 8);
    EXPECT_EQ(w4096.rotate_max, 4u * 8);
  }
}

TEST(FlexiblePoolCostTest, SwitchAndRotationWorkIsFlatWithFixedEligibleRequests) {
  for (bool one_session : {false, true}) {
    SCOPED_TRACE(one_session ? "one session" : "one session per request");
    const OpWork w16 = SwitchAndRotationWork(16, one_session, true);
    const OpWork w256 = SwitchAndRotationWork(256, one_session, true);
    const OpWork w4096 = SwitchAndRotationWork(4096, one_session, true);
    EXPECT_EQ(w16.switch_max, w256.switch_max);
    EXPECT_EQ(w16.switch_max, w4096.switch_max);
    EXPECT_EQ(w16.rotate_max, w256.rotate_max);
    EXPECT_EQ(w16.rotate_max, w4096.rotate_max);
    // All 11 counters in use, and only them.
    EXPECT_EQ(w4096.switch_max, 3u * 11);
    EXPECT_EQ(w4096.rotate_max, 4u * 11);
  }
}

}  // namespace
}  // namespace arbiter_test
}  // namespace pfm
