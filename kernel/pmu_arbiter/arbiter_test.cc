#include "kernel/pmu_arbiter/arbiter.h"

#include <linux/perf_event.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pfm {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr int32_t kPid = 1000;

// Skylake's shape (libpfm4 "skl"): 8 GP counters (PEBS on 0-3), 3 fixed,
// 4 debug registers.
MachineInfo Skl(int cpus = 2) {
  MachineInfo m;
  m.cpus = cpus;
  m.pmu = "skl";
  m.gp_counters = 8;
  m.fixed_counters = 3;
  m.pebs_counter_mask = 0xf;
  m.debug_registers = 4;
  return m;
}

pfm_pmu_req TaskBp(int32_t pid, uint64_t addr, uint32_t len, uint32_t kind,
                   uint32_t flags) {
  pfm_pmu_req r{};
  r.kind = PFM_REQ_BREAKPOINT;
  r.flags = flags;
  r.ctx_kind = PFM_CTX_TASK;
  r.pid = pid;
  r.bp_kind = kind;
  r.bp_len = len;
  r.bp_addr = addr;
  return r;
}

pfm_pmu_req CpuBp(int cpu, uint64_t addr, uint32_t flags) {
  pfm_pmu_req r = TaskBp(0, addr, 8, PFM_BP_W, flags);
  r.ctx_kind = PFM_CTX_CPU;
  r.cpu = cpu;
  return r;
}

pfm_pmu_req TaskCounter(int32_t pid, uint32_t type, uint64_t config,
                        uint32_t flags) {
  pfm_pmu_req r{};
  r.kind = PFM_REQ_COUNTER;
  r.flags = flags;
  r.ctx_kind = PFM_CTX_TASK;
  r.pid = pid;
  r.type = type;
  r.config = config;
  return r;
}

// A raw event that is not fixed-eligible; `i` keeps them distinct.
pfm_pmu_req Raw(int32_t pid, int i, uint32_t flags) {
  return TaskCounter(pid, PERF_TYPE_RAW, 0x01d1 + (i << 8), flags);
}

std::string Label(const char* prefix, int i) {
  return std::string(prefix) + std::to_string(i);
}

// Drives `cpu` from t0 to t1: every `step` ns each scheduled counter gets
// `count(id, t)` added for that step, then the mux timer fires.
void RunCpu(PmuArbiter& a, int cpu, uint64_t t0, uint64_t t1, uint64_t step,
            const std::function<uint64_t(RequestId, uint64_t)>& count) {
  ScheduledCounter sc[64];
  for (uint64_t t = t0; t < t1; t += step) {
    const int n = a.Scheduled(cpu, sc, 64);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; ++i)
      a.AddCount(sc[i].request, count(sc[i].request, t));
    a.Tick(cpu, t + step);
  }
}

// Ids of the counters on `cpu`'s hardware, sorted.
std::vector<RequestId> OnHardware(const PmuArbiter& a, int cpu) {
  ScheduledCounter sc[64];
  const int n = a.Scheduled(cpu, sc, 64);
  std::vector<RequestId> ids;
  for (int i = 0; i < n; ++i) ids.push_back(sc[i].request);
  std::sort(ids.begin(), ids.end());
  return ids;
}

PmuArbiter::Reading MustRead(const PmuArbiter& a, RequestId id, uint64_t now) {
  PmuArbiter::Reading r;
  EXPECT_EQ(a.Read(id, now, &r), 0);
  return r;
}

TEST(PmuArbiterTest, RefusesFifthPinnedBreakpoint) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  int ids[4];
  for (int i = 0; i < 4; ++i) {
    const std::string l = "0x40100" + std::to_string(i) + ":1:x";
    ids[i] = a.Add(TaskBp(kPid, 0x401000 + i, 1, PFM_BP_X, PFM_REQ_PINNED), 3,
                   l.c_str(), 0, nullptr);
    ASSERT_GT(ids[i], 0);
  }
  ErrorDetail d;
  EXPECT_EQ(a.Add(TaskBp(kPid, 0x402000, 8, PFM_BP_W, PFM_REQ_PINNED), 4,
                  "0x402000:8:w", 0, &d),
            -ENOSPC);
  const std::string msg = d.message;
  EXPECT_NE(msg.find("debug registers: 4 of 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("task 1000"), std::string::npos) << msg;
  EXPECT_NE(msg.find("session 3 (0x401000:1:x pinned)"), std::string::npos)
      << msg;
  // Refusal changed nothing: still exactly four requests.
  std::vector<PmuArbiter::Holder> h;
  a.Describe(0, &h);
  EXPECT_EQ(h.size(), 4u);

  a.Remove(ids[2], 0);
  EXPECT_GT(a.Add(TaskBp(kPid, 0x402000, 8, PFM_BP_W, PFM_REQ_PINNED), 4,
                  "0x402000:8:w", 0, &d),
            0);
}

TEST(PmuArbiterTest, NoMultiplexBreakpointsCountAsPinned) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 4; ++i)
    ASSERT_GT(
        a.Add(TaskBp(kPid, 0x1000 + 8 * i, 8, PFM_BP_RW, PFM_REQ_NO_MULTIPLEX),
              1, "w", 0, nullptr),
        0);
  EXPECT_EQ(a.Add(TaskBp(kPid, 0x2000, 8, PFM_BP_RW, PFM_REQ_NO_MULTIPLEX), 1,
                  "w", 0, nullptr),
            -ENOSPC);
  // A flexible one is admitted: it waits.
  EXPECT_GT(a.Add(TaskBp(kPid, 0x2000, 8, PFM_BP_RW, 0), 1, "w", 0, nullptr),
            0);
}

TEST(PmuArbiterTest, CpuBoundPlusLargestTaskBreakpointDemandFitsSlots) {
  PmuArbiter a(Skl(2), kDefaultMuxIntervalNs);
  ASSERT_GT(a.Add(CpuBp(0, 0x1000, PFM_REQ_PINNED), 1, "cpu0-a", 0, nullptr),
            0);
  ASSERT_GT(a.Add(CpuBp(0, 0x1008, PFM_REQ_PINNED), 1, "cpu0-b", 0, nullptr),
            0);
  ASSERT_GT(a.Add(TaskBp(1000, 0x3000, 8, PFM_BP_W, PFM_REQ_PINNED), 2, "t0", 0,
                  nullptr),
            0);
  ASSERT_GT(a.Add(TaskBp(1000, 0x3008, 8, PFM_BP_W, PFM_REQ_PINNED), 2, "t1", 0,
                  nullptr),
            0);
  ErrorDetail d;
  // 2 on cpu 0 + 3 on task 1000 > 4.
  EXPECT_EQ(
      a.Add(TaskBp(1000, 0x3010, 8, PFM_BP_W, PFM_REQ_PINNED), 2, "t2", 0, &d),
      -ENOSPC);
  EXPECT_NE(std::string(d.message).find("cpu 0 and task 1000"),
            std::string::npos)
      << d.message;
  EXPECT_NE(std::string(d.message).find("cpu0-a"), std::string::npos)
      << d.message;
  // Another task's demand is not added to task 1000's: the largest counts.
  EXPECT_GT(a.Add(TaskBp(1001, 0x3000, 8, PFM_BP_W, PFM_REQ_PINNED), 3, "u0", 0,
                  nullptr),
            0);
  EXPECT_GT(a.Add(TaskBp(1001, 0x3008, 8, PFM_BP_W, PFM_REQ_PINNED), 3, "u1", 0,
                  nullptr),
            0);
  // A third CPU-bound one on cpu 0 would collide with either task.
  EXPECT_EQ(a.Add(CpuBp(0, 0x1010, PFM_REQ_PINNED), 1, "cpu0-c", 0, &d),
            -ENOSPC);
  // cpu 1 has room for 2 besides the largest task demand, not 3.
  EXPECT_GT(a.Add(CpuBp(1, 0x1000, PFM_REQ_PINNED), 1, "cpu1-a", 0, nullptr),
            0);
  EXPECT_GT(a.Add(CpuBp(1, 0x1008, PFM_REQ_PINNED), 1, "cpu1-b", 0, nullptr),
            0);
  EXPECT_EQ(a.Add(CpuBp(1, 0x1010, PFM_REQ_PINNED), 1, "cpu1-c", 0, nullptr),
            -ENOSPC);

  // On the hardware: cpu 0 runs task 1001 -> 2 CPU-bound + 2 of the task.
  a.SwitchIn(0, TaskId{1001, 1001}, 0);
  RequestId slots[4];
  EXPECT_EQ(a.ScheduledBreakpoints(0, slots), 4);
}

TEST(PmuArbiterTest, RefusesPinnedCountersBeyondGpCounters) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 8; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 1, Label("raw", i).c_str(), 0,
                    nullptr),
              0);
  ErrorDetail d;
  EXPECT_EQ(a.Add(Raw(kPid, 8, PFM_REQ_PINNED), 2, "raw8", 0, &d), -ENOSPC);
  EXPECT_NE(std::string(d.message).find("general-purpose counters: 8 of 8"),
            std::string::npos)
      << d.message;
  // A CPU-wide pinned counter would collide with task 1000 on every CPU.
  pfm_pmu_req cpu_req = Raw(0, 9, PFM_REQ_PINNED);
  cpu_req.ctx_kind = PFM_CTX_CPU;
  cpu_req.cpu = 1;
  EXPECT_EQ(a.Add(cpu_req, 2, "raw9", 0, &d), -ENOSPC);
  // Flexible ones are always admitted.
  EXPECT_GT(a.Add(Raw(kPid, 8, 0), 2, "raw8", 0, nullptr), 0);
}

TEST(PmuArbiterTest, PebsRequestsOnlyGetPebsCounters) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  // Generic ones first: placement must still leave counters 0-3 for PEBS.
  for (int i = 0; i < 4; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 1, "plain", 0, nullptr), 0);
  std::vector<int> pebs;
  for (int i = 0; i < 4; ++i) {
    pebs.push_back(a.Add(Raw(kPid, 10 + i, PFM_REQ_PINNED | PFM_REQ_PEBS), 2,
                         "mem", 0, nullptr));
    ASSERT_GT(pebs.back(), 0);
  }
  ErrorDetail d;
  EXPECT_EQ(
      a.Add(Raw(kPid, 20, PFM_REQ_PINNED | PFM_REQ_PEBS), 2, "mem", 0, &d),
      -ENOSPC);
  EXPECT_NE(
      std::string(d.message).find("PEBS-capable counters (mask 0xf): 4 of 4"),
      std::string::npos)
      << d.message;

  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  ScheduledCounter sc[16];
  ASSERT_EQ(a.Scheduled(0, sc, 16), 8);
  for (int id : pebs) {
    bool found = false;
    for (int c = 0; c < 4; ++c)
      if (a.OnCounter(0, c) == static_cast<RequestId>(id)) found = true;
    EXPECT_TRUE(found) << "PEBS request " << id << " not on counters 0-3";
  }
}

TEST(PmuArbiterTest, FlexiblePebsWaitsForPebsCounter) {
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

TEST(PmuArbiterTest, FixedEligibleEventsUseFixedCounters) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  const int inst =
      a.Add(TaskCounter(kPid, PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS,
                        PFM_REQ_PINNED),
            1, "instructions", 0, nullptr);
  const int cyc = a.Add(TaskCounter(kPid, PERF_TYPE_HARDWARE,
                                    PERF_COUNT_HW_CPU_CYCLES, PFM_REQ_PINNED),
                        1, "cycles", 0, nullptr);
  const int ref =
      a.Add(TaskCounter(kPid, PERF_TYPE_HARDWARE, PERF_COUNT_HW_REF_CPU_CYCLES,
                        PFM_REQ_PINNED),
            1, "ref-cycles", 0, nullptr);
  ASSERT_GT(inst, 0);
  ASSERT_GT(cyc, 0);
  ASSERT_GT(ref, 0);
  // All 8 GP counters are still available besides the fixed ones.
  for (int i = 0; i < 8; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 2, "raw", 0, nullptr), 0);
  // A second pinned cycles would need a GP counter: none left.
  EXPECT_EQ(a.Add(TaskCounter(kPid, PERF_TYPE_HARDWARE,
                              PERF_COUNT_HW_CPU_CYCLES, PFM_REQ_PINNED),
                  3, "cycles", 0, nullptr),
            -ENOSPC);

  a.SwitchIn(1, TaskId{kPid, kPid}, 0);
  EXPECT_EQ(a.OnCounter(1, kFixedCounterBase + 0),
            static_cast<RequestId>(inst));
  EXPECT_EQ(a.OnCounter(1, kFixedCounterBase + 1), static_cast<RequestId>(cyc));
  EXPECT_EQ(a.OnCounter(1, kFixedCounterBase + 2), static_cast<RequestId>(ref));
  ScheduledCounter sc[16];
  ASSERT_EQ(a.Scheduled(1, sc, 16), 11);
  EXPECT_EQ(sc[1].counter, kFixedCounterBase + 1);
  EXPECT_EQ(sc[1].type, static_cast<uint32_t>(PERF_TYPE_HARDWARE));
  EXPECT_EQ(sc[1].config, static_cast<uint64_t>(PERF_COUNT_HW_CPU_CYCLES));
}

TEST(PmuArbiterTest, WithoutFixedCountersCyclesUsesGpCounter) {
  MachineInfo m = Skl();
  m.fixed_counters = 0;
  PmuArbiter a(m, kDefaultMuxIntervalNs);
  const int cyc = a.Add(TaskCounter(kPid, PERF_TYPE_HARDWARE,
                                    PERF_COUNT_HW_CPU_CYCLES, PFM_REQ_PINNED),
                        1, "cycles", 0, nullptr);
  ASSERT_GT(cyc, 0);
  for (int i = 0; i < 7; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 2, "raw", 0, nullptr), 0);
  EXPECT_EQ(a.Add(Raw(kPid, 7, PFM_REQ_PINNED), 2, "raw", 0, nullptr), -ENOSPC);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  ScheduledCounter sc[16];
  ASSERT_EQ(a.Scheduled(0, sc, 16), 8);
  for (int i = 0; i < 8; ++i) EXPECT_LT(sc[i].counter, 8);
}

TEST(PmuArbiterTest, DebuggerBreakpointsStayPinnedWhileWatchpointsRotate) {
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

TEST(PmuArbiterTest, TwelveFlexibleCountersScaleWithinTenPercent) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  std::vector<int> ids;
  for (int i = 0; i < 12; ++i) {
    ids.push_back(
        a.Add(Raw(kPid, i, 0), 1, Label("ev", i).c_str(), 0, nullptr));
    ASSERT_GT(ids.back(), 0);
  }
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  // 1000 events per ms on average, in bursts: 500/ms and 1500/ms phases of
  // 7 ms, out of step with the 4 ms rotation, so scaling has real error.
  auto count = [](RequestId, uint64_t t) -> uint64_t {
    return (t / (7 * kMs)) % 2 ? 1500 : 500;
  };
  RunCpu(a, 0, 0, 1000 * kMs, kMs, count);
  uint64_t truth = 0;
  for (uint64_t t = 0; t < 1000 * kMs; t += kMs) truth += count(0, t);
  for (int id : ids) {
    const PmuArbiter::Reading r = MustRead(a, id, 1000 * kMs);
    ASSERT_TRUE(r.counted);
    EXPECT_GT(r.ratio, 0.0);
    EXPECT_LT(r.ratio, 1.0);
    EXPECT_EQ(r.time_enabled, 1000 * kMs);
    EXPECT_LT(r.value, truth);
    EXPECT_NEAR(r.scaled, static_cast<double>(truth), 0.1 * truth)
        << "request " << id;
  }
}

TEST(PmuArbiterTest, FairShareIsBetweenSessionsNotEvents) {
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

TEST(PmuArbiterTest, EqualSessionsShareEqually) {
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

TEST(PmuArbiterTest, NeverRanCounterIsReportedNotCounted) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 8; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 1, "pinned", 0, nullptr), 0);
  const int starved = a.Add(Raw(kPid, 9, 0), 2, "starved", 0, nullptr);
  const int elsewhere = a.Add(Raw(kPid + 1, 9, 0), 2, "idle-task", 0, nullptr);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  RunCpu(a, 0, 0, 40 * kMs, kMs, [](RequestId, uint64_t) { return 7; });
  const PmuArbiter::Reading r = MustRead(a, starved, 40 * kMs);
  EXPECT_FALSE(r.counted);
  EXPECT_EQ(r.time_running, 0u);
  EXPECT_EQ(r.time_enabled, 40 * kMs);
  EXPECT_FALSE(MustRead(a, elsewhere, 40 * kMs).counted);
  std::vector<PmuArbiter::Holder> h;
  a.Describe(40 * kMs, &h);
  ASSERT_EQ(h.size(), 10u);
  EXPECT_LT(h[8].ratio, 0.0);
  EXPECT_STREQ(h[8].slot, "-");
  // Plain events go to GP counters without PEBS first (4-7 on skl).
  EXPECT_STREQ(h[0].slot, "gp4");
  EXPECT_DOUBLE_EQ(h[0].ratio, 1.0);
}

TEST(PmuArbiterTest, TimeEnabledAdvancesOnlyWhileTaskRuns) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  const int id = a.Add(Raw(kPid, 0, 0), 1, "ev", 0, nullptr);
  a.SwitchIn(0, TaskId{kPid, kPid}, 10 * kMs);
  a.SwitchOut(0, 30 * kMs);
  a.SwitchIn(0, TaskId{kPid + 1, kPid + 1}, 30 * kMs);
  PmuArbiter::Reading r = MustRead(a, id, 100 * kMs);
  EXPECT_EQ(r.time_enabled, 20 * kMs);
  EXPECT_EQ(r.time_running, 20 * kMs);
  // Another CPU, and a reading in the middle of a run.
  a.SwitchIn(1, TaskId{kPid, kPid}, 200 * kMs);
  r = MustRead(a, id, 250 * kMs);
  EXPECT_EQ(r.time_enabled, 70 * kMs);
  EXPECT_EQ(r.time_running, 70 * kMs);
  EXPECT_DOUBLE_EQ(r.ratio, 1.0);

  // A CPU context's clock runs whatever the CPU does.
  pfm_pmu_req cpu_req = Raw(0, 1, 0);
  cpu_req.ctx_kind = PFM_CTX_CPU;
  cpu_req.cpu = 0;
  const int cid = a.Add(cpu_req, 2, "cpu0", 300 * kMs, nullptr);
  ASSERT_GT(cid, 0);
  a.SwitchOut(0, 310 * kMs);
  EXPECT_EQ(MustRead(a, cid, 400 * kMs).time_enabled, 100 * kMs);
}

TEST(PmuArbiterTest, TaskAddedWhileRunningStartsItsClockAtAdd) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  const int id = a.Add(Raw(kPid, 0, 0), 1, "ev", 5 * kMs, nullptr);
  // Not on hardware before the next Tick; enabled from the Add.
  EXPECT_EQ(a.OnCounter(0, 4), 0u);
  a.Tick(0, 6 * kMs);
  EXPECT_EQ(a.OnCounter(0, 4), static_cast<RequestId>(id));
  const PmuArbiter::Reading r = MustRead(a, id, 10 * kMs);
  EXPECT_EQ(r.time_enabled, 5 * kMs);
  EXPECT_EQ(r.time_running, 4 * kMs);
}

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

TEST(PmuArbiterTest, SwitchAndTickWorkIsIndependentOfWaitingRequests) {
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
TEST(PmuArbiterTest, SwitchAndRotationWorkIsFlatForGpOnlyRequests) {
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

TEST(PmuArbiterTest, SwitchAndRotationWorkIsFlatWithFixedEligibleRequests) {
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

// The fixed counters no longer depend on how far the deal probes: an
// instructions event behind 100 GP-only events gets fixed0 every round
// (before, only in the rounds where it came within 2*slots+2 of the front),
// and the GP-only events share the 8 GP counters equally and scale.
TEST(PmuArbiterTest, FixedEligibleEventFarBehindGpOnlyEventsKeepsFixedCounter) {
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
TEST(PmuArbiterTest, FixedCounterIsSharedBetweenSessionsNotEvents) {
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
TEST(PmuArbiterTest, PinnedKeepsFixedCounterWhileFlexibleOnesShareGp) {
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
TEST(PmuArbiterTest, DealAndRotationMatchAPlainModel) {
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

TEST(PmuArbiterTest, NoRotationWhenNotOversubscribed) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 8; ++i)
    a.Add(Raw(kPid, i, 0), 1 + i % 2, "ev", 0, nullptr);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  const uint64_t before = a.work_units();
  for (uint64_t t = 4 * kMs; t <= 400 * kMs; t += 4 * kMs) a.Tick(0, t);
  EXPECT_EQ(a.work_units(), before);
}

TEST(PmuArbiterTest, RotationWaitsForTheMuxInterval) {
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

TEST(PmuArbiterTest, RotationContinuesAfterRequestsComeAndGo) {
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

TEST(PmuArbiterTest, RemoveFreesTheSlotAtOnce) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  std::vector<int> ids;
  for (int i = 0; i < 9; ++i)
    ids.push_back(a.Add(Raw(kPid, i, 0), 1, "ev", 0, nullptr));
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  const RequestId on0 = a.OnCounter(0, 0);
  ASSERT_NE(on0, 0u);
  a.Remove(on0, kMs);
  EXPECT_EQ(a.OnCounter(0, 0), 0u);
  PmuArbiter::Reading r;
  EXPECT_EQ(a.Read(on0, kMs, &r), -ENOENT);
  // The next Tick fills it with the one that waited.
  a.Tick(0, 2 * kMs);
  ScheduledCounter sc[16];
  EXPECT_EQ(a.Scheduled(0, sc, 16), 8);
}

TEST(PmuArbiterTest, PinnedAddedWhileRunningDisplacesFlexibleAtNextTick) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 8; ++i) a.Add(Raw(kPid, i, 0), 1, "ev", 0, nullptr);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  const int pinned =
      a.Add(Raw(kPid, 30, PFM_REQ_PINNED), 2, "pin", kMs, nullptr);
  ASSERT_GT(pinned, 0);
  a.Tick(0, 2 * kMs);
  bool on = false;
  for (int c = 0; c < 8; ++c)
    if (a.OnCounter(0, c) == static_cast<RequestId>(pinned)) on = true;
  EXPECT_TRUE(on);
  // From now on it never leaves while the task runs.
  RunCpu(a, 0, 2 * kMs, 200 * kMs, kMs, [](RequestId, uint64_t) { return 1; });
  const PmuArbiter::Reading r = MustRead(a, pinned, 200 * kMs);
  EXPECT_EQ(r.time_running, 198 * kMs);
}

TEST(PmuArbiterTest, RemoveTwiceIsSafe) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  const int id = a.Add(Raw(kPid, 0, PFM_REQ_PINNED), 1, "ev", 0, nullptr);
  const int other = a.Add(Raw(kPid, 1, 0), 1, "ev", 0, nullptr);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  a.Remove(id, kMs);
  a.Remove(id, kMs);
  a.Remove(12345, kMs);
  a.Remove(0, kMs);
  std::vector<PmuArbiter::Holder> h;
  a.Describe(kMs, &h);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].id, static_cast<RequestId>(other));
}

TEST(PmuArbiterTest, RemoveSessionFreesEverything) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 4; ++i)
    ASSERT_GT(a.Add(TaskBp(kPid, 0x401000 + i, 1, PFM_BP_X, PFM_REQ_PINNED), 5,
                    "bp", 0, nullptr),
              0);
  for (int i = 0; i < 8; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 5, "pin", 0, nullptr), 0);
  for (int i = 0; i < 20; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, 0), 5, "flex", 0, nullptr), 0);
  const int keep = a.Add(Raw(kPid, 40, 0), 6, "keep", 0, nullptr);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  a.RemoveSession(5, kMs);

  std::vector<PmuArbiter::Holder> h;
  a.Describe(kMs, &h);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].id, static_cast<RequestId>(keep));
  RequestId slots[4];
  EXPECT_EQ(a.ScheduledBreakpoints(0, slots), 0);
  ScheduledCounter sc[16];
  EXPECT_EQ(a.Scheduled(0, sc, 16), 0);
  // All capacity is back.
  for (int i = 0; i < 4; ++i)
    EXPECT_GT(a.Add(TaskBp(kPid, 0x401000 + i, 1, PFM_BP_X, PFM_REQ_PINNED), 7,
                    "bp", kMs, nullptr),
              0);
  for (int i = 0; i < 8; ++i)
    EXPECT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 7, "pin", kMs, nullptr), 0);
}

TEST(PmuArbiterTest, RejectsBadRequests) {
  PmuArbiter a(Skl(2), kDefaultMuxIntervalNs);
  ErrorDetail d;
  pfm_pmu_req r = Raw(kPid, 0, 0);
  r.kind = 9;
  EXPECT_EQ(a.Add(r, 1, "x", 0, &d), -EINVAL);
  EXPECT_EQ(a.Add(Raw(kPid, 0, 1u << 20), 1, "x", 0, &d), -EINVAL);
  EXPECT_EQ(a.Add(Raw(0, 0, 0), 1, "x", 0, &d), -EINVAL);
  r = Raw(0, 0, 0);
  r.ctx_kind = PFM_CTX_CPU;
  r.cpu = 2;
  EXPECT_EQ(a.Add(r, 1, "x", 0, &d), -EINVAL);
  EXPECT_NE(std::string(d.message).find("cpu 2 out of range"),
            std::string::npos);
  EXPECT_EQ(a.Add(TaskCounter(kPid, PERF_TYPE_SOFTWARE, 0, 0), 1, "x", 0, &d),
            -EINVAL);
  EXPECT_EQ(a.Add(TaskBp(kPid, 0x1001, 4, PFM_BP_W, 0), 1, "x", 0, &d),
            -EINVAL);
  EXPECT_NE(std::string(d.message).find("aligned"), std::string::npos);
  EXPECT_EQ(a.Add(TaskBp(kPid, 0x1000, 3, PFM_BP_W, 0), 1, "x", 0, &d),
            -EINVAL);
  EXPECT_EQ(a.Add(TaskBp(kPid, 0x1000, 8, 7, 0), 1, "x", 0, &d), -EINVAL);
  EXPECT_EQ(
      a.Add(TaskBp(kPid, 0xffffffff81000000ull, 8, PFM_BP_X, 0), 1, "x", 0, &d),
      -EINVAL);
  EXPECT_GT(
      a.Add(TaskBp(kPid, 0xffffffff81000000ull, 8, PFM_BP_X, PFM_REQ_KERNEL), 1,
            "x", 0, &d),
      0);
  EXPECT_GT(a.Add(TaskBp(kPid, 0x401001, 1, PFM_BP_X, 0), 1, "x", 0, &d), 0);

  MachineInfo bare = Skl();
  bare.gp_counters = 0;
  bare.fixed_counters = 0;
  bare.pebs_counter_mask = 0;
  bare.debug_registers = 0;
  PmuArbiter none(bare, kDefaultMuxIntervalNs);
  EXPECT_EQ(none.Add(Raw(kPid, 0, 0), 1, "x", 0, &d), -EOPNOTSUPP);
  EXPECT_EQ(none.Add(Raw(kPid, 0, PFM_REQ_PEBS), 1, "x", 0, &d), -EOPNOTSUPP);
  EXPECT_EQ(none.Add(TaskBp(kPid, 0x1000, 8, PFM_BP_W, 0), 1, "x", 0, &d),
            -EOPNOTSUPP);
  std::vector<PmuArbiter::Holder> h;
  none.Describe(0, &h);
  EXPECT_TRUE(h.empty());
}

// Random churn (deterministic seed) against invariants: pinned requests of
// running contexts are always on the hardware, nothing is on two slots, and
// running never exceeds enabled.
TEST(PmuArbiterTest, RandomChurnKeepsInvariants) {
  PmuArbiter a(Skl(2), 2 * kMs);
  uint64_t seed = 42;
  auto rnd = [&seed](uint64_t n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % n;
  };
  std::vector<int> live;
  int32_t running[2] = {0, 0};
  uint64_t t = 0;
  for (int step = 0; step < 20000; ++step) {
    t += rnd(3) * kMs / 2;
    const int cpu = static_cast<int>(rnd(2));
    switch (rnd(6)) {
      case 0: {
        const int32_t pid = 1000 + static_cast<int32_t>(rnd(3));
        const uint32_t flags = rnd(3) == 0 ? PFM_REQ_PINNED : 0;
        pfm_pmu_req r =
            rnd(3) == 0 ? TaskBp(pid, 0x1000 + 8 * rnd(100), 8, PFM_BP_W, flags)
                        : Raw(pid, static_cast<int>(rnd(5)),
                              flags | (rnd(4) == 0 ? PFM_REQ_PEBS : 0));
        if (rnd(5) == 0) {
          r.ctx_kind = PFM_CTX_CPU;
          r.cpu = cpu;
        }
        const int id = a.Add(r, 1 + rnd(4), "x", t, nullptr);
        if (id > 0)
          live.push_back(id);
        else
          ASSERT_EQ(id, -ENOSPC);
        break;
      }
      case 1:
        if (!live.empty()) {
          const size_t i = rnd(live.size());
          a.Remove(live[i], t);
          live.erase(live.begin() + i);
        }
        break;
      case 2: {
        int32_t pid = static_cast<int32_t>(rnd(4));
        pid = pid == 0 ? 0 : 999 + pid;
        a.SwitchIn(cpu, TaskId{pid, pid}, t);
        running[cpu] = pid;
        break;
      }
      case 3:
        a.SwitchOut(cpu, t);
        running[cpu] = 0;
        break;
      case 4:
        if (rnd(10) == 0) a.RemoveSession(1 + rnd(4), t);
        break;
      default:
        a.Tick(cpu, t);
        break;
    }
    if (step % 7 != 0) continue;
    // Settle (new pinned requests reach the hardware at the next Tick).
    a.Tick(0, t);
    a.Tick(1, t);
    std::vector<PmuArbiter::Holder> hs;
    a.Describe(t, &hs);
    std::vector<std::pair<int, std::string>> used;
    for (const auto& h : hs) {
      PmuArbiter::Reading r;
      ASSERT_EQ(a.Read(h.id, t, &r), 0);
      ASSERT_LE(r.time_running, r.time_enabled);
      if (h.on_hw) used.emplace_back(h.on_cpu, h.slot);
      if (!h.pinned) continue;
      // Where the context runs, a pinned request is on the hardware there.
      int expect_cpu = h.cpu;
      if (h.pid > 0) {
        expect_cpu = -1;
        for (int c = 0; c < 2; ++c)
          if (running[c] == h.pid && expect_cpu < 0) expect_cpu = c;
      }
      if (expect_cpu >= 0) {
        ASSERT_TRUE(h.on_hw)
            << "step " << step << " pinned " << h.id << " pid " << h.pid
            << " cpu " << h.cpu << " run " << running[0] << "," << running[1]
            << " bp " << h.breakpoint;
        if (h.pid > 0 && running[0] == h.pid && running[1] == h.pid) continue;
        ASSERT_EQ(h.on_cpu, expect_cpu);
      }
    }
    std::sort(used.begin(), used.end());
    ASSERT_TRUE(std::adjacent_find(used.begin(), used.end()) == used.end());
  }
}

TEST(PmuArbiterTest, CpuContextSharesSlotsWithRunningTask) {
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


// A simulated scheduler, as pfmd's simulated machine drives the arbiter: 3
// tasks on 2 CPUs, slices of 50-500 us, the waiting task takes the next free
// CPU (so tasks migrate), SwitchOut + SwitchIn at every switch and Tick every
// 10 us on every CPU. Each counter on the hardware counts `rate` events per
// us. Checks at every step that no more counters are on the hardware than
// exist and that no request is on two slots; records what the driver saw.
struct SimStats {
  uint64_t run_ns = 0;                   // time kSimPid was switched in
  std::map<RequestId, uint64_t> on_hw;   // ns on hardware, as seen by driver
  std::map<RequestId, uint64_t> truth;   // events that really happened
  uint64_t max_running_sum_excess = 0;   // over (slots x run time), ns
  int set_changes = 0;  // times kSimPid's set of counters on hardware changed
};

constexpr int32_t kSimPid = 1001;

void SimulateScheduler(PmuArbiter& a, uint64_t end, uint64_t seed,
                       const std::map<RequestId, uint64_t>& rate_per_us,
                       const std::vector<RequestId>& gp_only, SimStats* st) {
  constexpr uint64_t kUs = 1000;
  auto rnd = [&seed](uint64_t n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % n;
  };
  int32_t running[2] = {1001, 1002};
  int32_t waiting = 1003;
  uint64_t slice_end[2], next_tick[2] = {10 * kUs, 10 * kUs};
  uint64_t credited[2] = {0, 0};
  uint64_t run_since = 0;  // kSimPid switched in at
  for (int c = 0; c < 2; ++c) {
    a.SwitchIn(c, TaskId{running[c], running[c]}, 0);
    slice_end[c] = (50 + rnd(451)) * kUs;
  }
  // Credits what the hardware of `c` counted since the last call on it.
  auto credit = [&](int c, uint64_t t) {
    ScheduledCounter sc[64];
    const int n = a.Scheduled(c, sc, 64);
    const uint64_t dt = t - credited[c];
    for (int i = 0; i < n; ++i) {
      auto it = rate_per_us.find(sc[i].request);
      if (it == rate_per_us.end()) continue;
      a.AddCount(sc[i].request, it->second * dt / kUs);
      st->on_hw[sc[i].request] += dt;
    }
    credited[c] = t;
  };
  auto check = [&](uint64_t t) {
    std::vector<RequestId> all;
    for (int c = 0; c < 2; ++c) {
      ScheduledCounter sc[64];
      const int n = a.Scheduled(c, sc, 64);
      int gp = 0, fixed = 0;
      for (int i = 0; i < n; ++i) {
        all.push_back(sc[i].request);
        if (sc[i].counter >= kFixedCounterBase) {
          ++fixed;
        } else {
          ++gp;
        }
      }
      ASSERT_LE(gp, a.gp_counters()) << "cpu " << c << " t " << t;
      ASSERT_LE(fixed, a.fixed_counters()) << "cpu " << c << " t " << t;
    }
    std::sort(all.begin(), all.end());
    ASSERT_TRUE(std::adjacent_find(all.begin(), all.end()) == all.end())
        << "a request is on two slots at t " << t;
  };
  std::vector<RequestId> last_set;
  auto note_set = [&](int c) {
    if (running[c] != kSimPid) return;
    std::vector<RequestId> ids = OnHardware(a, c);
    if (!last_set.empty() && ids != last_set) ++st->set_changes;
    last_set = ids;
  };
  auto run_now = [&](uint64_t t) {
    uint64_t run = st->run_ns;
    if (running[0] == kSimPid || running[1] == kSimPid) run += t - run_since;
    return run;
  };
  for (;;) {
    const uint64_t t = std::min({slice_end[0], slice_end[1], next_tick[0],
                                 next_tick[1]});
    if (t > end) break;
    for (int c = 0; c < 2; ++c) {
      if (slice_end[c] == t) {
        credit(c, t);
        a.SwitchOut(c, t);
        if (running[c] == kSimPid) st->run_ns += t - run_since;
        std::swap(running[c], waiting);
        if (running[c] == kSimPid) run_since = t;
        a.SwitchIn(c, TaskId{running[c], running[c]}, t);
        slice_end[c] = t + (50 + rnd(451)) * kUs;
        check(t);
        note_set(c);
      }
      if (next_tick[c] == t) {
        credit(c, t);
        a.Tick(c, t);
        next_tick[c] = t + 10 * kUs;
        check(t);
        note_set(c);
      }
    }
    // Running time can't exceed what the GP counters offer the context.
    uint64_t sum = 0;
    for (RequestId id : gp_only) sum += MustRead(a, id, t).time_running;
    const uint64_t cap = static_cast<uint64_t>(a.gp_counters()) * run_now(t);
    st->max_running_sum_excess =
        std::max(st->max_running_sum_excess, sum > cap ? sum - cap : 0);
  }
  for (int c = 0; c < 2; ++c) credit(c, end);
  if (running[0] == kSimPid || running[1] == kSimPid)
    st->run_ns += end - run_since;
  for (const auto& [id, rate] : rate_per_us)
    st->truth[id] = rate * st->run_ns / kUs;
}

// The task's flexible set rotates once per mux interval of its run time:
// not faster because it migrates, not slower because its slices are short.
void ExpectRotationsFollowRunTime(const SimStats& st) {
  const double expect =
      static_cast<double>(st.run_ns) / static_cast<double>(kDefaultMuxIntervalNs);
  EXPECT_GE(st.set_changes, expect * 0.97 - 1);
  EXPECT_LE(st.set_changes, expect + 1);
}

// Checks one request's reading against what the simulated driver saw.
void ExpectConsistent(const PmuArbiter& a, RequestId id, uint64_t end,
                      const SimStats& st) {
  const PmuArbiter::Reading r = MustRead(a, id, end);
  ASSERT_TRUE(r.counted) << "request " << id;
  EXPECT_EQ(r.time_enabled, st.run_ns) << "request " << id;
  EXPECT_EQ(r.time_running, st.on_hw.at(id)) << "request " << id;
  const double truth = static_cast<double>(st.truth.at(id));
  EXPECT_NEAR(r.scaled, truth, 0.05 * truth) << "request " << id;
}

// Regression: rotation must follow the task's own run time and keep its
// place across switches and migrations. One session, 11 GP-only counters on
// 8 GP counters, plus an instructions event (raw 0xc0) that sits on fixed0:
// each GP-only event runs 8/11 of the time.
TEST(PmuArbiterTest, MigratingTaskShortSlicesSharesGpCountersFairly) {
  for (int fixed_pos : {0, 5, 11}) {
    SCOPED_TRACE("0xc0 added at position " + std::to_string(fixed_pos));
    PmuArbiter a(Skl(2), kDefaultMuxIntervalNs);
    std::map<RequestId, uint64_t> rate;
    std::vector<RequestId> gp_only;
    RequestId fixed = 0;
    for (int i = 0, g = 0; i < 12; ++i) {
      const pfm_pmu_req req = i == fixed_pos
                                  ? TaskCounter(kSimPid, PERF_TYPE_RAW, 0xc0, 0)
                                  : Raw(kSimPid, g++, 0);
      const int id = a.Add(req, 1, Label("ev", i).c_str(), 0, nullptr);
      ASSERT_GT(id, 0);
      rate[id] = 3 + 2 * i;
      if (i == fixed_pos) {
        fixed = id;
      } else {
        gp_only.push_back(id);
      }
    }
    SimStats st;
    const uint64_t end = 2000 * kMs;
    SimulateScheduler(a, end, 7 + fixed_pos, rate, gp_only, &st);
    if (HasFatalFailure()) return;
    EXPECT_GT(st.run_ns, end / 2);
    EXPECT_LE(st.max_running_sum_excess, 1000u);
    ExpectRotationsFollowRunTime(st);
    EXPECT_DOUBLE_EQ(MustRead(a, fixed, end).ratio, 1.0);
    ExpectConsistent(a, fixed, end, st);
    double sum = 0;
    for (RequestId id : gp_only) {
      const PmuArbiter::Reading r = MustRead(a, id, end);
      EXPECT_NEAR(r.ratio, 8.0 / 11.0, 0.05) << "request " << id;
      sum += r.ratio;
      ExpectConsistent(a, id, end, st);
    }
    EXPECT_LE(sum, 8.0 + 1e-6);
  }
}

// Regression: max-min fairness between sessions survives realistic
// scheduling. A has 10 counters, B 1: B runs always, each of A's 70%.
TEST(PmuArbiterTest, MigratingTaskShortSlicesSharesFairlyBetweenSessions) {
  PmuArbiter a(Skl(2), kDefaultMuxIntervalNs);
  std::map<RequestId, uint64_t> rate;
  std::vector<RequestId> big, all;
  for (int i = 0; i < 10; ++i) {
    const int id = a.Add(Raw(kSimPid, i, 0), 1, "A", 0, nullptr);
    ASSERT_GT(id, 0);
    big.push_back(id);
    rate[id] = 5 + i;
  }
  const int small = a.Add(Raw(kSimPid, 20, 0), 2, "B", 0, nullptr);
  ASSERT_GT(small, 0);
  rate[small] = 11;
  all = big;
  all.push_back(small);
  SimStats st;
  const uint64_t end = 2000 * kMs;
  SimulateScheduler(a, end, 99, rate, all, &st);
  if (HasFatalFailure()) return;
  EXPECT_LE(st.max_running_sum_excess, 1000u);
  ExpectRotationsFollowRunTime(st);
  EXPECT_DOUBLE_EQ(MustRead(a, small, end).ratio, 1.0);
  ExpectConsistent(a, small, end, st);
  for (RequestId id : big) {
    EXPECT_NEAR(MustRead(a, id, end).ratio, 0.7, 0.05) << "request " << id;
    ExpectConsistent(a, id, end, st);
  }
}

}  // namespace
}  // namespace pfm
