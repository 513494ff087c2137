#include "kernel/pmu_arbiter/request.h"

#include "gtest/gtest.h"

namespace pfm {
namespace arbiter_internal {
namespace {

TEST(PmuShapeTest, ClampsCountsAndRestrictsPebsToGpCounters) {
  MachineInfo m;
  m.cpus = 4;
  m.gp_counters = 4;
  m.fixed_counters = 40;
  m.debug_registers = -1;
  m.pebs_counter_mask = 0xff;
  const PmuShape s = PmuShape::From(m);
  EXPECT_EQ(s.cpus, 4);
  EXPECT_EQ(s.gp_counters, 4);
  EXPECT_EQ(s.fixed_counters, kMaxSlots);
  EXPECT_EQ(s.debug_registers, 0);
  EXPECT_EQ(s.gp_mask, 0xfu);
  EXPECT_EQ(s.pebs_mask, 0xfu);
  EXPECT_EQ(s.pebs_counters(), 4);
  EXPECT_EQ(s.slots(ResourceClass::kCounter), 4 + kMaxSlots);
  EXPECT_EQ(s.slots(ResourceClass::kBreakpoint), 0);
}

TEST(DemandTest, ExtraFixedEligibleEventsNeedGpCounters) {
  Demand d;
  d.pebs = 2;
  d.generic = 3;
  d.fixed[0] = 1;  // on fixed0
  d.fixed[1] = 3;  // one on fixed1, two on GP
  EXPECT_EQ(d.GpNeed(), 2 + 3 + 2);
  Demand twice = d;
  twice.Add(d, +1);
  EXPECT_EQ(twice.GpNeed(), 4 + 6 + 1 + 5);
  twice.Add(d, -1);
  EXPECT_EQ(twice.GpNeed(), d.GpNeed());
}

TEST(PinnedSetTest, AddAndRemoveKeepDemandAndListsInStep) {
  Request bp, pebs, inst;
  bp.resource = ResourceClass::kBreakpoint;
  bp.demand.bp = 1;
  pebs.pebs = true;
  pebs.demand.pebs = 1;
  inst.demand.fixed[0] = 1;
  PinnedSet set;
  EXPECT_FALSE(set.holds(ResourceClass::kCounter));
  for (Request* r : {&bp, &pebs, &inst}) set.Add(r);
  EXPECT_EQ(set.requests[ResourceClass::kBreakpoint].size(), 1u);
  EXPECT_EQ(set.requests[ResourceClass::kCounter].size(), 2u);
  EXPECT_EQ(set.demand.bp, 1);
  EXPECT_EQ(set.demand.GpNeed(), 1);
  set.Remove(&pebs);
  EXPECT_EQ(set.requests[ResourceClass::kCounter],
            std::vector<Request*>{&inst});
  EXPECT_EQ(set.demand.pebs, 0);
  set.Remove(&bp);
  EXPECT_FALSE(set.holds(ResourceClass::kBreakpoint));
  EXPECT_TRUE(set.holds(ResourceClass::kCounter));
}

}  // namespace
}  // namespace arbiter_internal
}  // namespace pfm
