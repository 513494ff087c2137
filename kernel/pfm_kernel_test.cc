#include "kernel/pfm_kernel.h"

#include <linux/perf_event.h>

#include <thread>

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
