// End to end, issue 14: Debian's real GDB (/usr/bin/gdb, batch mode)
// debugging through `pfmctl gdbserver` against the real pfmd (host driver):
// run control on a launched and an attached program, PIE and not, `record
// btrace bts` served from a pfm history session, a profiler streaming the
// same process losslessly meanwhile, GDB dying, and garbage on the wire.
// Every assertion is on GDB's own output or on what pfmd reports.
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing/e2e.h"

namespace pfm {
namespace {

using testing::Contains;
using testing::PfmctlJson;

constexpr char kGdb[] = "/usr/bin/gdb";

std::string RealPath(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) != nullptr ? buf : p;
}

std::string Prog() { return RealPath(testing::Runfile("tests/gdb_prog")); }
std::string PieProg() { return RealPath(testing::Runfile("tests/gdb_prog_pie")); }
std::string ThreadsProg() { return RealPath(testing::Runfile("tests/gdb_threads")); }

// The TracerPid of a live process (-1 when it is gone).
int TracerOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("TracerPid:", 0) == 0) return std::atoi(line.c_str() + 10);
  return -1;
}

bool Alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')');
  return !stat.empty() && paren != std::string::npos && stat[paren + 2] != 'Z';
}

// Waits up to `ms` for `cond`.
template <typename F>
bool WaitFor(F cond, int ms) {
  for (int i = 0; i < ms / 10; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

using Branches = std::vector<std::pair<uint64_t, uint64_t>>;

// The branches in GDB's `record instruction-history /r` listing: each pair
// of consecutive instructions where the second does not follow the first
// ("N\t   0xADDR <sym+off>:\tBYTES\tinsn", "=>" for the current PC; the
// bytes give the length).
Branches GdbBranches(const std::string& out) {
  Branches b;
  uint64_t prev = 0, prev_len = 0;
  size_t at = 0;
  while (at < out.size()) {
    const size_t nl = std::min(out.find('\n', at), out.size());
    const std::string line = out.substr(at, nl - at);
    at = nl + 1;
    // "   0x..." or "=> 0x..." (the instruction at the current PC).
    const size_t tab = line.find('\t');
    const size_t x = tab == std::string::npos ? tab : line.find("0x", tab);
    const size_t t1 = line.find(">:\t");
    if (x == std::string::npos || t1 == std::string::npos || x > tab + 4) continue;
    const uint64_t addr = std::stoull(line.substr(x), nullptr, 16);
    const size_t t2 = line.find('\t', t1 + 3);
    if (t2 == std::string::npos) continue;
    uint64_t len = 0;
    for (char c : line.substr(t1 + 3, t2 - t1 - 3))
      if (c == ' ') continue; else ++len;
    len /= 2;
    if (prev != 0 && addr != prev + prev_len) b.push_back({prev, addr});
    prev = addr;
    prev_len = len;
  }
  return b;
}

// The branches of `pfmctl script` ("branch: FROM sym => TO sym").
Branches ScriptBranches(const std::string& out) {
  Branches b;
  size_t at = 0;
  while ((at = out.find("branch: ", at)) != std::string::npos) {
    at += 8;
    const uint64_t from = std::stoull(out.substr(at), nullptr, 16);
    const size_t arrow = out.find("=> ", at);
    if (arrow == std::string::npos) break;
    b.push_back({from, std::stoull(out.substr(arrow + 3), nullptr, 16)});
    at = arrow;
  }
  return b;
}

bool IsRunOf(const Branches& part, const Branches& whole) {
  if (part.empty()) return false;
  for (size_t i = 0; i + part.size() <= whole.size(); ++i)
    if (std::equal(part.begin(), part.end(), whole.begin() + i)) return true;
  return false;
}

class GdbE2e : public testing::DaemonTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: ptrace of any process";
    if (access(kGdb, X_OK) != 0) GTEST_FAIL() << kGdb << " missing: tools/install_deps.sh installs gdb";
    ASSERT_NO_FATAL_FAILURE(StartDaemon({"--driver", "host"}));
    dir_ = testing::MakeTempDir("gdb");
  }
  void TearDown() override {
    for (pid_t p : children_) {
      if (p <= 0) continue;  // a failed fork: never kill(-1)
      ::kill(p, SIGKILL);
      int st;
      ::waitpid(p, &st, 0);
    }
  }
  size_t Sessions() {
    return PfmctlJson(socket(), {"--json", "session", "list"}).as_array().size();
  }
  // `target remote | pfmctl gdbserver ARGS`.
  std::string Target(const std::string& args) {
    return "target remote | " + testing::PfmctlPath() + " --socket " + socket() +
           " gdbserver " + args;
  }
  std::string Script(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << "set pagination off\nset confirm off\n" << text;
    return path;
  }
  testing::Result Gdb(const std::string& prog, const std::string& target,
                      const std::string& script, int timeout_s = 120) {
    return testing::Run({kGdb, "-batch", "-nx", "-ex", target, "-x", script, prog}, {},
                        timeout_s);
  }
  // GDB on Prog() in the background, in a process group of its own (kill
  // it and its pfmctl with kill(-pid)), its output going to `out`.
  pid_t GdbInBackground(const std::string& target, const std::string& script,
                        const std::string& out) {
    const std::string prog = Prog();
    const pid_t gdb = ::fork();
    if (gdb == 0) {
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setpgid(0, 0);
      ::execl(kGdb, kGdb, "-batch", "-nx", "-ex", target.c_str(), "-x", script.c_str(),
              prog.c_str(), nullptr);
      _exit(127);
    }
    return gdb;
  }
  // The program looping (an argument), for attaching; its pid.
  pid_t StartLooping(const std::string& prog) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(p[1], 1);
      ::close(p[0]);
      ::execl(prog.c_str(), prog.c_str(), "loop", nullptr);
      _exit(127);
    }
    ::close(p[1]);
    char buf[64] = {};
    (void)!::read(p[0], buf, sizeof(buf) - 1);  // "ready PID": it runs
    ::close(p[0]);
    children_.push_back(pid);
    return pid;
  }
  std::string dir_;
  std::vector<pid_t> children_;
};

// Launch, non-PIE: breakpoints, registers, disassembly, stepping, the
// stack, finish, and kill; nothing is left behind.
TEST_F(GdbE2e, RunControlOnALaunchedProgram) {
  const std::string script = Script("run.gdb", R"(break top
continue
info registers rip
x/4i $pc
stepi
bt
break leaf
continue
finish
next
kill
)");
  const testing::Result r = Gdb(Prog(), Target("-- " + Prog()), script);
  const std::string& o = r.out;
  EXPECT_TRUE(Contains(o, "Breakpoint 1, top (x=0)")) << o << r.err;
  EXPECT_TRUE(Contains(o, "rip            0x")) << o;
  EXPECT_TRUE(Contains(o, "<top+")) << o;
  EXPECT_TRUE(Contains(o, "=> 0x")) << o;
  EXPECT_TRUE(Contains(o, "call   0x")) << o;  // x/4i shows the call of middle
  EXPECT_TRUE(Contains(o, "#1  0x")) << o;
  EXPECT_TRUE(Contains(o, "in main (argc=1")) << o;
  EXPECT_TRUE(Contains(o, "Breakpoint 2, leaf (x=0)")) << o;
  // leaf's caller: middle, or top when the attach stopped the last of
  // middle's calls.
  EXPECT_TRUE(Contains(o, "in middle (x=0)") || Contains(o, "in top (x=0)")) << o;  // finish's frame
  EXPECT_TRUE(Contains(o, "Value returned is $1 = 1")) << o;
  EXPECT_TRUE(Contains(o, "[Inferior 1 (Remote target) killed]")) << o;
  EXPECT_TRUE(WaitFor([&] { return Sessions() == 0; }, 3000));
}

// Launch, PIE: GDB relocates its breakpoints from the auxv (qXfer:auxv).
TEST_F(GdbE2e, PieBreakpointsAndFinish) {
  const std::string script = Script("pie.gdb", R"(break middle
continue
bt
finish
kill
)");
  const testing::Result r = Gdb(PieProg(), Target("-- " + PieProg()), script);
  const std::string& o = r.out;
  EXPECT_TRUE(Contains(o, "Breakpoint 1, middle (x=0)")) << o << r.err;
  EXPECT_TRUE(Contains(o, "in top (x=0)")) << o;
  EXPECT_TRUE(Contains(o, "Value returned is $1 = 12")) << o;
  EXPECT_TRUE(Contains(o, "[Inferior 1 (Remote target) killed]")) << o;
}

// record btrace bts: the history comes from a pfm history session; GDB
// reconstructs the exact call nesting of `next` over top's line.
TEST_F(GdbE2e, BranchHistoryShowsTheExactNesting) {
  const std::string script = Script("btrace.gdb", R"(break top
continue
record btrace bts
info record
next
info record
record function-call-history /ilc
record instruction-history
reverse-stepi
record goto begin
info record
record stop
kill
)");
  const testing::Result r = Gdb(PieProg(), Target("-- " + PieProg()), script);
  const std::string& o = r.out;
  EXPECT_TRUE(Contains(o, "Recording format: Branch Trace Store.")) << o << r.err;
  EXPECT_TRUE(Contains(o, "Buffer size: 64kB.")) << o;
  EXPECT_TRUE(Contains(o, "Recorded 90 instructions in 11 functions (0 gaps)")) << o;
  // top -> middle -> leaf (x3, back in middle between), top -> leaf -> top.
  const char* nesting[] = {"1\ttop\tinst 1,3",      "2\t  middle\tinst 4,17",
                           "3\t    leaf\tinst 18,27", "4\t  middle\tinst 28,36",
                           "5\t    leaf\tinst 37,46", "6\t  middle\tinst 47,55",
                           "7\t    leaf\tinst 56,65", "8\t  middle\tinst 66,72",
                           "9\ttop\tinst 73,76",      "10\t  leaf\tinst 77,86",
                           "11\ttop\tinst 87,90"};
  for (const char* line : nesting) EXPECT_TRUE(Contains(o, line)) << line << "\n" << o;
  EXPECT_TRUE(Contains(o, "<leaf+")) << o;  // instruction-history
  EXPECT_TRUE(Contains(o, "Replay in progress.  At instruction 1.")) << o;
  EXPECT_TRUE(Contains(o, "Process record is stopped")) << o;
  EXPECT_TRUE(WaitFor([&] { return Sessions() == 0; }, 3000));
}

// Attach: qAttached says so, detach lets the program run on untraced.
TEST_F(GdbE2e, AttachAndDetachLeavesTheProgramRunning) {
  const pid_t pid = StartLooping(Prog());
  const std::string script = Script("attach.gdb", R"(break leaf
continue
bt
info threads
detach
)");
  const testing::Result r = Gdb(Prog(), Target("--pid " + std::to_string(pid)), script);
  const std::string& o = r.out;
  // Attaching stops the loop anywhere: the first leaf hit may be any x.
  EXPECT_TRUE(Contains(o, "Breakpoint 1, leaf (x=")) << o << r.err;
  // leaf's caller: middle, or top when the attach stopped the last of
  // middle's calls.
  EXPECT_TRUE(Contains(o, "in middle (x=0)") || Contains(o, "in top (x=0)")) << o;
  EXPECT_TRUE(Contains(o, "Thread " + std::to_string(pid))) << o;
  EXPECT_TRUE(Contains(o, "[Inferior 1 (Remote target) detached]")) << o;
  EXPECT_TRUE(WaitFor([&] { return Sessions() == 0 && TracerOf(pid) == 0; }, 5000));
  EXPECT_TRUE(Alive(pid));
  // It runs: its CPU time grows.
  auto utime = [&] {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    std::getline(in, s);
    return s;
  };
  const std::string before = utime();
  EXPECT_TRUE(WaitFor([&] { return utime() != before; }, 3000));
}

// GDB killed mid-session: a launched program dies with it, an attached one
// runs on; the sessions are gone either way.
TEST_F(GdbE2e, GdbKilledMidSession) {
  for (const bool attach : {false, true}) {
    SCOPED_TRACE(attach ? "attach" : "launch");
    const pid_t looping = attach ? StartLooping(Prog()) : 0;
    const std::string out = dir_ + (attach ? "/killed_attach.out" : "/killed_launch.out");
    const std::string script = Script("kill.gdb", "break leaf\ncontinue\nshell sleep 120\n");
    const std::string target =
        Target(attach ? "--pid " + std::to_string(looping) : "-- " + Prog() + " loop");
    const pid_t gdb = GdbInBackground(target, script, out);
    ASSERT_TRUE(WaitFor([&] { return Contains(testing::ReadFile(out), "Breakpoint 1, leaf"); },
                        60000))
        << testing::ReadFile(out);
    // The debugged process: the one pfm's tracer holds.
    pid_t target_pid = looping;
    if (!attach) {
      const std::string list = testing::Pfmctl(socket(), {"session", "list"}).out;
      const size_t at = list.find("pid ");
      ASSERT_NE(at, std::string::npos) << list;
      target_pid = std::atoi(list.c_str() + at + 4);
    }
    ASSERT_GT(TracerOf(target_pid), 0);
    ::kill(-gdb, SIGKILL);  // gdb and its pfmctl (one process group)
    int st;
    ::waitpid(gdb, &st, 0);
    EXPECT_TRUE(WaitFor([&] { return Sessions() == 0; }, 5000));
    if (attach) {
      EXPECT_TRUE(WaitFor([&] { return TracerOf(target_pid) == 0; }, 5000));
      EXPECT_TRUE(Alive(target_pid));
    } else {
      EXPECT_TRUE(WaitFor([&] { return !Alive(target_pid); }, 5000));
    }
    const boost::json::value status = PfmctlJson(socket(), {"--json", "status"});
    EXPECT_EQ(testing::Num(status.at("memory").at("allocated")), 0u) << boost::json::serialize(status);
  }
}

// A profiler streams the process losslessly through the whole GDB session
// (stops, steps, breakpoints, btrace): it loses nothing, and the time GDB
// held the process stopped shows in its stream as switches out and in.
TEST_F(GdbE2e, ProfilerStreamsLosslesslyBesideGdb) {
  const pid_t pid = StartLooping(Prog());
  const std::string trace = dir_ + "/profiler.trace";
  // `record -p` until ^C (SIGINT), in the background.
  const pid_t rec = ::fork();
  if (rec == 0) {
    const int fd = ::open((dir_ + "/record.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const std::string p = testing::PfmctlPath();
    ::execl(p.c_str(), p.c_str(), "--socket", socket().c_str(), "record", "--bts", "lossless",
            "-o", trace.c_str(), "-p", std::to_string(pid).c_str(), nullptr);
    _exit(127);
  }
  ASSERT_TRUE(WaitFor([&] { return Sessions() == 1; }, 10000));
  // Stopped at middle's first line whatever the attach interrupted, so
  // the recorded span is the same every run.
  const std::string script = Script("prof.gdb", R"(break middle
continue
delete
record btrace bts
next
next
stepi
finish
info record
record instruction-history /r 1,5000
record stop
detach
)");
  const testing::Result r = Gdb(Prog(), Target("--pid " + std::to_string(pid)), script);
  EXPECT_TRUE(Contains(r.out, "Breakpoint 1, middle (x=0)")) << r.out << r.err;
  EXPECT_TRUE(Contains(r.out, "Value returned is $1 = 12")) << r.out;
  EXPECT_TRUE(Contains(r.out, "Recorded ")) << r.out;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(rec, SIGINT);
  int st;
  ::waitpid(rec, &st, 0);
  // Its file finished, record dies of the ^C, as perf record does.
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT)
      << st << " " << testing::ReadFile(dir_ + "/record.out");
  const boost::json::value rep =
      PfmctlJson(socket(), {"--json", "report", trace, "--limit", "0"});
  const boost::json::value& sum = rep.at("summary");
  EXPECT_EQ(testing::Num(sum.at("lost")), 0u) << boost::json::serialize(rep);
  EXPECT_GT(testing::Num(sum.at("branches")), 0u) << boost::json::serialize(rep);
  // GDB's stops (breakpoints, steps, finish) are switches of the task.
  EXPECT_GE(testing::Num(sum.at("by_type").at("switch_out")), 5u) << boost::json::serialize(rep);
  // Every branch GDB's history shows is in the profiler's stream, in the
  // same order with nothing between (the history's first branch, whose
  // source the listing does not show, aside).
  const Branches gdb = GdbBranches(r.out);
  EXPECT_GE(gdb.size(), 8u) << r.out;  // three calls of leaf and their returns, the loop
  const Branches prof = ScriptBranches(testing::Pfmctl(socket(), {"script", trace}).out);
  EXPECT_TRUE(IsRunOf(gdb, prof)) << gdb.size() << " GDB branches, " << prof.size()
                                  << " profiler branches\n" << r.out;
  EXPECT_TRUE(WaitFor([&] { return Sessions() == 0 && TracerOf(pid) == 0; }, 5000));
}

// Hardware breakpoints and watchpoints (Z1, Z2, Z4) in debug registers:
// `hbreak` stops before the instruction runs, `watch` reports the write
// with the old and new values, and `rwatch` (which GDB cannot emulate in
// software) reports the read, through an access watchpoint since x86
// cannot watch reads alone.
TEST_F(GdbE2e, HardwareBreakpointsAndWatchpoints) {
  const std::string script = Script("hw.gdb", R"(hbreak leaf
continue
info registers rip
delete
watch sink
continue
delete
rwatch sink
continue
delete
continue
)");
  const testing::Result r = Gdb(Prog(), Target("-- " + Prog()), script);
  const std::string& o = r.out;
  EXPECT_TRUE(Contains(o, "Hardware assisted breakpoint 1 at ")) << o << r.err;
  EXPECT_TRUE(Contains(o, "Breakpoint 1, leaf (x=0)")) << o;
  EXPECT_TRUE(Contains(o, "<leaf+")) << o;  // rip inside leaf, past its prologue
  EXPECT_TRUE(Contains(o, "Hardware watchpoint 2: sink\n\nOld value = 0\nNew value = 13")) << o;
  EXPECT_TRUE(Contains(o, "Hardware read watchpoint 3: sink\n\nValue = 13")) << o;
  EXPECT_TRUE(Contains(o, "exited with code 07")) << o;
  EXPECT_FALSE(Contains(o, "Software watchpoint")) << o;
  EXPECT_TRUE(WaitFor([&] { return Sessions() == 0; }, 5000));
}

// The holders of the looping process's debug registers, from `resources`.
struct DrHolders {
  int flexible_on = 0, flexible_waiting = 0, gdb_on = 0;
};
DrHolders Holders(const std::string& socket, pid_t pid) {
  DrHolders h;
  const boost::json::value r = PfmctlJson(socket, {"--json", "resources"});
  for (const boost::json::value& t : r.at("tasks").as_array()) {
    if (testing::Num(t.at("pid")) != static_cast<uint64_t>(pid)) continue;
    for (const boost::json::value& x : t.at("holders").as_array()) {
      if (x.at("kind").as_string() != "debug register") continue;
      const bool on = x.at("state").as_string() == "on hw";
      if (Contains(std::string(x.at("what").as_string()), "(gdb, debug register)")) {
        h.gdb_on += on && x.at("mode").as_string() == "pinned";
      } else if (x.at("mode").as_string() == "flexible") {
        (on ? h.flexible_on : h.flexible_waiting)++;
      }
    }
  }
  return h;
}

// A profiler holds 4 flexible breakpoints on the process; GDB's `watch`
// takes a register from them (pinned), so one of theirs waits its turn and
// their running ratio drops; when GDB is gone they get all 4 back.
TEST_F(GdbE2e, WatchpointTakesARegisterFromAProfiler) {
  const pid_t pid = StartLooping(Prog());
  const boost::json::value created = PfmctlJson(
      socket(), {"--json", "session", "create", "--pid", std::to_string(pid), "--breakpoint",
                 "leaf", "--breakpoint", "middle", "--breakpoint", "top", "--breakpoint", "main"});
  const std::string id = std::to_string(testing::Num(created.at("id")));
  ASSERT_TRUE(WaitFor([&] { return Holders(socket(), pid).flexible_on == 4; }, 5000));
  auto ratios = [&] {
    std::vector<double> v;
    const boost::json::value s = PfmctlJson(socket(), {"--json", "session", "show", id});
    for (const boost::json::value& b : s.at("breakpoints").as_array())
      v.push_back(b.at("ratio").is_null() ? 0 : b.at("ratio").to_number<double>());
    return v;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (double x : ratios()) EXPECT_GT(x, 0.99);
  // GDB watches `sink` (written every round with the same value: GDB
  // resumes after each hit by itself) until it is killed.
  const std::string out = dir_ + "/watch.out";
  const std::string script = Script("watch.gdb", "watch sink\ncontinue\n");
  const std::string target = Target("--pid " + std::to_string(pid));
  const pid_t gdb = GdbInBackground(target, script, out);
  ASSERT_TRUE(WaitFor(
      [&] {
        const DrHolders h = Holders(socket(), pid);
        return h.gdb_on == 1 && h.flexible_on == 3 && h.flexible_waiting == 1;
      },
      30000))
      << testing::ReadFile(out);
  EXPECT_TRUE(Contains(testing::ReadFile(out), "Hardware watchpoint 1: sink")) << testing::ReadFile(out);
  // The four rotate through three registers: each runs about 3/4 of the
  // time from now on.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const std::vector<double> during = ratios();
  ASSERT_EQ(during.size(), 4u);
  for (double x : during) {
    EXPECT_LT(x, 0.95);
    EXPECT_GT(x, 0.3);
  }
  ::kill(-gdb, SIGKILL);
  int st;
  ::waitpid(gdb, &st, 0);
  EXPECT_TRUE(WaitFor([&] { return Sessions() == 1; }, 5000));
  EXPECT_TRUE(WaitFor(
      [&] {
        const DrHolders h = Holders(socket(), pid);
        return h.gdb_on == 0 && h.flexible_on == 4;
      },
      5000));
  EXPECT_TRUE(WaitFor([&] { return TracerOf(pid) == 0; }, 5000));
  EXPECT_TRUE(Alive(pid));
}

// Four pinned breakpoints hold every register: GDB's `hbreak` is refused
// with the holders named (GDB prints the text of a Z1 error), and so is
// `watch` (GDB shows only that it failed; pfmctl gdbserver says why on its
// stderr). Nothing is left half-inserted.
TEST_F(GdbE2e, FourPinnedHoldersAreNamed) {
  const pid_t pid = StartLooping(Prog());
  const boost::json::value created =
      PfmctlJson(socket(), {"--json", "session", "create", "--pid", std::to_string(pid),
                            "--pinned", "--breakpoint", "leaf", "--breakpoint", "middle",
                            "--breakpoint", "top", "--breakpoint", "main"});
  const std::string id = std::to_string(testing::Num(created.at("id")));
  const std::string held = "debug registers: 4 of 4 held on task " + std::to_string(pid) +
                           " by session " + id + " (";
  for (const std::string cmd : {"hbreak leaf", "watch sink"}) {
    SCOPED_TRACE(cmd);
    const std::string script = Script("pinned.gdb", cmd + "\ncontinue\n");
    const testing::Result r = Gdb(Prog(), Target("--pid " + std::to_string(pid)), script);
    const std::string all = r.out + r.err;
    if (cmd[0] == 'h') {
      EXPECT_TRUE(Contains(all, "Remote failure reply: " + held)) << all;
    } else {
      EXPECT_TRUE(Contains(all, "Could not insert hardware watchpoint 1")) << all;
      EXPECT_TRUE(Contains(all, "pfmctl gdbserver: hardware watchpoint at 0x")) << all;
    }
    EXPECT_TRUE(Contains(all, held)) << all;
    // GDB quits (the script aborted): it detaches, the profiler's session
    // is the only one left, its 4 still pinned.
    EXPECT_TRUE(WaitFor([&] { return Sessions() == 1 && TracerOf(pid) == 0; }, 5000));
    const boost::json::value r2 = PfmctlJson(socket(), {"--json", "resources"});
    EXPECT_TRUE(Contains(boost::json::serialize(r2), "(gdb") == false)
        << boost::json::serialize(r2);
  }
  EXPECT_TRUE(Alive(pid));
}

// Four threads: a breakpoint in the function the workers call stops the
// process, `info threads` lists them all, and with the breakpoint deleted
// the program runs to its end; a hardware watchpoint set before the
// threads exist is armed in each new thread at its first stop and catches
// the one write to it. (Several threads hitting one breakpoint at once can
// lose a hit: docs/gdb.md, "Decisions and gaps".)
TEST_F(GdbE2e, ThreadsBreakpointsAndAWatchpointInANewThread) {
  // The breakpoint stays: each worker hits it once, and after every
  // stop GDB reads the registers of the thread that stopped without an
  // Hg first (a stop makes it the general thread, as with gdbserver).
  // Were the stub still answering for the previous thread, GDB would see
  // a PC off the breakpoint and let that hit pass unreported.
  const std::string breaks = Script("threads.gdb", R"(break work
continue
info threads
continue
continue
continue
)");
  const testing::Result r = Gdb(ThreadsProg(), Target("-- " + ThreadsProg()), breaks);
  const std::string& o = r.out;
  for (const char* hit : {"work (i=1)", "work (i=2)", "work (i=3)"})
    EXPECT_TRUE(Contains(o, std::string(" hit Breakpoint 1, ") + hit)) << hit << "\n" << o << r.err;
  // main and three workers (GDB marks the current one with '*').
  size_t threads = 0;
  for (size_t at = 0; (at = o.find(" Thread ", at)) != std::string::npos; ++at) ++threads;
  EXPECT_GE(threads, 4u) << o;
  EXPECT_TRUE(Contains(o, "exited normally")) << o;
  EXPECT_TRUE(Contains(r.err, "sum 60")) << r.err;  // the program's stdout: our stderr

  const std::string watch = Script("threads_watch.gdb", R"(watch done[2]
continue
continue
)");
  const testing::Result w = Gdb(ThreadsProg(), Target("-- " + ThreadsProg()), watch);
  EXPECT_TRUE(Contains(w.out, "Hardware watchpoint 1: done[2]\n\nOld value = 0\nNew value = 20"))
      << w.out << w.err;
  EXPECT_TRUE(Contains(w.out, "work (i=2)")) << w.out;
  EXPECT_TRUE(Contains(w.out, "exited normally")) << w.out;
  EXPECT_TRUE(WaitFor([&] { return Sessions() == 0; }, 5000));
}

// Thread -> its PC, from the output of `thread apply all p/x $pc`.
std::map<int, std::string> PcsOf(const std::string& out) {
  std::map<int, std::string> pcs;
  int thread = -1;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (std::sscanf(line.c_str(), "Thread %d (", &thread) == 1) continue;
    const size_t eq = line.find(" = 0x");
    if (thread >= 0 && line.rfind("$", 0) == 0 && eq != std::string::npos)
      pcs[thread] = line.substr(eq + 3);
    thread = -1;
  }
  return pcs;
}

// `set scheduler-locking on`: GDB's `finish` sends vCont;c:TID and only
// that thread runs. Main stops in spin() with the workers released from
// the barrier; finishing spin() takes thousands of steps, during which
// unlocked workers would run to work() and beyond. Locked, every other
// thread is where it was, to the byte.
TEST_F(GdbE2e, SchedulerLockingResumesOneThread) {
  const std::string script = Script("locking.gdb", R"(break spin
continue
delete
set scheduler-locking on
echo BEFORE\n
thread apply all p/x $pc
finish
echo AFTER\n
thread apply all p/x $pc
set scheduler-locking off
continue
)");
  const testing::Result r = Gdb(ThreadsProg(), Target("-- " + ThreadsProg()), script);
  const std::string& o = r.out;
  ASSERT_TRUE(Contains(o, " hit Breakpoint 1, spin ()")) << o << r.err;
  ASSERT_TRUE(Contains(o, "main () at")) << o;  // where finish returned
  const size_t before = o.find("BEFORE\n"), after = o.find("AFTER\n");
  ASSERT_NE(before, std::string::npos) << o;
  ASSERT_NE(after, std::string::npos) << o;
  const auto pcs0 = PcsOf(o.substr(before, after - before));
  const auto pcs1 = PcsOf(o.substr(after));
  // main and the workers not yet gone (one may have finished before main
  // reached spin() on a loaded machine); held, none can leave meanwhile.
  ASSERT_GE(pcs0.size(), 2u) << o;
  ASSERT_TRUE(pcs0.count(1)) << o;
  // Thread 1 is main: it alone moved.
  for (const auto& [thread, pc] : pcs0) {
    ASSERT_TRUE(pcs1.count(thread)) << "thread " << thread << " ran and exited\n" << o;
    if (thread == 1)
      EXPECT_NE(pcs1.at(thread), pc) << o;
    else
      EXPECT_EQ(pcs1.at(thread), pc) << "thread " << thread << " ran\n" << o;
  }
  EXPECT_TRUE(Contains(o, "exited normally")) << o;
  EXPECT_TRUE(Contains(r.err, "sum 60")) << r.err;
}

// Garbage, bad checksums, oversized and malformed packets get error
// replies; the stub keeps serving and detaches cleanly.
TEST_F(GdbE2e, GarbageOnTheWire) {
  const pid_t pid = StartLooping(Prog());
  std::string in = "junk+$?#3f";             // garbage, then a valid halt query
  in += "$g#00";                             // bad checksum -> '-'
  in += "$" + std::string(20000, 'x') + "#00";  // oversized
  in += "$mzz,4#00";                         // (bad checksum too)
  std::string m = "mzz,4";
  unsigned sum = 0;
  for (char c : m) sum += static_cast<unsigned char>(c);
  char cs[3];
  std::snprintf(cs, sizeof(cs), "%02x", sum & 0xff);
  in += "$" + m + "#" + cs;                  // malformed -> E.
  in += "$D#44";
  const std::string input = dir_ + "/garbage.in";
  std::ofstream(input) << in;
  const testing::Result r = testing::Run(
      {"/bin/sh", "-c",
       testing::PfmctlPath() + " --socket " + socket() + " gdbserver --pid " +
           std::to_string(pid) + " < " + input},
      {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "$T05thread:")) << r.out;
  EXPECT_TRUE(Contains(r.out, "-")) << r.out;
  EXPECT_TRUE(Contains(r.out, "$E.packet too long")) << r.out;
  EXPECT_TRUE(Contains(r.out, "$E.")) << r.out;
  EXPECT_TRUE(Contains(r.out, "$OK#9a")) << r.out;  // the detach
  EXPECT_TRUE(WaitFor([&] { return Sessions() == 0 && TracerOf(pid) == 0; }, 5000));
  EXPECT_TRUE(Alive(pid));
}

}  // namespace
}  // namespace pfm
