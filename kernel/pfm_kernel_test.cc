#include "kernel/pfm_kernel.h"

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
