// PmuArbiter as a whole: contexts and their clocks, slots freed and filled
// as requests come and go, readings and scaling, random churn against
// invariants, and a simulated scheduler that drives it as pfmd's simulated
// machine does. Admission and the flexible pool's policy have their own
// tests (admission_test.cc, flexible_pool_test.cc).
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

TEST(PmuArbiterTest, CountsRotationsOnlyWhileOversubscribed) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 8; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, 0), 1, "fits", 0, nullptr), 0);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  RunCpu(a, 0, 0, 40 * kMs, kMs, [](RequestId, uint64_t) { return 1; });
  EXPECT_EQ(a.rotations(), 0u) << "eight GP counters hold eight requests";
  // A ninth waits: the context rotates once per 4 ms of its run time.
  ASSERT_GT(a.Add(Raw(kPid, 8, 0), 1, "waits", 40 * kMs, nullptr), 0);
  RunCpu(a, 0, 40 * kMs, 80 * kMs, kMs, [](RequestId, uint64_t) { return 1; });
  EXPECT_GE(a.rotations(), 9u);
  EXPECT_LE(a.rotations(), 10u);
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
}  // namespace arbiter_test
}  // namespace pfm
