#include "kernel/pmu_arbiter/cpu_slots.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "kernel/pmu_arbiter/context.h"

namespace pfm {
namespace arbiter_internal {
namespace {

// Skylake-like: 8 GP counters (PEBS on 0-3), 3 fixed, 4 debug registers.
PmuShape Skl() {
  MachineInfo m;
  m.cpus = 1;
  m.gp_counters = 8;
  m.fixed_counters = 3;
  m.pebs_counter_mask = 0xf;
  m.debug_registers = 4;
  return PmuShape::From(m);
}

Request Counter(int fixed_counter, bool pebs) {
  Request r;
  r.fixed_counter = static_cast<int8_t>(fixed_counter);
  r.pebs = pebs;
  return r;
}

TEST(CpuSlotsTest, PlacementKeepsPebsCountersForPebs) {
  uint64_t work = 0;
  CpuSlots cpu(0, Skl(), &work);
  Request plain = Counter(-1, false);
  Request pebs = Counter(-1, true);
  Request inst = Counter(0, false);
  EXPECT_EQ(cpu.FindFreeCounter(plain), 4);  // not a PEBS counter
  EXPECT_EQ(cpu.FindFreeCounter(pebs), 0);
  EXPECT_EQ(cpu.FindFreeCounter(inst), kFixedCounterBase + 0);
  // With the plain GP counters taken, a plain event takes a PEBS one.
  Request others[4];
  for (Request& r : others) cpu.Put(&r, cpu.FindFreeCounter(plain), 0);
  EXPECT_EQ(cpu.gp_free(), 0x0fu);
  EXPECT_EQ(cpu.FindFreeCounter(plain), 0);
  // With fixed0 taken, instructions goes on a GP counter.
  cpu.Put(&inst, kFixedCounterBase + 0, 0);
  Request inst2 = Counter(0, false);
  EXPECT_EQ(cpu.FindFreeCounter(inst2), 0);
  EXPECT_EQ(cpu.OnCounter(kFixedCounterBase + 0), &inst);
  EXPECT_EQ(cpu.OnCounter(4), &others[0]);
  EXPECT_EQ(cpu.OnCounter(kFixedCounterBase + 3), nullptr);  // no fixed3
  EXPECT_EQ(cpu.OnCounter(8), nullptr);
  EXPECT_EQ(work, 5u);
}

TEST(CpuSlotsTest, TakeAccountsRunningTime) {
  uint64_t work = 0;
  CpuSlots cpu(2, Skl(), &work);
  Request bp;
  bp.resource = ResourceClass::kBreakpoint;
  EXPECT_EQ(cpu.FindFreeDebugRegister(), 0);
  cpu.Put(&bp, 0, 100);
  EXPECT_EQ(bp.on_cpu, 2);
  EXPECT_EQ(bp.slot, 0);
  EXPECT_EQ(cpu.debug_register(0), &bp);
  EXPECT_EQ(cpu.FindFree(bp), 1);
  cpu.Take(&bp, 350);
  EXPECT_EQ(bp.on_cpu, -1);
  EXPECT_EQ(bp.slot, -1);
  EXPECT_EQ(bp.running, 250u);
  EXPECT_EQ(cpu.dr_free(), 0xfu);
  EXPECT_EQ(work, 2u);
}

TEST(CpuSlotsTest, TakeAllOfOneContextLeavesTheOthers) {
  uint64_t work = 0;
  CpuSlots cpu(0, Skl(), &work);
  Context cpu_context, task;
  Request a = Counter(-1, false), b = Counter(1, false), c;
  a.context = &cpu_context;
  b.context = &task;
  c.context = &task;
  c.resource = ResourceClass::kBreakpoint;
  cpu.Put(&a, 4, 0);
  cpu.Put(&b, kFixedCounterBase + 1, 0);
  cpu.Put(&c, 3, 0);
  cpu.TakeAll(10, &task);
  EXPECT_EQ(a.on_cpu, 0);
  EXPECT_EQ(b.on_cpu, -1);
  EXPECT_EQ(c.on_cpu, -1);
  EXPECT_EQ(b.running, 10u);
  cpu.TakeAll(20);
  EXPECT_EQ(a.on_cpu, -1);
  EXPECT_EQ(cpu.gp_free(), 0xffu);
  EXPECT_EQ(cpu.fixed_free(), 0x7u);
}

// Pinned requests go fixed-eligible first, then PEBS, then the rest, so a
// set admission accepted always fits, whatever order it was added in.
TEST(CpuSlotsTest, InstallPinnedPlacesFixedThenPebsThenTheRest) {
  uint64_t work = 0;
  CpuSlots cpu(0, Skl(), &work);
  Request plain[5], pebs[2], inst[2];
  PinnedSet cpu_set, task_set;
  for (Request& r : plain) {
    r.demand.generic = 1;
    task_set.Add(&r);
  }
  for (Request& r : inst) {
    r.fixed_counter = 0;
    r.demand.fixed[0] = 1;
    cpu_set.Add(&r);
  }
  for (Request& r : pebs) {
    r.pebs = true;
    r.demand.pebs = 1;
    task_set.Add(&r);
  }
  Request bp;
  bp.resource = ResourceClass::kBreakpoint;
  task_set.Add(&bp);
  cpu.InstallPinned(&cpu_set, &task_set, 0);
  EXPECT_EQ(cpu.fixed(0), &inst[0]);
  for (const Request& r : pebs) EXPECT_LT(r.slot, 4);
  for (const Request* r :
       {&plain[0], &plain[1], &plain[2], &plain[3], &plain[4], &inst[1]})
    EXPECT_GE(r->on_cpu, 0);
  EXPECT_EQ(cpu.gp_free(), 0u);
  EXPECT_EQ(cpu.debug_register(0), &bp);
  // 3 passes over 9 counters, 1 breakpoint, 9 + 1 slots filled.
  EXPECT_EQ(work, 3u * 9 + 1 + 10);
}

}  // namespace
}  // namespace arbiter_internal
}  // namespace pfm
