// Over 600 lines: the tests of one class (sim_machine.h), one per behaviour.
#include "kernel/drivers/sim/sim_machine.h"

#include <linux/perf_event.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <set>

#include "gtest/gtest.h"
#include "kernel/drivers/machine.h"
#include "kernel/drivers/sim/fake_core.h"

// Counts heap allocations so a test can show Run() makes none.
static uint64_t g_allocations = 0;

void* operator new(size_t n) {
  ++g_allocations;
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
// GCC 12 at -O2 sees free() on memory from (our) operator new once inlined
// and warns; the pairing is right, the replacement functions are a pair.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace pfm {
namespace {

constexpr uint64_t kMs = 1000000;

MachineInfo Skylakeish(int cpus) {
  MachineInfo m;
  m.cpus = cpus;
  m.pmu = "skl";
  m.gp_counters = 4;
  m.fixed_counters = 3;
  m.pebs_counter_mask = 0xf;
  m.bts = true;
  m.pebs = true;
  return m;
}

SimConfig Config(int cpus, int tasks, uint64_t seed = 1) {
  SimConfig c;
  c.machine = Skylakeish(cpus);
  c.tasks = tasks;
  c.seed = seed;
  return c;
}

TraceConfig Bts(bool user, bool kernel) {
  TraceConfig t;
  t.bts_user = user;
  t.bts_kernel = kernel;
  return t;
}

bool IsKernel(uint64_t addr) { return addr >= kSimKernelTextBase; }

bool InUserText(int32_t pid, uint64_t addr) {
  uint64_t base = kSimUserTextBase +
                  uint64_t(pid - kFirstSimPid) * kSimUserTextStride;
  return addr >= base && addr < base + kSimUserTextBytes;
}

bool InKernelText(uint64_t addr) {
  return addr >= kSimKernelTextBase &&
         addr - kSimKernelTextBase < kSimKernelTextBytes;
}

bool SameBts(const std::vector<pfm_bts_raw>& a,
             const std::vector<pfm_bts_raw>& b) {
  return a.size() == b.size() &&
         (a.empty() ||
          std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
}

bool SameStats(const SimMachine::TaskStats& a, const SimMachine::TaskStats& b) {
  return a.runtime_ns == b.runtime_ns && a.switches_in == b.switches_in &&
         a.voluntary == b.voluntary && a.involuntary == b.involuntary &&
         a.branches == b.branches && a.bts_user == b.bts_user &&
         a.bts_kernel == b.bts_kernel && a.pebs == b.pebs &&
         a.held_ns == b.held_ns;
}

// Tracing, PEBS on counter 0 and counting all in one run, for determinism.
void ConfigureEverything(FakeCore* core) {
  TraceConfig tc = Bts(true, true);
  tc.pebs_counters = 1;
  tc.pebs_reset[0] = 200000;
  core->SetConfig(0, tc);
  core->SetCounters(0, {{1, 0, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
                        {2, 1, PERF_TYPE_RAW, 0x1234}});
}

TEST(SimMachineTest, SameSeedGivesIdenticalCallsRecordsAndStats) {
  FakeCore a(2), b(2);
  ConfigureEverything(&a);
  ConfigureEverything(&b);
  SimMachine ma(Config(2, 6, 42), &a), mb(Config(2, 6, 42), &b);
  ma.Run(5 * kMs);
  mb.Run(5 * kMs);
  EXPECT_EQ(a.trace_hash(), b.trace_hash());
  EXPECT_GT(a.switches().size(), 10u);
  for (int32_t pid : ma.Pids()) {
    ASSERT_NE(a.Log(pid), nullptr);
    ASSERT_NE(b.Log(pid), nullptr);
    EXPECT_TRUE(SameBts(a.Log(pid)->bts, b.Log(pid)->bts)) << pid;
    EXPECT_EQ(a.Log(pid)->pebs_total, b.Log(pid)->pebs_total) << pid;
    SimMachine::TaskStats sa, sb;
    ASSERT_EQ(ma.Stats(pid, &sa), 0);
    ASSERT_EQ(mb.Stats(pid, &sb), 0);
    EXPECT_TRUE(SameStats(sa, sb)) << pid;
  }
}

TEST(SimMachineTest, DifferentSeedGivesDifferentHistory) {
  FakeCore a(2), b(2);
  ConfigureEverything(&a);
  ConfigureEverything(&b);
  SimMachine ma(Config(2, 6, 1), &a), mb(Config(2, 6, 2), &b);
  ma.Run(2 * kMs);
  mb.Run(2 * kMs);
  EXPECT_NE(a.trace_hash(), b.trace_hash());
}

TEST(SimMachineTest, SplittingRunDoesNotChangeHistory) {
  // No counters: Run() passes pending counts when it returns, so a split
  // run has more (smaller) AddCount calls.
  FakeCore a(2), b(2);
  a.SetConfig(0, Bts(true, true));
  b.SetConfig(0, Bts(true, true));
  SimMachine ma(Config(2, 6), &a), mb(Config(2, 6), &b);
  ma.Run(3 * kMs);
  for (int i = 0; i < 300; ++i) mb.Run(10000);
  EXPECT_EQ(ma.now(), mb.now());
  EXPECT_EQ(a.trace_hash(), b.trace_hash());
}

// Small enough that slices (<= 500 us, ~1 branch/us) reach the threshold.
FakeCore::Options SmallAreas() {
  FakeCore::Options o;
  o.bts_records = 256;
  o.bts_threshold = 128;
  return o;
}

TEST(SimMachineTest, EveryStoredBtsRecordIsAccountedInStats) {
  FakeCore core(2, SmallAreas());
  core.SetConfig(0, Bts(true, true));
  SimMachine m(Config(2, 8), &core);
  m.Run(10 * kMs);
  uint64_t total = 0;
  for (int32_t pid : m.Pids()) {
    SimMachine::TaskStats s;
    ASSERT_EQ(m.Stats(pid, &s), 0);
    const FakeCore::TaskLog* log = core.Log(pid);
    ASSERT_NE(log, nullptr) << pid;
    // The last slice's records may still sit in the DS area.
    EXPECT_LE(log->bts_total, s.bts_user + s.bts_kernel) << pid;
    EXPECT_EQ(s.bts_dropped, 0u);
    EXPECT_EQ(s.bts_user + s.bts_kernel, s.branches) << pid;
    total += s.bts_user + s.bts_kernel;
  }
  uint64_t drained = 0;
  for (const auto& [pid, log] : core.logs()) drained += log.bts_total;
  uint64_t pending = 0;
  for (int cpu = 0; cpu < 2; ++cpu) pending += core.Area(cpu)->bts_count();
  EXPECT_EQ(drained + pending, total);
  EXPECT_GT(core.interrupts(), 0u);
  EXPECT_EQ(core.violations(), 0u) << core.first_violation();
}

TEST(SimMachineTest, UserOnlyConfigNeverStoresKernelFrom) {
  FakeCore core(2);
  core.SetConfig(0, Bts(true, false));
  SimMachine m(Config(2, 4), &core);
  m.Run(10 * kMs);
  uint64_t records = 0, kernel_targets = 0;
  for (const auto& [pid, log] : core.logs()) {
    for (const pfm_bts_raw& r : log.bts) {
      ASSERT_FALSE(IsKernel(r.from)) << std::hex << r.from;
      kernel_targets += IsKernel(r.to);
    }
    records += log.bts.size();
  }
  EXPECT_GT(records, 1000u);
  EXPECT_GT(kernel_targets, 0u);  // syscalls: user from, kernel to
  for (int32_t pid : m.Pids()) {
    SimMachine::TaskStats s;
    ASSERT_EQ(m.Stats(pid, &s), 0);
    EXPECT_EQ(s.bts_kernel, 0u);
    EXPECT_LT(s.bts_user, s.branches);  // kernel branches ran, untraced
  }
}

TEST(SimMachineTest, KernelAndUserConfigStoresBothInsideTheCodeRanges) {
  FakeCore core(2);
  core.SetConfig(0, Bts(true, true));
  SimMachine m(Config(2, 4), &core);
  m.Run(10 * kMs);
  uint64_t user = 0, kernel = 0, predicted = 0;
  for (const auto& [pid, log] : core.logs()) {
    for (const pfm_bts_raw& r : log.bts) {
      if (IsKernel(r.from)) {
        ++kernel;
        ASSERT_TRUE(InKernelText(r.from));
        ASSERT_TRUE(InKernelText(r.to) || InUserText(pid, r.to));
      } else {
        ++user;
        ASSERT_TRUE(InUserText(pid, r.from)) << pid << std::hex << r.from;
        ASSERT_TRUE(InKernelText(r.to) || InUserText(pid, r.to));
      }
      predicted += (r.flags & PFM_BTS_RAW_PREDICTED) != 0;
    }
  }
  EXPECT_GT(user, 1000u);
  EXPECT_GT(kernel, 1000u);
  const double p = double(predicted) / double(user + kernel);
  EXPECT_GT(p, 0.85);
  EXPECT_LT(p, 0.95);
}

// User code is a fixed program (docs/sim.md): a branch site always goes to
// the same target, except returns (their caller's next block) and kernel
// entries; loops revisit sites, so far fewer sites than branches.
TEST(SimMachineTest, UserBranchesComeFromAFixedProgramThatLoops) {
  FakeCore core(1);
  core.SetConfig(0, Bts(true, false));
  SimMachine m(Config(1, 1), &core);
  m.Run(50 * kMs);
  std::map<uint64_t, std::set<uint64_t>> targets;  // from -> user targets
  uint64_t user_to = 0;
  for (const auto& [pid, log] : core.logs()) {
    for (const pfm_bts_raw& r : log.bts) {
      if (IsKernel(r.to)) continue;  // a syscall or interrupt entry
      ++user_to;
      targets[r.from].insert(r.to);
    }
  }
  ASSERT_GT(user_to, 5000u);
  // 64 KiB of 2..64-byte blocks: about two thousand sites at most.
  EXPECT_LT(targets.size(), 2500u);
  EXPECT_LT(targets.size() * 4, user_to);  // sites are revisited
  size_t one_target = 0;
  for (const auto& [from, to] : targets) one_target += to.size() == 1;
  // Returns are 8% of sites; every other site has one target.
  EXPECT_GT(double(one_target) / targets.size(), 0.85);
}

TEST(SimMachineTest, SwitchesArePairedOrderedAndOfBothKinds) {
  FakeCore core(3);
  core.SetConfig(0, Bts(true, false));
  SimMachine m(Config(3, 10), &core);
  m.Run(20 * kMs);
  // FakeCore checks pairing (prev == what runs), one CPU at a time per task,
  // and per-CPU and per-task time order.
  EXPECT_EQ(core.violations(), 0u) << core.first_violation();
  uint64_t voluntary = 0, involuntary = 0, idle_in = 0, switches_in = 0;
  std::map<int32_t, uint64_t> cpus_used;
  for (const FakeCore::Switch& s : core.switches()) {
    (s.preempt ? involuntary : voluntary)++;
    idle_in += s.next.pid == 0;
    if (s.next.pid != 0) cpus_used[s.next.pid] |= 1u << s.cpu;
  }
  EXPECT_GT(voluntary, 10u);
  EXPECT_GT(involuntary, 10u);
  EXPECT_GT(idle_in, 0u);
  bool migrated = false;
  for (const auto& [pid, mask] : cpus_used) migrated |= (mask & (mask - 1));
  EXPECT_TRUE(migrated);
  for (int32_t pid : m.Pids()) {
    SimMachine::TaskStats s;
    ASSERT_EQ(m.Stats(pid, &s), 0);
    EXPECT_EQ(s.switches_in, core.Log(pid)->switches_in);
    switches_in += s.switches_in;
  }
  EXPECT_GT(switches_in, 0u);
}

TEST(SimMachineTest, HeldTaskDoesNotRunUntilReleased) {
  FakeCore core(2);
  SimMachine m(Config(2, 4), &core);
  m.Run(1 * kMs);
  core.SetHeld(1000, true);
  m.Run(10000);  // one boundary: the hold takes effect
  SimMachine::TaskStats before, during, after;
  ASSERT_EQ(m.Stats(1000, &before), 0);
  const uint64_t switches_before = core.Log(1000)->switches_in;
  m.Run(5 * kMs);
  ASSERT_EQ(m.Stats(1000, &during), 0);
  EXPECT_EQ(during.runtime_ns, before.runtime_ns);
  EXPECT_EQ(core.Log(1000)->switches_in, switches_before);
  // Counted from when the hold was seen (at once if it was running, at its
  // turn in the run queue otherwise).
  EXPECT_GT(during.held_ns, 0u);
  EXPECT_LE(during.held_ns, 5 * kMs + 10000);
  core.SetHeld(1000, false);
  m.Run(10 * kMs);
  ASSERT_EQ(m.Stats(1000, &after), 0);
  EXPECT_GT(after.runtime_ns, during.runtime_ns);
  EXPECT_EQ(core.violations(), 0u) << core.first_violation();
}

TEST(SimMachineTest, TaskHeldAfterDsInterruptIsSwitchedOutAtOnce) {
  FakeCore::Options o;
  o.bts_records = 64;
  o.bts_threshold = 32;
  o.hold_on_interrupt = true;
  FakeCore core(1, o);
  core.SetConfig(0, Bts(true, true));
  SimMachine m(Config(1, 2), &core);
  m.Run(2 * kMs);
  ASSERT_GT(core.interrupts(), 0u);
  // The first interrupt holds the running task: its very next event is a
  // switch out at the interrupt's time, after exactly one threshold's worth.
  const FakeCore::Switch* out = nullptr;
  for (const FakeCore::Switch& s : core.switches())
    if (s.prev.pid != 0) { out = &s; break; }
  ASSERT_NE(out, nullptr);
  EXPECT_FALSE(out->preempt);
  const FakeCore::TaskLog* log = core.Log(out->prev.pid);
  ASSERT_EQ(log->bts_total, 32u);
  EXPECT_EQ(log->bts_drain_ns[0], out->now_ns);
  // Both tasks end up held: nothing runs, nothing more is stored.
  for (int32_t pid : m.Pids()) {
    SimMachine::TaskStats s;
    ASSERT_EQ(m.Stats(pid, &s), 0);
    EXPECT_EQ(s.bts_user + s.bts_kernel, 32u);
    EXPECT_GT(s.held_ns, 0u);
  }
}

TEST(SimMachineTest, CounterDeltasSumToTrueCountWhenAlwaysScheduled) {
  FakeCore core(2);
  const std::vector<std::pair<uint32_t, uint64_t>> events = {
      {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
      {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
      {PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
      {PERF_TYPE_RAW, 0x01c2},
      {PERF_TYPE_HW_CACHE, 0x10002}};
  SimMachine m(Config(2, 5), &core);
  for (int32_t pid : m.Pids()) {
    std::vector<ScheduledCounter> sc;
    for (size_t e = 0; e < events.size(); ++e)
      sc.push_back({uint32_t(pid * 10 + e), int(e), events[e].first,
                    events[e].second});
    core.SetCounters(pid, sc);
  }
  m.Run(20 * kMs);
  for (int32_t pid : m.Pids()) {
    SimMachine::TaskStats s;
    ASSERT_EQ(m.Stats(pid, &s), 0);
    for (size_t e = 0; e < events.size(); ++e)
      EXPECT_EQ(core.count(pid * 10 + e),
                m.TrueCount(pid, events[e].first, events[e].second))
          << pid << " event " << e;
    EXPECT_EQ(m.TrueCount(pid, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
              s.runtime_ns * 3);
    EXPECT_EQ(m.TrueCount(pid, PERF_TYPE_HARDWARE,
                          PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
              s.branches);
    const uint64_t instr =
        m.TrueCount(pid, PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS);
    const uint64_t derived = m.TrueCount(pid, PERF_TYPE_RAW, 0x01c2);
    EXPECT_GE(derived, instr / 1000);
    EXPECT_LE(derived, instr / 2);
  }
}

TEST(SimMachineTest, InstructionRateChangesOverTime) {
  FakeCore core(1);
  SimMachine m(Config(1, 1), &core);
  std::vector<uint64_t> ipc_milli;
  uint64_t cycles0 = 0, instr0 = 0;
  for (int i = 0; i < 10; ++i) {
    m.Run(2 * kMs);
    uint64_t cycles =
        m.TrueCount(1000, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES);
    uint64_t instr =
        m.TrueCount(1000, PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS);
    if (cycles > cycles0)
      ipc_milli.push_back((instr - instr0) * 1000 / (cycles - cycles0));
    cycles0 = cycles;
    instr0 = instr;
  }
  ASSERT_GE(ipc_milli.size(), 5u);
  uint64_t lo = *std::min_element(ipc_milli.begin(), ipc_milli.end());
  uint64_t hi = *std::max_element(ipc_milli.begin(), ipc_milli.end());
  EXPECT_GT(hi, lo + 100);
}

TEST(SimMachineTest, PebsRecordsAppearAtAboutEventsPerPeriod) {
  FakeCore core(2);
  const uint64_t kPeriod = 100000;
  TraceConfig tc;
  tc.pebs_counters = 1u << 2;
  tc.pebs_reset[2] = kPeriod;
  core.SetConfig(0, tc);
  SimMachine m(Config(2, 4), &core);
  for (int32_t pid : m.Pids())
    core.SetCounters(pid, {{uint32_t(pid), 2, PERF_TYPE_HARDWARE,
                            PERF_COUNT_HW_CPU_CYCLES}});
  m.Run(20 * kMs);
  uint64_t total = 0;
  for (int32_t pid : m.Pids()) {
    SimMachine::TaskStats s;
    ASSERT_EQ(m.Stats(pid, &s), 0);
    const uint64_t cycles =
        m.TrueCount(pid, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES);
    // Arming restarts at every switch-in, so each may lose < 1 period.
    EXPECT_LE(s.pebs, cycles / kPeriod) << pid;
    EXPECT_GE(s.pebs + s.switches_in, cycles / kPeriod) << pid;
    EXPECT_EQ(s.bts_user + s.bts_kernel, 0u);
    const FakeCore::TaskLog* log = core.Log(pid);
    uint64_t last_tsc = 0;
    for (const pfm_pebs_raw& r : log->pebs) {
      EXPECT_EQ(r.applicable_counters, 1u << 2);
      EXPECT_TRUE(InUserText(pid, r.eventing_ip) || InKernelText(r.eventing_ip));
      uint64_t data = kSimUserDataBase +
                      uint64_t(pid - kFirstSimPid) * kSimUserDataStride;
      EXPECT_GE(r.data_linear_address, data);
      EXPECT_LT(r.data_linear_address, data + kSimUserDataBytes);
      EXPECT_GT(r.latency, 0u);
      EXPECT_GE(r.tsc, last_tsc);
      last_tsc = r.tsc;
    }
    total += s.pebs;
  }
  EXPECT_GT(total, 500u);
}

TEST(SimMachineTest, UnarmedOrUnscheduledCounterStoresNoPebs) {
  FakeCore core(1);
  TraceConfig tc;
  tc.pebs_counters = 1u << 1;  // armed, but nothing scheduled on counter 1
  tc.pebs_reset[1] = 1000;
  core.SetConfig(0, tc);
  core.SetCounters(0, {{7, 0, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES}});
  SimMachine m(Config(1, 2), &core);
  m.Run(5 * kMs);
  SimMachine::TaskStats s;
  ASSERT_EQ(m.Stats(1000, &s), 0);
  EXPECT_GT(s.runtime_ns, 0u);
  EXPECT_EQ(s.pebs, 0u);
  EXPECT_GT(core.count(7), 0u);
}

TEST(SimMachineTest, ExitTaskCallsTaskExitAndRemovesThePid) {
  FakeCore core(2);
  SimMachine m(Config(2, 4), &core);
  m.Run(3 * kMs + 5000);  // mid-quantum
  // Exit one task that is running, if any, and one that is not.
  int32_t running = core.running(0) != 0 ? core.running(0) : 1001;
  ASSERT_EQ(m.ExitTask(running, 9), 0);
  int32_t other = running == 1000 ? 1003 : 1000;
  ASSERT_EQ(m.ExitTask(other, 0), 0);
  EXPECT_FALSE(m.HasTask(running));
  EXPECT_FALSE(m.HasTask(other));
  EXPECT_EQ(m.Pids().size(), 2u);
  ASSERT_NE(core.Log(running), nullptr);
  EXPECT_TRUE(core.Log(running)->exited);
  EXPECT_EQ(core.Log(running)->exit_status, 9);
  SimMachine::TaskStats at_exit, later;
  ASSERT_EQ(m.Stats(running, &at_exit), 0);
  m.Run(10 * kMs);
  ASSERT_EQ(m.Stats(running, &later), 0);
  EXPECT_EQ(later.runtime_ns, at_exit.runtime_ns);
  EXPECT_EQ(core.violations(), 0u) << core.first_violation();
  ErrorDetail d;
  EXPECT_EQ(m.ExitTask(running, 0, &d), -ENOENT);
  EXPECT_NE(std::strstr(d.message, "no live task"), nullptr);
  EXPECT_EQ(m.ExitTask(42, 0), -ENOENT);
  EXPECT_EQ(m.Stats(42, &later), -ENOENT);
}

TEST(SimMachineTest, CreateRefusesBadConfigWithReason) {
  FakeCore core(1);
  std::unique_ptr<SimMachine> m;
  ErrorDetail d;
  SimConfig c = Config(1, 1);
  c.quantum_ns = 0;
  EXPECT_EQ(SimMachine::Create(c, &core, &m, &d), -EINVAL);
  EXPECT_NE(std::strstr(d.message, "quantum_ns"), nullptr);
  c = Config(0, 1);
  EXPECT_EQ(SimMachine::Create(c, &core, &m, &d), -EINVAL);
  c = Config(1, 1);
  c.slice_min_ns = 10;
  c.slice_max_ns = 5;
  EXPECT_EQ(SimMachine::Create(c, &core, &m, &d), -EINVAL);
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(SimMachine::Create(Config(1, 1), &core, &m, &d), 0);
  EXPECT_NE(m, nullptr);
}

TEST(SimMachineTest, RunsOnALibpfmDescribedMachine) {
  MachineInfo info;
  ErrorDetail d;
  ASSERT_EQ(DescribeSimMachine("skl", 4, &info, &d), 0) << d.message;
  SimConfig c;
  c.machine = info;
  FakeCore core(info.cpus);
  core.SetConfig(0, Bts(true, true));
  SimMachine m(c, &core);
  m.Run(2 * kMs);
  EXPECT_EQ(core.ticks(), 4u * 200);
  EXPECT_GT(core.interrupts(), 0u);
}

// A core that never allocates: drains by resetting, everything traced.
class NullCore : public CoreHooks {
 public:
  explicit NullCore(int cpus) {
    for (int i = 0; i < cpus; ++i)
      areas_.push_back(std::make_unique<DsArea>(i, 256, 128, 16, 8));
    config_.bts_user = config_.bts_kernel = true;
    config_.pebs_counters = 1;
    config_.pebs_reset[0] = 20000;
  }
  DsArea* Area(int cpu) override { return areas_[cpu].get(); }
  void DsInterrupt(int cpu, uint64_t) override { Drain(cpu); }
  void ContextSwitch(int cpu, uint64_t, TaskId, TaskId, bool) override {
    Drain(cpu);
  }
  void TaskExit(TaskId, uint64_t, int64_t) override {}
  TraceConfig TaskConfig(int, TaskId) override { return config_; }
  bool TaskHeld(TaskId) override { return false; }
  int ScheduledCounters(int, ScheduledCounter* out, int max) override {
    if (max < 2) return 0;
    out[0] = {1, 0, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES};
    out[1] = {2, 1, PERF_TYPE_RAW, 0x1234};
    return 2;
  }
  void AddCount(uint32_t, uint64_t delta) override { counted_ += delta; }
  void Tick(int, uint64_t) override {}

  uint64_t records_ = 0;
  uint64_t counted_ = 0;

 private:
  void Drain(int cpu) {
    records_ += areas_[cpu]->bts_count() + areas_[cpu]->pebs_count();
    areas_[cpu]->ResetBts();
    areas_[cpu]->ResetPebs();
  }
  std::vector<std::unique_ptr<DsArea>> areas_;
  TraceConfig config_;
};

TEST(SimMachineTest, RunDoesNotAllocate) {
  NullCore core(4);
  SimMachine m(Config(4, 64), &core);
  m.Run(1 * kMs);  // warm up: every code path once
  const uint64_t before = g_allocations;
  m.Run(10 * kMs);
  const uint64_t during = g_allocations - before;
  EXPECT_EQ(during, 0u);
  EXPECT_EQ(m.Pids().size(), 64u);  // allocates: the counter is live
  EXPECT_GT(g_allocations, before + during);
  EXPECT_GT(core.records_, 10000u);  // the traced path did run
  EXPECT_GT(core.counted_, 0u);
}

TEST(SimMachineTest, LargeMachineSmokeKeepsEveryCpuBusy) {
  const int kCpus = 64, kTasks = 2000;
  FakeCore::Options o;
  o.keep_records = false;
  FakeCore core(kCpus, o);
  SimMachine m(Config(kCpus, kTasks), &core);
  m.Run(10 * kMs);
  EXPECT_EQ(core.ticks(), uint64_t(kCpus) * 1000);
  uint64_t runtime = 0, ran = 0;
  for (int32_t pid : m.Pids()) {
    SimMachine::TaskStats s;
    ASSERT_EQ(m.Stats(pid, &s), 0);
    runtime += s.runtime_ns;
    ran += s.runtime_ns > 0;
  }
  // With 31 tasks per CPU nobody idles: all CPU time is task time.
  EXPECT_EQ(runtime, uint64_t(kCpus) * 10 * kMs);
  EXPECT_GT(ran, uint64_t(kTasks) / 2);
  EXPECT_EQ(core.violations(), 0u) << core.first_violation();
}

TEST(SimMachineTest, LargeMachineSmokeWithTracing) {
  const int kCpus = 64, kTasks = 2000;
  FakeCore::Options o = SmallAreas();
  o.keep_records = false;
  FakeCore core(kCpus, o);
  core.SetConfig(0, Bts(true, true));
  SimMachine m(Config(kCpus, kTasks), &core);
  m.Run(2 * kMs);
  uint64_t branches = 0, stored = 0, drained = 0;
  for (int32_t pid : m.Pids()) {
    SimMachine::TaskStats s;
    ASSERT_EQ(m.Stats(pid, &s), 0);
    branches += s.branches;
    stored += s.bts_user + s.bts_kernel;
    EXPECT_EQ(s.bts_dropped, 0u);
  }
  for (const auto& [pid, log] : core.logs()) drained += log.bts_total;
  for (int cpu = 0; cpu < kCpus; ++cpu) drained += core.Area(cpu)->bts_count();
  EXPECT_EQ(drained, stored);
  EXPECT_GT(branches, uint64_t(kCpus) * 2 * kMs / 1000 * 9 / 10);
  EXPECT_GT(core.interrupts(), uint64_t(kCpus));
  EXPECT_EQ(core.violations(), 0u) << core.first_violation();
}

}  // namespace
}  // namespace pfm
