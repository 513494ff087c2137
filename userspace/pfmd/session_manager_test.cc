// The session manager without sockets: the simulated machine (paused, so
// nothing moves unless a test runs it) and typed requests from peers.
#include "userspace/pfmd/session_manager.h"

#include <linux/perf_event.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <fstream>

#include <gtest/gtest.h>
#include "absl/strings/str_cat.h"

#include "kernel/drivers/ptrace/tracer_process.h"
#include "tests/testing/harness.h"
#include "userspace/pfmd/session_test_util.h"

namespace pfm {
namespace {

using session_test::History;
using session_test::kAlice;
using session_test::kBob;
using session_test::kTask;
using session_test::Lossless;
using session_test::Root;
using session_test::SimSkylake;
using session_test::User;

PfmdConfig SimConfigWith(uint64_t limit_per_uid = 64ull << 20) {
  return session_test::SimConfig(limit_per_uid);
}

TypedSpec Watch(int32_t pid, uint64_t addr) {
  TypedSpec s;
  s.pid = pid;
  s.breakpoints.push_back(BreakpointSpec{addr, 8, "w"});
  return s;
}

// Every byte charged is a byte held, and the sessions' charges add up to it.
void ExpectChargesAddUp(SessionManager& m) {
  const SessionManager::MemoryTotals t = m.Memory();
  EXPECT_EQ(t.sessions, t.allocated);
  EXPECT_EQ(t.allocated, t.held);
}

TEST(SessionManager, CreateShowListKill) {
  SessionManager m(SimConfigWith(), SimSkylake());
  absl::StatusOr<SessionId> id = m.Create(User(kAlice), 1, History(kTask));
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<SessionInfo> s = m.Show(User(kAlice), *id);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->uid, kAlice);
  EXPECT_EQ(s->role, Role::kDebugger);
  EXPECT_EQ(s->bts, BtsMode::kHistory);
  EXPECT_EQ(s->target, "pid 1000");
  EXPECT_EQ(s->buffer_bytes, 2048u);
  EXPECT_TRUE(s->has_stream);
  EXPECT_EQ(s->state, TaskState::kRunning);
  EXPECT_EQ(m.List(User(kAlice), 0, 10).size(), 1u);
  EXPECT_TRUE(m.Kill(User(kAlice), *id).ok());
  EXPECT_EQ(m.Show(User(kAlice), *id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(m.Idle());
  EXPECT_EQ(m.Status().allocated, 0u);
}

TEST(SessionManager, OtherUidsSessionsAreInvisibleUnlessPrivileged) {
  SessionManager m(SimConfigWith(), SimSkylake());
  absl::StatusOr<SessionId> id = m.Create(User(kAlice), 1, History(kTask));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(m.Show(User(kBob), *id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m.Kill(User(kBob), *id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m.Ring(User(kBob), *id, false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(m.List(User(kBob), 0, 10).empty());
  EXPECT_EQ(m.List(Root(), 0, 10).size(), 1u);
  EXPECT_TRUE(m.Show(Root(), *id).ok());
}

TEST(SessionManager, KernelModeAndCpuWideNeedPrivilege) {
  SessionManager m(SimConfigWith(), SimSkylake());
  TypedSpec kernel = History(kTask);
  kernel.filter = TraceFilter::kAll;
  EXPECT_EQ(m.Create(User(kAlice), 1, kernel).status().code(),
            absl::StatusCode::kPermissionDenied);
  TypedSpec cpu = History(-1);
  cpu.cpu = 0;
  EXPECT_EQ(m.Create(User(kAlice), 1, cpu).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(m.Create(Root(), 1, cpu).ok());
  EXPECT_TRUE(m.Create(Root(), 1, kernel).ok());
}

TEST(SessionManager, ARefusalLeavesNothingBehind) {
  // Room for one 256 KiB ring and the task buffer, not for a second ring.
  SessionManager m(SimConfigWith(512 << 10), SimSkylake());
  ASSERT_TRUE(m.Create(User(kAlice), 1, Lossless(kTask, 256 << 10)).ok());
  const StatusInfo before = m.Status();
  absl::StatusOr<SessionId> big = m.Create(User(kAlice), 1, Lossless(kTask + 1, 256 << 10));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  const StatusInfo after = m.Status();
  EXPECT_EQ(after.sessions, before.sessions);
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_EQ(after.charged, before.charged);
  // A breakpoint the arbiter refuses (a fifth pinned one) undoes its charge.
  for (int i = 0; i < 4; ++i) {
    TypedSpec w = Watch(kTask, 0x600000 + 64 * i);
    w.pinned = true;
    ASSERT_TRUE(m.Create(User(kBob), 2, w).ok()) << i;
  }
  const StatusInfo four = m.Status();
  TypedSpec fifth = Watch(kTask, 0x700000);
  fifth.pinned = true;
  EXPECT_EQ(m.Create(User(kBob), 2, fifth).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(m.Status().allocated, four.allocated);
  EXPECT_EQ(m.Status().sessions, four.sessions);
}

// Every byte charged is a byte allocated: the sessions' charged_bytes add
// up to the accountant's total through joins, leaves and shared pools.
TEST(SessionManager, SessionChargesAddUpToWhatIsAllocated) {
  SessionManager m(SimConfigWith(), SimSkylake());
  ExpectChargesAddUp(m);
  absl::StatusOr<SessionId> a1 = m.Create(User(kAlice), 1, Lossless(kTask, 64 << 10));
  ExpectChargesAddUp(m);
  absl::StatusOr<SessionId> a2 = m.Create(User(kAlice), 1, History(kTask));
  absl::StatusOr<SessionId> b1 = m.Create(User(kBob), 2, Lossless(kTask, 128 << 10));
  absl::StatusOr<SessionId> w = m.Create(User(kBob), 2, Watch(kTask, 0x601000));
  TypedSpec cpu = History(-1);
  cpu.cpu = 1;
  absl::StatusOr<SessionId> c = m.Create(Root(), 3, cpu);
  ASSERT_TRUE(a1.ok() && a2.ok() && b1.ok() && w.ok() && c.ok());
  ExpectChargesAddUp(m);
  uint64_t sum = 0;
  for (const auto& [uid, bytes] : m.Status().charged) sum += bytes;
  EXPECT_EQ(sum, m.Status().allocated);
  ASSERT_TRUE(m.Kill(User(kAlice), *a1).ok());
  ExpectChargesAddUp(m);
  m.Disconnected(2);  // Bob's sessions were not detached
  ExpectChargesAddUp(m);
  EXPECT_EQ(m.List(Root(), 0, 10).size(), 2u);
}

TEST(SessionManager, PerUidSessionCapSparesPrivilegedClients) {
  PfmdConfig c = SimConfigWith();
  c.max_sessions_per_uid = 2;
  SessionManager m(c, SimSkylake());
  ASSERT_TRUE(m.Create(User(kAlice), 1, History(kTask)).ok());
  ASSERT_TRUE(m.Create(User(kAlice), 1, History(kTask + 1)).ok());
  absl::StatusOr<SessionId> third = m.Create(User(kAlice), 1, History(kTask + 2));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("--max-sessions-per-uid"), std::string::npos);
  EXPECT_TRUE(m.Create(User(kBob), 2, History(kTask)).ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(m.Create(Root(), 3, History(kTask)).ok());
}

// A task anyone may trace (the sim's) has 64 Debug Store consumer slots; one
// uid holds at most --max-consumers-per-uid (16) of them, so at least four
// uids can always attach. Sessions without a stream do not count, nor do
// consumers on other tasks; privileged clients are not capped.
TEST(SessionManager, PerUidConsumerCapOnATaskLeavesSlotsForOtherUids) {
  PfmdConfig c = SimConfigWith();
  ASSERT_EQ(c.max_consumers_per_uid, 16);
  SessionManager m(c, SimSkylake());
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(m.Create(User(kAlice), 1, History(kTask)).ok()) << i;
  const uint64_t allocated = m.Status().allocated;
  const size_t sessions = m.Status().sessions;
  absl::StatusOr<SessionId> over = m.Create(User(kAlice), 1, Lossless(kTask, 64 << 10));
  EXPECT_EQ(over.status(),
            absl::ResourceExhaustedError(
                "uid 1000 has 16 Debug Store consumers on pid 1000 (limit 16 per task, "
                "--max-consumers-per-uid)"));
  // Refused before anything was charged or attached.
  EXPECT_EQ(m.Status().allocated, allocated);
  EXPECT_EQ(m.Status().sessions, sessions);
  ExpectChargesAddUp(m);
  // Not a consumer (a breakpoint), or another task: not capped by it.
  EXPECT_TRUE(m.Create(User(kAlice), 1, Watch(kTask, 0x601000)).ok());
  EXPECT_TRUE(m.Create(User(kAlice), 1, History(kTask + 1)).ok());
  // Three more uids fill the task's 64 slots, 16 each; the fifth finds
  // it full (the core's refusal, naming holders).
  for (uid_t u : {kBob, uid_t{1002}, uid_t{1003}})
    for (int i = 0; i < 16; ++i)
      ASSERT_TRUE(m.Create(User(u), 2, History(kTask)).ok()) << u << " " << i;
  absl::StatusOr<SessionId> full = m.Create(User(1004), 3, History(kTask));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  EXPECT_NE(full.status().message().find("already has 64 consumers"), std::string::npos)
      << full.status();
  // One of Alice's ends: she may attach again, up to her 16.
  std::vector<SessionInfo> mine = m.List(User(kAlice), 0, 100);
  ASSERT_FALSE(mine.empty());
  ASSERT_TRUE(m.Kill(User(kAlice), mine.front().id).ok());
  EXPECT_TRUE(m.Create(User(kAlice), 1, History(kTask)).ok());
  ExpectChargesAddUp(m);
}

TEST(SessionManager, PrivilegedClientsAreNotCappedPerTaskConsumers) {
  PfmdConfig c = SimConfigWith();
  c.max_consumers_per_uid = 2;
  SessionManager m(c, SimSkylake());
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(m.Create(Root(), 3, History(kTask)).ok()) << i;
  EXPECT_TRUE(m.Create(User(kAlice), 1, History(kTask)).ok());
  EXPECT_TRUE(m.Create(User(kAlice), 1, History(kTask)).ok());
  EXPECT_EQ(m.Create(User(kAlice), 1, History(kTask)).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(SessionManager, ListPagesInIdOrder) {
  SessionManager m(SimConfigWith(), SimSkylake());
  std::vector<SessionId> ids;
  for (int i = 0; i < 7; ++i) {
    absl::StatusOr<SessionId> id = m.Create(User(kAlice), 1, Watch(kTask, 0x601000 + 8 * i));
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  std::vector<SessionId> seen;
  SessionId after = 0;
  for (;;) {
    std::vector<SessionInfo> page = m.List(User(kAlice), after, 3);
    for (const SessionInfo& s : page) seen.push_back(s.id);
    if (page.size() < 3) break;
    after = page.back().id;
  }
  EXPECT_EQ(seen, ids);
}

TEST(SessionManager, SimCommandIsTheOwnersAndBounded) {
  SessionManager m(SimConfigWith(), SimSkylake());
  Peer other = User(::geteuid() == 0 ? kAlice : ::geteuid() + 1);
  EXPECT_EQ(m.Sim(other, {SimRequest::Action::kRun, -1, 1000}).status().code(),
            absl::StatusCode::kPermissionDenied);
  Peer owner = User(::geteuid());
  EXPECT_EQ(m.Sim(owner, {SimRequest::Action::kRun, -1, 3600'000'000'000ull}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<SimReport> r = m.Sim(owner, {SimRequest::Action::kRun, -1, 1'000'000});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->now, 1'000'000u);
}

TEST(SessionManager, ATaskThatExitsShowsExited) {
  SessionManager m(SimConfigWith(), SimSkylake());
  absl::StatusOr<SessionId> id = m.Create(User(kAlice), 1, History(kTask));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(m.Sim(Root(), {SimRequest::Action::kExit, kTask, 0}).ok());
  absl::StatusOr<SessionInfo> s = m.Show(User(kAlice), *id);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->state, TaskState::kExited);
  // A session on a task that does not exist is refused.
  EXPECT_EQ(m.Create(User(kAlice), 1, History(kTask)).status().code(),
            absl::StatusCode::kNotFound);
}

// The host driver's tests: a machine as HostMachine finds this VM (no
// PMU, kernel software events), and why perf's task-clock cannot be
// counted here ("" when it can).
MachineInfo HostWithoutPmu(bool soft_bts = false) {
  MachineInfo m;
  m.cpus = 2;
  m.pmu = "none";
  m.debug_registers = 4;
  m.software_events = true;
  m.soft_bts = soft_bts;  // ptrace, as HostMachine finds it
  return m;
}

PfmdConfig HostConfig() {
  PfmdConfig c;
  c.driver = "host";
  return c;
}

std::string NoTaskClock() {
  perf_event_attr a{};
  a.size = sizeof(a);
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.exclude_kernel = 1;
  const int fd = static_cast<int>(::syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
  if (fd < 0) return std::string("perf_event_open(task-clock): ") + std::strerror(errno);
  ::close(fd);
  return "";
}

void KillAndReap(pid_t pid) {
  if (pid <= 0) return;  // a failed fork: never kill(-1)
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// Kills and reaps child `pid`, then forks a paused process at the same pid
// (ns_last_pid; root): its pid, or what ForkPausedAt got instead.
pid_t Recycle(pid_t pid) {
  KillAndReap(pid);
  return testing::ForkPausedAt(pid, 50);
}

// A refused creation left no session and no charge.
void ExpectNothingLeft(SessionManager& mgr) {
  EXPECT_TRUE(mgr.List(Root(), 0, 100).empty());
  const SessionManager::MemoryTotals t = mgr.Memory();
  EXPECT_EQ(t.allocated, 0u);
  EXPECT_EQ(t.held, 0u);
}

// A child that waits in pause() until killed.
pid_t ForkPaused() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  return pid;
}

// The host driver: a pid recycled between the target's check and the
// perf_event_open by number never gets the session (or its events); the
// new process at that pid is another process. The hook kills and reaps
// the checked child and forks a new one at its pid (ns_last_pid, root).
TEST(SessionManagerHost, ARecycledPidBetweenCheckAndUseIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (ns_last_pid)";
  if (const std::string why = NoTaskClock(); !why.empty()) GTEST_SKIP() << why;
  const pid_t first = ForkPaused();
  ASSERT_GT(first, 0);
  pid_t reused = -1;
  SessionManagerDeps deps;
  deps.after_target_checked = [&](int32_t pid) {
    ASSERT_EQ(pid, first);
    reused = Recycle(first);
  };
  SessionManager mgr(HostConfig(), HostWithoutPmu(), std::move(deps));
  TypedSpec spec;
  spec.pid = first;
  spec.counters = {"task-clock"};
  absl::StatusOr<SessionId> id = mgr.Create(Root(), 1, spec);
  if (reused > 0) KillAndReap(reused);
  if (reused != first) GTEST_SKIP() << "pid " << first << " was not reused";
  ASSERT_FALSE(id.ok()) << "a session on the process now at pid " << first;
  EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound) << id.status();
  EXPECT_NE(id.status().message().find("exited while its session was set up"),
            absl::string_view::npos)
      << id.status();
  ExpectNothingLeft(mgr);
}

// The same for a --tid session: a thread's id is free as soon as the thread
// exits (its process lives on), so a new process can take the number
// between the check that the thread belongs to the process and the
// perf_event_open by number. The hook ends the thread and forks a new
// process at its id.
TEST(SessionManagerHost, ARecycledTidBetweenCheckAndUseIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (ns_last_pid)";
  if (const std::string why = NoTaskClock(); !why.empty()) GTEST_SKIP() << why;
  // A process with a second thread, which reports its tid and returns
  // when `release` is written.
  int report[2], release[2];
  ASSERT_EQ(::pipe(report), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t first = ::fork();
  if (first == 0) {
    pthread_t t;
    static int fds[2];
    fds[0] = report[1];
    fds[1] = release[0];
    ::pthread_create(
        &t, nullptr,
        [](void*) -> void* {
          const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
          (void)!::write(fds[0], &tid, sizeof tid);
          char b;
          (void)!::read(fds[1], &b, 1);
          return nullptr;
        },
        nullptr);
    ::pthread_join(t, nullptr);
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(first, 0);
  ::close(report[1]);
  ::close(release[0]);
  pid_t tid = 0;
  ASSERT_EQ(::read(report[0], &tid, sizeof tid), static_cast<ssize_t>(sizeof tid));
  ::close(report[0]);
  ASSERT_NE(tid, first);
  const std::string task_dir = absl::StrCat("/proc/", first, "/task/", tid);
  pid_t reused = -1;
  bool thread_ended = false;
  SessionManagerDeps deps;
  deps.after_target_checked = [&](int32_t pid) {
    ASSERT_EQ(pid, first);
    (void)!::write(release[1], "x", 1);
    for (int i = 0; i < 2000 && !thread_ended; ++i) {
      thread_ended = ::access(task_dir.c_str(), F_OK) != 0;
      if (!thread_ended) ::usleep(1000);
    }
    if (thread_ended) reused = testing::ForkPausedAt(tid, 50);
  };
  SessionManager mgr(HostConfig(), HostWithoutPmu(), std::move(deps));
  TypedSpec spec;
  spec.pid = first;
  spec.tid = tid;
  spec.counters = {"task-clock"};
  absl::StatusOr<SessionId> id = mgr.Create(Root(), 1, spec);
  if (reused > 0) KillAndReap(reused);
  KillAndReap(first);
  ::close(release[1]);
  ASSERT_TRUE(thread_ended) << task_dir << " is still there";
  if (reused != tid) GTEST_SKIP() << "tid " << tid << " was not reused";
  ASSERT_FALSE(id.ok()) << "a session on the process now at " << tid;
  EXPECT_EQ(id.status(),
            absl::NotFoundError(absl::StrCat("thread ", tid, " of process ", first,
                                             " exited while its session was set up "
                                             "(nothing was attached)")));
  ExpectNothingLeft(mgr);
}

// The soft-BTS tracer seizes the pid by number after the first re-check:
// a pid recycled just before it starts is seized, found to be another
// process (the session's pidfd is dead), and let go. The new process is
// left running and untraced; nothing of the session stays.
TEST(SessionManagerHost, ARecycledPidBeforeTheTracerStartsIsRefusedAndLetGo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (ns_last_pid)";
  const pid_t first = ForkPaused();
  ASSERT_GT(first, 0);
  pid_t reused = -1;
  SessionManagerDeps deps;
  deps.before_tracer_start = [&](int32_t pid) {
    ASSERT_EQ(pid, first);
    reused = Recycle(first);
  };
  absl::StatusOr<SessionId> id;
  std::string reused_status;
  {
    SessionManager mgr(HostConfig(), HostWithoutPmu(/*soft_bts=*/true), std::move(deps));
    TypedSpec spec;
    spec.pid = first;
    spec.bts = BtsMode::kLossless;
    spec.buffer_bytes = 1 << 20;
    id = mgr.Create(Root(), 1, spec);
    ExpectNothingLeft(mgr);
    if (reused > 0) {
      std::ifstream in(absl::StrCat("/proc/", reused, "/status"));
      std::stringstream ss;
      ss << in.rdbuf();
      reused_status = ss.str();
    }
  }
  if (reused > 0) KillAndReap(reused);
  ASSERT_NE(reused, -1) << "the tracer was never started: " << id.status();
  if (reused != first) GTEST_SKIP() << "pid " << first << " was not reused";
  ASSERT_FALSE(id.ok()) << "a soft-BTS session on the process now at pid " << first;
  EXPECT_EQ(id.status(),
            absl::NotFoundError(absl::StrCat("process ", first,
                                             " exited while its session was set up "
                                             "(nothing was attached)")));
  // Let go: not traced, and not left stopped (S, sleeping in pause, or R
  // on its way there just after the detach; never t or T).
  EXPECT_NE(reused_status.find("\nTracerPid:\t0\n"), std::string::npos) << reused_status;
  const size_t state = reused_status.find("\nState:\t");
  ASSERT_NE(state, std::string::npos) << reused_status;
  EXPECT_NE(std::string("SR").find(reused_status[state + 8]), std::string::npos)
      << reused_status;
}

// Until session `id` shows its process exited (5 s at most).
bool WaitExited(SessionManager& mgr, SessionId id) {
  for (int i = 0; i < 500; ++i) {
    absl::StatusOr<SessionInfo> info = mgr.Show(Root(), id);
    if (info.ok() && info->state == TaskState::kExited) return true;
    ::usleep(10000);
  }
  return false;
}

// An inherited trace goes on under its first process's pid after that
// process exits, while its children live (their context and tracer are
// the pid's). A new process at that pid is another process: a stream
// session on it is refused (before, it joined that context and shared
// that tracer: the first process's children's records, whoever's they
// were). Counters on it, which go by its pidfd-checked pid, are served.
TEST(SessionManagerHost, ANewProcessAtTheRootPidOfALiveInheritedTraceIsKeptOut) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (ns_last_pid)";
  int go[2], report[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(report), 0);
  const pid_t first = ::fork();
  ASSERT_GE(first, 0);
  if (first == 0) {
    ::close(go[1]);
    ::close(report[0]);
    char b;
    if (::read(go[0], &b, 1) != 1) ::_exit(2);
    const pid_t child = ::fork();  // followed: the trace inherits
    if (child == 0) {
      ::pause();
      ::_exit(0);
    }
    (void)!::write(report[1], &child, sizeof child);
    ::_exit(0);
  }
  ::close(go[0]);
  ::close(report[1]);
  SessionManager mgr(HostConfig(), HostWithoutPmu(/*soft_bts=*/true));
  TypedSpec spec;
  spec.pid = first;
  spec.bts = BtsMode::kLossless;
  spec.buffer_bytes = 1 << 20;
  spec.inherit = true;
  absl::StatusOr<SessionId> traced = mgr.Create(Root(), 1, spec);
  ASSERT_TRUE(traced.ok()) << traced.status();
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  pid_t child = 0;
  ASSERT_EQ(::read(report[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
  ::close(go[1]);
  ::close(report[0]);
  int st = 0;
  ASSERT_EQ(::waitpid(first, &st, 0), first);
  // The first process's end reached the session (after its child's fork,
  // in the tracer's order); the child is still traced.
  const bool ended = WaitExited(mgr, *traced);
  const pid_t reused = testing::ForkPausedAt(first, 50);
  absl::StatusOr<SessionId> stream = mgr.Create(Root(), 2, spec);
  TypedSpec counters;
  counters.pid = first;
  counters.counters = {"task-clock"};
  absl::StatusOr<SessionId> counted = NoTaskClock().empty()
                                          ? mgr.Create(Root(), 2, counters)
                                          : absl::StatusOr<SessionId>(SessionId{0});
  KillAndReap(reused);
  ::kill(child, SIGKILL);  // not ours: reparented when `first` exited
  ASSERT_TRUE(ended) << "the session never saw pid " << first << " exit";
  if (reused != first) GTEST_SKIP() << "pid " << first << " was not reused";
  EXPECT_EQ(stream.status(),
            absl::UnavailableError(absl::StrCat(
                "pid ", first, " is a new process: the trace of the process that had "
                "that pid has not ended (session ", *traced,
                ": its tracer, or children it follows, still run); try again when it has")));
  EXPECT_TRUE(counted.ok()) << counted.status();
}

// A session keeps the tracer of its own process. Its process exits (the
// session stays, with that tracer's stats and maps); a new process takes the
// pid and gets a tracer of its own from another session. The first session's
// run control is refused (its process is gone), not a channel to the new
// process's tracer, and its stats are its own tracer's.
TEST(SessionManagerHost, AnExitedSessionNeverReachesTheTracerOfANewProcessAtItsPid) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (ns_last_pid)";
  const pid_t first = ForkPaused();
  ASSERT_GT(first, 0);
  SessionManager mgr(HostConfig(), HostWithoutPmu(/*soft_bts=*/true));
  TypedSpec debugger;
  debugger.role = Role::kDebugger;
  debugger.pid = first;
  debugger.debug = true;
  absl::StatusOr<SessionId> old = mgr.Create(Root(), 1, debugger);
  ASSERT_TRUE(old.ok()) << old.status();
  KillAndReap(first);
  const bool ended = WaitExited(mgr, *old);
  mgr.ReapTracers();  // as after any request: the exited process's tracer stops
  const pid_t reused = testing::ForkPausedAt(first, 50);
  TypedSpec profiler;
  profiler.pid = first;
  profiler.bts = BtsMode::kLossless;
  profiler.buffer_bytes = 1 << 20;
  // UNAVAILABLE until the old tracer has seen its process go (a moment).
  absl::StatusOr<SessionId> fresh = mgr.Create(Root(), 2, profiler);
  for (int i = 0; i < 500 && absl::IsUnavailable(fresh.status()); ++i) {
    ::usleep(10000);
    fresh = mgr.Create(Root(), 2, profiler);
  }
  absl::StatusOr<UniqueFd> channel = mgr.Debug(Root(), *old);
  absl::StatusOr<SessionInfo> old_info = mgr.Show(Root(), *old);
  absl::StatusOr<SessionInfo> new_info = mgr.Show(Root(), fresh.ok() ? *fresh : 0);
  KillAndReap(reused);
  ASSERT_TRUE(ended) << "the session never saw pid " << first << " exit";
  if (reused != first) GTEST_SKIP() << "pid " << first << " was not reused";
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(channel.status(),
            absl::FailedPreconditionError(absl::StrCat(
                "pid ", first, " is no longer traced (it exited)")));
  ASSERT_TRUE(old_info.ok() && new_info.ok());
  EXPECT_EQ(old_info->state, TaskState::kExited);
  EXPECT_EQ(new_info->state, TaskState::kRunning);
}

// Every debug channel pfmd passes the tracer ends with a kDebugEnded, the
// ones the helper refuses too: here the second session's, opened while the
// helper still serves the channel of the first, which pfmd has just ended
// (session killed: kDebugClose, asynchronous). Either way (refused, or
// served if the helper was quick), once its client end is closed the
// second session can open a channel again; before, a refused channel was
// never counted as ended and the slot stayed taken for the tracer's life.
TEST(SessionManagerHost, ADebugChannelTheTracerRefusedEndsToo) {
  const pid_t target = ForkPaused();
  ASSERT_GT(target, 0);
  SessionManager mgr(HostConfig(), HostWithoutPmu(/*soft_bts=*/true));
  TypedSpec debugger;
  debugger.role = Role::kDebugger;
  debugger.pid = target;
  debugger.debug = true;
  debugger.detached = true;
  absl::StatusOr<SessionId> a = mgr.Create(Root(), 1, debugger);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<SessionId> b = mgr.Create(Root(), 1, debugger);
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<UniqueFd> first = mgr.Debug(Root(), *a);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(mgr.Kill(Root(), *a).ok());
  absl::StatusOr<UniqueFd> second = mgr.Debug(Root(), *b);
  ASSERT_TRUE(second.ok()) << second.status();
  pollfd p{second->get(), POLLIN, 0};
  const bool refused = ::poll(&p, 1, 1000) == 1 && (p.revents & (POLLHUP | POLLIN));
  std::printf("the second channel was %s\n", refused ? "refused" : "served");
  second->reset();
  absl::StatusOr<UniqueFd> again = absl::UnavailableError("not tried");
  for (int i = 0; i < 200 && !again.ok(); ++i) {
    mgr.ReapTracers();  // as after any request
    again = mgr.Debug(Root(), *b);
    if (!again.ok()) ::usleep(10000);
  }
  EXPECT_TRUE(again.ok()) << again.status();
  first->reset();
  again->reset();
  EXPECT_TRUE(mgr.Kill(Root(), *b).ok());
  KillAndReap(target);
}

}  // namespace
}  // namespace pfm

// The soft-BTS tracer is this binary run again with kTracerHelperFlag
// (TracerProcess::Start execs /proc/self/exe), as pfmd's main does.
int main(int argc, char** argv) {
  if (int rc = pfm::MaybeRunTracerHelper(argc, argv); rc >= 0) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
