#include "kernel/pfm_kernel.h"

#include <linux/perf_event.h>

#include <map>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace pfm {
namespace {

MachineInfo TwoCpus() {
  MachineInfo m;
  m.cpus = 2;
  m.pmu = "test";
  m.gp_counters = 4;
  m.fixed_counters = 3;
  m.debug_registers = 4;
  m.bts = true;
  return m;
}

TEST(Kernel, VerbsAndHooksRunUnderTheLock) {
  Kernel k(TwoCpus(), KernelOptions{});
  KernelLockGuard l(&k.lock());
  k.ContextSwitch(0, 100, TaskId{}, TaskId{1000, 1000}, false);
  EXPECT_EQ(k.Running(0).pid, 1000);
  k.DrainCpu(0, 200);
  ASSERT_NE(k.Area(1), nullptr);
  EXPECT_FALSE(k.TaskHeld(TaskId{1000, 1000}));
}

// One table of what runs where: a task that gets a DS consumer and a counter
// while it already runs on CPU 1 has both installed there at once (each part
// reads the Kernel's table), and both come off when it switches out.
TEST(Kernel, DsAndCountersFollowOneRunningTable) {
  Kernel k(TwoCpus(), KernelOptions{});
  KernelLockGuard l(&k.lock());
  const TaskId task{1000, 1000};
  k.ContextSwitch(1, 100, TaskId{}, task, false);
  EXPECT_EQ(k.Running(1), task);
  EXPECT_EQ(k.Running(0), TaskId{});

  ConsumerParams p;
  p.req.ctx_kind = PFM_CTX_TASK;
  p.req.pid = task.pid;
  p.req.bts = PFM_BTS_LOSSLESS;
  p.req.filter = PFM_FILTER_USER;
  p.req.format = PFM_FORMAT_FIXED;
  p.req.ring_bytes = 1 << 16;
  p.session = 1;
  ErrorDetail d;
  ASSERT_GT(k.AttachConsumer(p, 200, &d), 0) << d.message;
  pfm_pmu_req r{};
  r.kind = PFM_REQ_COUNTER;
  r.ctx_kind = PFM_CTX_TASK;
  r.pid = task.pid;
  r.type = PERF_TYPE_RAW;
  r.config = 0x01d1;
  ASSERT_GT(k.AddRequest(r, 1, "ev", 200, &d), 0) << d.message;
  k.Tick(1, 300);

  ScheduledCounter sc[8];
  EXPECT_EQ(k.Area(1), k.TaskArea(task));
  EXPECT_EQ(k.ScheduledCounters(1, sc, 8), 1);
  EXPECT_NE(k.Area(0), k.TaskArea(task));
  EXPECT_EQ(k.ScheduledCounters(0, sc, 8), 0);

  k.ContextSwitch(1, 400, task, TaskId{}, false);
  EXPECT_EQ(k.Running(1), TaskId{});
  EXPECT_NE(k.Area(1), k.TaskArea(task));
  EXPECT_EQ(k.ScheduledCounters(1, sc, 8), 0);
}

// The arbiter's schedule reaches the session's stream: with 6 counters on 4
// GP counters they rotate, each going on and off, and for every request the
// on-intervals in the SCHEDULE records add up to the time_running the
// arbiter reports. Another session's consumer gets none of them.
TEST(Kernel, ScheduleRecordsAddUpToTimeRunning) {
  Kernel k(TwoCpus(), KernelOptions{});
  KernelLockGuard l(&k.lock());
  const TaskId task{1000, 1000};
  constexpr uint64_t kMs = 1'000'000;
  k.ContextSwitch(0, 0, TaskId{}, task, false);
  ErrorDetail d;
  std::vector<RequestId> ids;
  for (int i = 0; i < 6; ++i) {
    pfm_pmu_req r{};
    r.kind = PFM_REQ_COUNTER;
    r.ctx_kind = PFM_CTX_TASK;
    r.pid = task.pid;
    r.type = PERF_TYPE_RAW;
    r.config = 0x01d1 + (i << 8);
    const int id = k.AddRequest(r, 7, "ev", 0, &d);
    ASSERT_GT(id, 0) << d.message;
    ids.push_back(static_cast<RequestId>(id));
  }
  k.Tick(0, 0);  // the first deal, before anyone listens
  ConsumerParams p;
  p.req.ctx_kind = PFM_CTX_TASK;
  p.req.pid = task.pid;
  p.req.bts = PFM_BTS_OFF;
  p.req.filter = PFM_FILTER_USER;
  p.req.format = PFM_FORMAT_COMPACT;
  p.req.flags = PFM_CONSUMER_SCHEDULE;
  p.req.ring_bytes = 1 << 16;
  p.session = 7;
  const int mine = k.AttachConsumer(p, 0, &d);
  ASSERT_GT(mine, 0) << d.message;
  p.session = 8;
  const int other = k.AttachConsumer(p, 0, &d);
  ASSERT_GT(other, 0) << d.message;

  for (uint64_t t = 1; t <= 50; ++t) k.Tick(0, t * kMs);
  k.ContextSwitch(0, 53 * kMs, task, TaskId{}, false);  // all off
  k.ContextSwitch(0, 60 * kMs, TaskId{}, task, false);  // on again
  constexpr uint64_t kEnd = 70 * kMs;

  std::vector<pfm_record> recs;
  k.ConsumerRing(static_cast<ConsumerId>(mine))->Snapshot(&recs);
  std::map<RequestId, uint64_t> on_since, running;
  size_t offs = 0;
  for (const pfm_record& r : recs) {
    ASSERT_EQ(r.type, PFM_REC_SCHEDULE);
    EXPECT_EQ(r.pid, 1000u);
    const RequestId id = r.u.sched.request;
    if (r.misc & PFM_MISC_SCHED_ON) {
      ASSERT_EQ(on_since.count(id), 0u) << "on twice: request " << id;
      on_since[id] = r.time;
    } else {
      ASSERT_EQ(on_since.count(id), 1u) << "off while off: request " << id;
      running[id] += r.time - on_since[id];
      on_since.erase(id);
      ++offs;
    }
  }
  for (const auto& [id, since] : on_since) running[id] += kEnd - since;
  EXPECT_GT(offs, 6u);  // rotated, and switched out
  for (RequestId id : ids) {
    PmuArbiter::Reading rd;
    ASSERT_EQ(k.ReadRequest(id, kEnd, &rd), 0);
    EXPECT_EQ(running[id], rd.time_running) << "request " << id;
    EXPECT_GT(rd.time_running, 0u);
    EXPECT_LT(rd.time_running, rd.time_enabled);  // multiplexed
  }
  std::vector<pfm_record> others;
  k.ConsumerRing(static_cast<ConsumerId>(other))->Snapshot(&others);
  EXPECT_TRUE(others.empty());
}

#ifndef NDEBUG
// Deliberately unlocked calls: clang's static analysis would refuse them
// (tools/thread_safety.sh); what is tested here is the run-time check.
void DrainUnlocked(Kernel& k) ABSL_NO_THREAD_SAFETY_ANALYSIS { k.DrainCpu(0, 0); }
TaskId RunningUnlocked(Kernel& k) ABSL_NO_THREAD_SAFETY_ANALYSIS { return k.Running(0); }

// In the spirit of lockdep_assert_held(): a verb or hook called without the
// kernel lock stops the program instead of racing.
TEST(KernelDeathTest, VerbWithoutTheLockAborts) {
  Kernel k(TwoCpus(), KernelOptions{});
  EXPECT_DEATH(DrainUnlocked(k), "kernel lock not held");
  EXPECT_DEATH(RunningUnlocked(k), "kernel lock not held");
}

TEST(KernelDeathTest, HookWithoutTheLockAborts) {
  Kernel k(TwoCpus(), KernelOptions{});
  EXPECT_DEATH(k.ContextSwitch(0, 1, TaskId{}, TaskId{7, 7}, false),
               "kernel lock not held");
}

TEST(KernelDeathTest, LockHeldByAnotherThreadDoesNotCount) {
  Kernel k(TwoCpus(), KernelOptions{});
  KernelLockGuard l(&k.lock());
  EXPECT_DEATH(
      {
        std::thread t([&] { DrainUnlocked(k); });
        t.join();
      },
      "kernel lock not held");
}
#endif

}  // namespace
}  // namespace pfm
