// perf_event_open on this machine (as root). Tests that need a permission
// the process does not have skip with the reason; tests that need hardware
// this machine does not have check the refusal instead, and skip when the
// machine does have it.
#include "kernel/drivers/perf/perf_events.h"

#include <linux/hw_breakpoint.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernel/drivers/clock.h"

namespace pfm {
namespace {

// A forked child that runs `body` once released, then exits 0.
class Child {
 public:
  explicit Child(const std::function<void()>& body) {
    if (pipe(fds_) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(fds_[1]);
      char c;
      if (read(fds_[0], &c, 1) != 1) _exit(1);
      body();
      _exit(0);
    }
    close(fds_[0]);
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      Wait();
    }
    if (fds_[1] >= 0) close(fds_[1]);
  }
  pid_t pid() const { return pid_; }
  void Release() {
    ASSERT_EQ(write(fds_[1], "g", 1), 1);
    close(fds_[1]);
    fds_[1] = -1;
  }
  int Wait() {
    int st = 0;
    waitpid(pid_, &st, 0);
    reaped_ = true;
    return st;
  }

 private:
  int fds_[2] = {-1, -1};
  pid_t pid_ = -1;
  bool reaped_ = false;
};

void Spin(long n) {
  volatile long x = 0;
  for (long i = 0; i < n; ++i) x = x + i;
}

void PinToCpu0() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

bool NotPermitted(int rc) { return rc == -EACCES || rc == -EPERM; }

PerfCaps HostCaps() {
  PerfCaps caps;
  ErrorDetail d;
  EXPECT_EQ(ProbePerfCaps(kPerfDevicesDir, &caps, &d), 0) << d.message;
  return caps;
}

volatile uint64_t g_watch[8];

TEST(PerfCaps, ReadsCapabilitiesFromADevicesTree) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp ? tmp : "/tmp") + "/fake_devices";
  mkdir(root.c_str(), 0755);
  mkdir((root + "/software").c_str(), 0755);
  mkdir((root + "/breakpoint").c_str(), 0755);
  PerfCaps caps;
  ErrorDetail d;
  ASSERT_EQ(ProbePerfCaps(root, &caps, &d), 0);
  EXPECT_FALSE(caps.cpu_pmu);
  EXPECT_TRUE(caps.software);
  EXPECT_TRUE(caps.breakpoint);
  EXPECT_FALSE(caps.intel_bts);

  mkdir((root + "/cpu_core").c_str(), 0755);
  mkdir((root + "/cpu_core/caps").c_str(), 0755);
  FILE* f = fopen((root + "/cpu_core/caps/max_precise").c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("3\n", f);
  fclose(f);
  mkdir((root + "/intel_bts").c_str(), 0755);
  ASSERT_EQ(ProbePerfCaps(root, &caps, &d), 0);
  EXPECT_TRUE(caps.cpu_pmu);
  EXPECT_EQ(caps.cpu_pmu_name, "cpu_core");
  EXPECT_EQ(caps.max_precise, 3);
  EXPECT_TRUE(caps.intel_bts);

  EXPECT_EQ(ProbePerfCaps(root + "/nonexistent", &caps, &d), -ENOENT);
}

TEST(PerfEvents, CountsTaskClockAndContextSwitchesOfARealChild) {
  constexpr int kSleeps = 20;
  Child child([] {
    Spin(20 * 1000 * 1000);
    for (int i = 0; i < kSleeps; ++i) usleep(1000);
  });
  ASSERT_GT(child.pid(), 0);
  PerfEvent clock, cs, faults;
  ErrorDetail d;
  int rc = OpenSoftwareCounter(PerfTarget::Task(child.pid()),
                               PERF_COUNT_SW_TASK_CLOCK, &clock, &d);
  if (NotPermitted(rc)) GTEST_SKIP() << d.message;
  ASSERT_EQ(rc, 0) << d.message;
  uint64_t config = 0;
  ASSERT_EQ(SoftwareEventByName("context-switches", &config), 0);
  ASSERT_EQ(OpenSoftwareCounter(PerfTarget::Task(child.pid()), config, &cs, &d), 0)
      << d.message;
  ASSERT_EQ(SoftwareEventByName("page-faults", &config), 0);
  ASSERT_EQ(OpenSoftwareCounter(PerfTarget::Task(child.pid()), config, &faults, &d), 0);
  child.Release();
  const int st = child.Wait();
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);

  PerfCount c;
  ASSERT_EQ(clock.Read(&c, &d), 0) << d.message;
  EXPECT_GT(c.value, 1000000u);  // 20M loop iterations take well over 1 ms
  EXPECT_GT(c.time_enabled, 0u);
  EXPECT_GT(c.time_running, 0u);
  EXPECT_LE(c.time_running, c.time_enabled);
  ASSERT_EQ(cs.Read(&c, &d), 0);
  EXPECT_GE(c.value, static_cast<uint64_t>(kSleeps));
  EXPECT_GT(c.time_running, 0u);
  ASSERT_EQ(faults.Read(&c, &d), 0);
  EXPECT_GT(c.value, 0u);  // copy-on-write after fork at least
}

// A process target counts every thread, as perf stat -p does: threads that
// were there when it was opened, with what they fork only when asked for
// (attr.inherit; inherit_thread otherwise). The main thread's own event (the
// pid alone) sees nearly nothing: it only waits.
TEST(PerfEvents, AProcessTargetCountsEveryThreadAndChildrenOnlyWhenAsked) {
  int go[2], ready[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(go[1]);
    close(ready[0]);
    auto worker = [&](bool forks) {
      char c;
      if (read(go[0], &c, 1) != 0) _exit(2);  // EOF: the parent opened its events
      Spin(50 * 1000 * 1000);
      if (forks) {
        const pid_t g = fork();
        if (g == 0) {
          Spin(150 * 1000 * 1000);
          _exit(0);
        }
        int ws;
        waitpid(g, &ws, 0);
      }
    };
    std::thread a(worker, true), b(worker, false);
    if (write(ready[1], "r", 1) != 1) _exit(3);
    a.join();
    b.join();
    _exit(0);
  }
  close(go[0]);
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  PerfEvent main_only, threads, with_children;
  ErrorDetail d;
  int rc = OpenSoftwareCounter(PerfTarget::Task(child), PERF_COUNT_SW_TASK_CLOCK, &main_only,
                               &d);
  if (NotPermitted(rc)) GTEST_SKIP() << d.message;
  ASSERT_EQ(rc, 0) << d.message;
  ASSERT_EQ(OpenSoftwareCounter(PerfTarget::Process(child, false), PERF_COUNT_SW_TASK_CLOCK,
                                &threads, &d),
            0)
      << d.message;
  ASSERT_EQ(OpenSoftwareCounter(PerfTarget::Process(child, true), PERF_COUNT_SW_TASK_CLOCK,
                                &with_children, &d),
            0)
      << d.message;
  EXPECT_EQ(main_only.threads(), 1u);
  EXPECT_EQ(threads.threads(), 3u);
  EXPECT_EQ(with_children.threads(), 3u);
  close(go[1]);  // go
  int ws = 0;
  ASSERT_EQ(waitpid(child, &ws, 0), child);
  ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << ws;
  PerfCount m, t, w;
  ASSERT_EQ(main_only.Read(&m, &d), 0) << d.message;
  ASSERT_EQ(threads.Read(&t, &d), 0) << d.message;
  ASSERT_EQ(with_children.Read(&w, &d), 0) << d.message;
  // Two workers' 50 M iterations each; the grandchild's 150 M on top.
  EXPECT_LT(m.value * 4, t.value) << m.value << " ns main thread, " << t.value << " all threads";
  EXPECT_GT(w.value * 2, t.value * 3) << w.value << " ns with children, " << t.value;
  EXPECT_GE(t.time_enabled, 3 * m.time_enabled / 2);  // summed over the threads

  // A process that is not there.
  PerfEvent none;
  EXPECT_EQ(OpenSoftwareCounter(PerfTarget::Process(child, false), PERF_COUNT_SW_TASK_CLOCK,
                                &none, &d),
            -ESRCH);
  EXPECT_FALSE(none.is_open());
}

// Forks a paused process at pid `want` (ns_last_pid; root): its pid, or
// what the last of `attempts` forks got.
pid_t ForkPausedAt(pid_t want, int attempts) {
  pid_t got = -1;
  for (int i = 0; i < attempts && got != want; ++i) {
    if (got > 0) {
      kill(got, SIGKILL);
      waitpid(got, nullptr, 0);
    }
    FILE* f = fopen("/proc/sys/kernel/ns_last_pid", "w");
    if (f == nullptr) return -1;
    fprintf(f, "%d", want - 1);
    fclose(f);
    got = fork();
    if (got == 0) {
      pause();
      _exit(0);
    }
  }
  return got;
}

// A child process whose second thread reports its tid and ends when told
// (EndThread); the process then waits in pause() until killed (by the
// destructor). Runs as `uid`, dumpable as a user's own process is, unless
// uid is 0.
class TwoThreadChild {
 public:
  explicit TwoThreadChild(uid_t uid = 0) {
    int report[2];
    if (pipe(report) != 0) return;
    if (pipe(release_) != 0) {
      close(report[0]);
      close(report[1]);
      return;
    }
    pid_ = fork();
    if (pid_ == 0) {
      close(report[0]);
      close(release_[1]);
      if (uid != 0) {
        if (setgid(uid) != 0 || setuid(uid) != 0) _exit(3);
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
      }
      std::thread t([&] {
        const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
        if (write(report[1], &tid, sizeof tid) != sizeof tid) _exit(2);
        char b;
        if (read(release_[0], &b, 1) != 1) _exit(3);
      });
      t.join();
      pause();
      _exit(0);
    }
    close(report[1]);
    close(release_[0]);
    if (pid_ > 0 && read(report[0], &tid_, sizeof tid_) != sizeof tid_) tid_ = 0;
    close(report[0]);
  }
  ~TwoThreadChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (release_[1] >= 0) close(release_[1]);
  }
  pid_t pid() const { return pid_; }
  pid_t tid() const { return tid_; }  // 0 if it never reported
  // Ends the second thread; true once its /proc entry is gone (its id free).
  bool EndThread() {
    if (write(release_[1], "x", 1) != 1) return false;
    const std::string dir = "/proc/" + std::to_string(pid_) + "/task/" + std::to_string(tid_);
    for (int i = 0; i < 2000; ++i) {
      struct stat st;
      if (stat(dir.c_str(), &st) != 0) return true;
      usleep(1000);
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  pid_t tid_ = 0;
  int release_[2] = {-1, -1};
};

void KillAndReap(pid_t pid) {
  if (pid <= 0) return;  // never kill(-1)
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// A process target opens one event per thread id it listed; a thread that
// exits after the listing frees its id at once, and a new process there
// must not get the session's event. The hook ends the second thread just
// before its open and forks a new process at its id: the event opened on
// that id is dropped (only the main thread's is kept), without failing the
// request.
TEST(PerfEvents, AThreadIdRecycledBeforeItsOpenIsNotCounted) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (ns_last_pid)";
  TwoThreadChild child;
  ASSERT_GT(child.pid(), 0);
  const pid_t tid = child.tid();
  ASSERT_GT(tid, 0);
  ASSERT_NE(tid, child.pid());
  bool thread_ended = false;
  pid_t reused = -1;
  std::vector<pid_t> seen;
  PerfTarget target = PerfTarget::Process(child.pid(), false);
  target.before_thread_open = [&](pid_t t) {
    seen.push_back(t);
    if (t != tid) return;
    thread_ended = child.EndThread();
    if (thread_ended) reused = ForkPausedAt(tid, 50);
  };
  PerfEvent ev;
  ErrorDetail d;
  const int rc = OpenSoftwareCounter(target, PERF_COUNT_SW_TASK_CLOCK, &ev, &d);
  KillAndReap(reused);
  if (NotPermitted(rc)) GTEST_SKIP() << d.message;
  EXPECT_EQ(seen, (std::vector<pid_t>{child.pid(), tid}));
  ASSERT_TRUE(thread_ended) << "thread " << tid << " did not end";
  if (reused != tid) GTEST_SKIP() << "tid " << tid << " was not reused";
  ASSERT_EQ(rc, 0) << d.message;
  EXPECT_EQ(ev.threads(), 1u) << "an event on the process now at " << tid;
}

// The same when the opener is unprivileged and the new process at the id is
// another user's: the open there is refused (EACCES), and that refusal is
// not the request's (the thread it was for is gone): the process's event
// opens with its main thread's alone. uid 65534 opens user-mode task-clock
// on its own two-thread process; root puts its own process at the second
// thread's id just before that thread's open.
TEST(PerfEvents, ARefusalOnARecycledThreadIdIsNotTheRequests) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (ns_last_pid, setuid)";
  constexpr uid_t kNobody = 65534;
  TwoThreadChild target(kNobody);
  ASSERT_GT(target.pid(), 0);
  const pid_t tid = target.tid();
  ASSERT_GT(tid, 0) << "the target never reported its thread";
  // The opener: uid 65534, counting its own process; a hook tells us when
  // it is about to open the second thread's event, and waits.
  int go[2], done[2], result[2];
  for (int* p : {go, done, result}) ASSERT_EQ(pipe(p), 0);
  const pid_t opener = fork();
  if (opener == 0) {
    close(go[0]);
    close(done[1]);
    close(result[0]);
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(3);
    PerfTarget t = PerfTarget::Process(target.pid(), false);
    t.before_thread_open = [&](pid_t id) {
      if (id != tid) return;
      char b = 'g';
      if (write(go[1], &b, 1) != 1 || read(done[0], &b, 1) != 1) _exit(4);
    };
    PerfEvent ev;
    ErrorDetail d;
    const int rc = OpenSoftwareCounter(t, PERF_COUNT_SW_TASK_CLOCK, &ev, &d,
                                       /*user_only=*/true);
    const int out[2] = {rc, static_cast<int>(ev.threads())};
    if (write(result[1], out, sizeof out) != sizeof out) _exit(5);
    _exit(0);
  }
  close(go[1]);
  close(done[0]);
  close(result[1]);
  // When the opener reaches the second thread: end it, put root's process
  // at its id (EOF instead: the opener never got there).
  char b;
  const bool reached = opener > 0 && read(go[0], &b, 1) == 1;
  pid_t reused = -1;
  if (reached && target.EndThread()) reused = ForkPausedAt(tid, 50);
  (void)!write(done[1], "d", 1);
  int out[2] = {1, -1};
  const bool got = opener > 0 && read(result[0], out, sizeof out) == static_cast<ssize_t>(sizeof out);
  if (opener > 0) waitpid(opener, nullptr, 0);
  KillAndReap(reused);
  for (int fd : {go[0], done[1], result[0]}) close(fd);
  ASSERT_TRUE(got) << "the opener died";
  if (!reached && NotPermitted(out[0]))
    GTEST_SKIP() << "uid 65534 may not count its own process here (perf_event_paranoid)";
  ASSERT_TRUE(reached) << "the opener never reached thread " << tid << ": " << out[0];
  if (reused != tid) GTEST_SKIP() << "tid " << tid << " was not reused";
  EXPECT_EQ(out[0], 0) << std::strerror(-out[0]);
  EXPECT_EQ(out[1], 1);
}

TEST(PerfEvents, CountsACpuWideSoftwareEvent) {
  PerfEvent ev;
  ErrorDetail d;
  const int rc = OpenSoftwareCounter(PerfTarget::Cpu(0), PERF_COUNT_SW_CPU_CLOCK,
                                     &ev, &d);
  if (NotPermitted(rc)) GTEST_SKIP() << d.message;
  ASSERT_EQ(rc, 0) << d.message;
  Spin(1000 * 1000);
  PerfCount c;
  ASSERT_EQ(ev.Read(&c, &d), 0);
  EXPECT_GT(c.value, 0u);
  EXPECT_GT(c.time_enabled, 0u);
}

TEST(PerfEvents, SwitchWatcherSeesVoluntaryOutAndInRecords) {
  constexpr int kSleeps = 10;
  Child child([] {
    for (int i = 0; i < kSleeps; ++i) usleep(1000);
  });
  std::unique_ptr<PerfSampler> w;
  ErrorDetail d;
  const int rc = PerfSampler::OpenSwitchWatcher(PerfTarget::Task(child.pid()), 8, &w, &d);
  if (NotPermitted(rc)) GTEST_SKIP() << d.message;
  ASSERT_EQ(rc, 0) << d.message;
  child.Release();
  ASSERT_TRUE(WIFEXITED(child.Wait()));
  int outs = 0, ins = 0, voluntary_outs = 0, other_task = 0;
  uint64_t last_time = 0;
  bool ordered = true;
  ASSERT_GE(w->Read([&](const PerfRecord& r) {
              if (r.type != PERF_RECORD_SWITCH) return;
              if (r.sample_id.pid != static_cast<uint32_t>(child.pid())) ++other_task;
              if (r.sample_id.time < last_time) ordered = false;
              last_time = r.sample_id.time;
              if (r.switch_out) {
                ++outs;
                if (!r.switch_preempt) ++voluntary_outs;
              } else {
                ++ins;
              }
            }, &d), 0)
      << d.message;
  EXPECT_GE(voluntary_outs, kSleeps);
  EXPECT_GE(ins, kSleeps);
  EXPECT_EQ(other_task, 0);
  EXPECT_TRUE(ordered);
  // Times are CLOCK_MONOTONIC: not in the future.
  EXPECT_LE(last_time, MonotonicNs());
}

TEST(PerfEvents, SwitchWatcherFlagsPreemptionByACompetingTask) {
  // Two CPU-bound tasks on one CPU: the scheduler must preempt the watched
  // one (count work: the watched task spins a fixed number of iterations).
  Child competitor([] {
    PinToCpu0();
    for (;;) Spin(1000000);
  });
  Child child([] {
    PinToCpu0();
    Spin(300 * 1000 * 1000);
  });
  std::unique_ptr<PerfSampler> w;
  ErrorDetail d;
  const int rc = PerfSampler::OpenSwitchWatcher(PerfTarget::Task(child.pid()), 16, &w, &d);
  if (NotPermitted(rc)) GTEST_SKIP() << d.message;
  ASSERT_EQ(rc, 0) << d.message;
  competitor.Release();
  child.Release();
  ASSERT_TRUE(WIFEXITED(child.Wait()));
  int preempt_outs = 0;
  ASSERT_GE(w->Read([&](const PerfRecord& r) {
              if (r.type == PERF_RECORD_SWITCH && r.switch_out && r.switch_preempt)
                ++preempt_outs;
            }, &d), 0);
  EXPECT_GE(preempt_outs, 1);
}

TEST(PerfEvents, FourBreakpointsOpenOnATaskAndTheFifthGetsENOSPC) {
  const PerfCaps caps = HostCaps();
  if (!caps.breakpoint) GTEST_SKIP() << "no breakpoint PMU";
  Child child([] {});
  const PerfTarget t = PerfTarget::Task(child.pid());
  PerfEvent bp[5];
  ErrorDetail d;
  for (int i = 0; i < 4; ++i) {
    const int rc = OpenBreakpoint(caps, t, reinterpret_cast<uint64_t>(&g_watch[i]),
                                  8, HW_BREAKPOINT_W, &bp[i], &d);
    if (NotPermitted(rc)) GTEST_SKIP() << d.message;
    ASSERT_EQ(rc, 0) << i << ": " << d.message;
  }
  EXPECT_EQ(OpenBreakpoint(caps, t, reinterpret_cast<uint64_t>(&g_watch[4]), 8,
                           HW_BREAKPOINT_RW, &bp[4], &d),
            -ENOSPC);
  EXPECT_NE(std::strstr(d.message, "debug registers"), nullptr) << d.message;
  EXPECT_FALSE(bp[4].is_open());
  // Release one: the fifth is admitted.
  bp[1].Close();
  bp[1].Close();  // safe twice
  EXPECT_EQ(OpenBreakpoint(caps, t, reinterpret_cast<uint64_t>(&g_watch[4]), 8,
                           HW_BREAKPOINT_RW, &bp[4], &d),
            0)
      << d.message;
}

// Functions start anywhere (gcc -O0 does not align them): an execute
// breakpoint takes any address, as the kernel does.
__attribute__((noinline)) void BreakpointTarget() { asm volatile(""); }

TEST(PerfEvents, ExecuteBreakpointOpensOnAnUnalignedInstruction) {
  const PerfCaps caps = HostCaps();
  if (!caps.breakpoint) GTEST_SKIP() << "no breakpoint PMU";
  Child child([] {});
  PerfEvent bp;
  ErrorDetail d;
  const uint64_t a = reinterpret_cast<uint64_t>(&BreakpointTarget) | 1;  // odd
  const int rc = OpenBreakpoint(caps, PerfTarget::Task(child.pid()), a, sizeof(long),
                                HW_BREAKPOINT_X, &bp, &d);
  if (NotPermitted(rc)) GTEST_SKIP() << d.message;
  EXPECT_EQ(rc, 0) << d.message;
  EXPECT_TRUE(bp.is_open());
}

TEST(PerfEvents, RefusesMalformedBreakpointsBeforeTheKernel) {
  const PerfCaps caps = HostCaps();
  const PerfTarget t = PerfTarget::Task(getpid());
  PerfEvent bp;
  ErrorDetail d;
  const uint64_t a = reinterpret_cast<uint64_t>(&g_watch[0]);
  EXPECT_EQ(OpenBreakpoint(caps, t, a, 3, HW_BREAKPOINT_W, &bp, &d), -EINVAL);
  EXPECT_EQ(OpenBreakpoint(caps, t, a + 1, 4, HW_BREAKPOINT_W, &bp, &d), -EINVAL);
  EXPECT_EQ(OpenBreakpoint(caps, t, a, 4, HW_BREAKPOINT_X, &bp, &d), -EINVAL);
  EXPECT_EQ(OpenBreakpoint(caps, t, a, 4, HW_BREAKPOINT_R, &bp, &d), -EINVAL);
  EXPECT_EQ(OpenBreakpoint(caps, t, a, 4, 0, &bp, &d), -EINVAL);
  PerfCaps none = caps;
  none.breakpoint = false;
  EXPECT_EQ(OpenBreakpoint(none, t, a, 4, HW_BREAKPOINT_W, &bp, &d), -EOPNOTSUPP);
  EXPECT_FALSE(bp.is_open());
}

TEST(PerfEvents, HardwarePebsAndBtsAreNotSupportedOnThisMachine) {
  const PerfCaps caps = HostCaps();
  if (caps.cpu_pmu)
    GTEST_SKIP() << "this machine has a '" << caps.cpu_pmu_name
                 << "' PMU: hardware requests are expected to work here";
  const PerfTarget t = PerfTarget::Task(getpid());
  ErrorDetail d;
  PerfEvent ev;
  EXPECT_EQ(OpenHardwareCounter(caps, t, PERF_TYPE_HARDWARE,
                                PERF_COUNT_HW_INSTRUCTIONS, &ev, &d),
            -EOPNOTSUPP);
  EXPECT_NE(std::strstr(d.message, "not supported on this machine (no 'cpu' PMU in "
                                   "/sys/bus/event_source/devices)"),
            nullptr)
      << d.message;
  std::unique_ptr<PerfSampler> s;
  EXPECT_EQ(PerfSampler::OpenPebs(caps, t, PERF_TYPE_HARDWARE,
                                  PERF_COUNT_HW_CPU_CYCLES, 10007, 2, 8, &s, &d),
            -EOPNOTSUPP);
  EXPECT_NE(std::strstr(d.message, "PEBS not supported on this machine"), nullptr)
      << d.message;
  EXPECT_EQ(PerfSampler::OpenBts(caps, t, true, false, 8, &s, &d), -EOPNOTSUPP);
  EXPECT_NE(std::strstr(d.message, "BTS not supported on this machine"), nullptr)
      << d.message;
  EXPECT_EQ(s, nullptr);
  EXPECT_FALSE(ev.is_open());
}

TEST(PerfEvents, PassesKernelErrorsUpWithASentence) {
  ErrorDetail d;
  PerfEvent ev;
  // A reaped child's pid is free.
  Child child([] {});
  child.Release();
  child.Wait();
  int rc = OpenSoftwareCounter(PerfTarget::Task(child.pid()),
                               PERF_COUNT_SW_TASK_CLOCK, &ev, &d);
  if (NotPermitted(rc)) GTEST_SKIP() << d.message;
  EXPECT_EQ(rc, -ESRCH);
  EXPECT_NE(std::strstr(d.message, "no such task"), nullptr) << d.message;
  EXPECT_EQ(OpenSoftwareCounter(PerfTarget{}, PERF_COUNT_SW_TASK_CLOCK, &ev, &d),
            -EINVAL);
  EXPECT_EQ(OpenSoftwareCounter(PerfTarget::Task(getpid()), PERF_COUNT_SW_MAX,
                                &ev, &d),
            -EINVAL);
  uint64_t config;
  EXPECT_EQ(SoftwareEventByName("cycles", &config), -ENOENT);
  std::unique_ptr<PerfSampler> s;
  EXPECT_EQ(PerfSampler::OpenSwitchWatcher(PerfTarget::Task(getpid()), 3, &s, &d),
            -EINVAL);
  PerfCount c;
  EXPECT_EQ(ev.Read(&c, &d), -EBADF);
}

}  // namespace
}  // namespace pfm
