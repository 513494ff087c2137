// End to end, issue 5: the host driver on this machine — soft BTS over
// ptrace on real processes, real perf_event_open counters, and clear
// refusals for what this machine lacks. Runs the real pfmd and pfmctl.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "pfm/client.h"
#include "pfm/session_spec.h"
#include "pfm/trace_file.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Num;
using testing::Pfmctl;
using testing::PfmctlJson;

bool HasCpuPmu() {
  return access("/sys/bus/event_source/devices/cpu", F_OK) == 0 ||
         access("/sys/bus/event_source/devices/cpu_core", F_OK) == 0;
}

class HostE2e : public testing::DaemonTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: ptrace and perf_event_open on any process";
    ASSERT_NO_FATAL_FAILURE(StartDaemon({"--driver", "host"}));
    dir_ = testing::MakeTempDir("host");
  }
  json::value Report(const std::string& file) {
    return PfmctlJson(socket(), {"report", file});
  }
  // With every record (`report --json` alone gives the newest 20).
  json::value ReportAll(const std::string& file) {
    return PfmctlJson(socket(), {"report", "--records", file});
  }
  std::string dir_;
};

// A command that cannot run is refused before anything exists: no session,
// no trace file (not a trace of pfmctl's own failed exec).
TEST_F(HostE2e, RecordOfAMissingCommandIsNotFoundAndWritesNothing) {
  const std::string file = dir_ + "/missing.trace";
  testing::Result r =
      Pfmctl(socket(), {"record", "-o", file, "--", "pfm-no-such-command-here"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err, "pfmctl: NOT_FOUND: pfm-no-such-command-here: command not found\n");
  EXPECT_NE(access(file.c_str(), F_OK), 0) << "a trace was written";
  r = Pfmctl(socket(), {"record", "-o", file, "--", dir_ + "/nope"});
  EXPECT_EQ(r.err, "pfmctl: NOT_FOUND: " + dir_ + "/nope: no such file\n");
  r = Pfmctl(socket(), {"record", "-o", file, "--", dir_});
  EXPECT_EQ(r.err, "pfmctl: PERMISSION_DENIED: " + dir_ + ": not an executable file\n");
  EXPECT_NE(access(file.c_str(), F_OK), 0);
  EXPECT_EQ(PfmctlJson(socket(), {"--json", "session", "list"}).as_array().size(), 0u);
}

// A trace file that cannot be written to the end (here the file size
// limit, RLIMIT_FSIZE with SIGXFSZ ignored: writes fail with EFBIG after the
// header) ends the recording with one error line naming the file and why;
// the session is gone and the command is not left stopped.
TEST_F(HostE2e, ARecordWhoseFileCannotBeWrittenSaysWhyAndLeavesNothing) {
  const std::string file = dir_ + "/full.trace", err = dir_ + "/full.err";
  const pid_t pfmctl = testing::StartPfmctl(
      socket(),
      {"record", "-o", file, "--", "/bin/sh", "-c",
       "i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done"},
      [&err] {
        const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ::dup2(fd, 2);
        ::signal(SIGXFSZ, SIG_IGN);
        const rlimit small{64 << 10, 64 << 10};
        ::setrlimit(RLIMIT_FSIZE, &small);
      });
  ASSERT_GE(pfmctl, 0);
  int ws = 0;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::waitpid(pfmctl, &ws, 0), pfmctl);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60);
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 1) << ws;
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(testing::Contains(text, file)) << text;
  EXPECT_TRUE(testing::Contains(text, "File too large")) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << "one error line:\n" << text;
  EXPECT_EQ(text.rfind("pfmctl: ", 0), 0u) << text;
  EXPECT_EQ(PfmctlJson(socket(), {"--json", "session", "list"}).as_array().size(), 0u);
  // What was written stays readable, cut short.
  absl::StatusOr<Trace> t = ReadTrace(file, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->complete);
}

// --json's stdout is one JSON document; the traced program's own output goes
// to stderr.
TEST_F(HostE2e, JsonRecordKeepsTheProgramsOutputOffStdout) {
  const std::string file = dir_ + "/echo.trace";
  testing::Result r = Pfmctl(socket(), {"--json", "record", "--counter", "task-clock", "-o",
                                        file, "--", "/bin/echo", "hello-from-the-program"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(testing::Contains(r.err, "hello-from-the-program")) << r.err;
  EXPECT_FALSE(testing::Contains(r.out, "hello-from-the-program")) << r.out;
  boost::system::error_code ec;
  json::parse(r.out, ec);
  EXPECT_FALSE(ec) << "stdout is not one JSON document: " << r.out;
  // Without --json the program's stdout is pfmctl's stdout, as before.
  r = Pfmctl(socket(), {"record", "--counter", "task-clock", "-o", file, "--", "/bin/echo",
                        "plain"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(testing::Contains(r.out, "plain")) << r.out;
}

// Soft BTS follows one task; a CPU-wide BTS session says what it needs
// instead of naming a pid -1.
TEST_F(HostE2e, CpuWideBtsWithoutHardwareBtsSaysSo) {
  if (HasCpuPmu()) GTEST_SKIP() << "this machine may have hardware BTS";
  testing::Result r = Pfmctl(socket(), {"session", "create", "--cpu", "0", "--bts", "history"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "pfmctl: UNIMPLEMENTED: BTS of a whole CPU (--cpu 0) needs hardware BTS, which "
            "this machine does not have; soft BTS traces one task: use --pid\n");
}

// ^C (here SIGINT to pfmctl alone) ends a recording cleanly: the file is
// complete, with its maps, the counters' summary and "interrupted"; the
// command, which the signal did not reach, runs on untraced.
TEST_F(HostE2e, InterruptedRecordWritesACompleteTraceAndLeavesTheCommandRunning) {
  const std::string file = dir_ + "/int.trace", addr = dir_ + "/spin_addr";
  const std::string loop = testing::Runfile("kernel/drivers/ptrace/testdata_loop_bin");
  std::vector<std::string> argv = {testing::PfmctlPath(), "--socket", socket(), "record",
                                   "--bts", "lossless", "--buffer", "16MiB", "-o", file,
                                   "--", loop, "1000000000000", addr};
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pfmctl = ::fork();
  ASSERT_GE(pfmctl, 0);
  if (pfmctl == 0) {
    ::setpgid(0, 0);  // its own group: the test's signal reaches pfmctl only
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  // Until the loop runs (it writes its spin address first), then a little.
  for (int i = 0; i < 300 && access(addr.c_str(), F_OK) != 0; ++i) usleep(20000);
  ASSERT_EQ(access(addr.c_str(), F_OK), 0) << "the loop never started";
  usleep(500000);
  ASSERT_EQ(::kill(pfmctl, SIGINT), 0);
  int ws = 0;
  ASSERT_EQ(::waitpid(pfmctl, &ws, 0), pfmctl);
  // The file written, pfmctl dies of the signal, as perf record does.
  EXPECT_TRUE(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGINT) << ws;

  json::value rep = Report(file);
  EXPECT_TRUE(rep.at("complete").as_bool()) << "no trailer";
  const json::object& trailer = rep.at("trailer").as_object();
  EXPECT_EQ(trailer.at("interrupted").as_string(), strsignal(SIGINT));
  const std::string exit(trailer.at("exit").as_string());
  EXPECT_EQ(exit.rfind("still running, pid ", 0), 0u) << exit;
  EXPECT_GT(Num(rep.at("summary").at("by_type").at("branch")), 1000u);
  // The maps came along: the loop's own function is named.
  bool spin = false;
  for (const json::value& h : rep.at("hot_functions").as_array())
    if (h.at("function").as_string() == "spin") spin = true;
  EXPECT_TRUE(spin) << json::serialize(rep.at("hot_functions"));
  // Untraced now, and still running: the test ends it.
  const pid_t cmd = static_cast<pid_t>(Num(rep.at("header").at("pid")));
  EXPECT_EQ(::kill(cmd, 0), 0) << "the command did not run on";
  std::ifstream status("/proc/" + std::to_string(cmd) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("TracerPid:", 0) == 0) {
      EXPECT_EQ(line, "TracerPid:\t0");
    }
  }
  ::kill(cmd, SIGKILL);
}

// `record -p PID` attaches to a running process (perf record -p): traced
// until it exits, or until ^C, after which it runs on untraced.
TEST_F(HostE2e, RecordAttachedTracesARunningProcessUntilItExitsOrCtrlC) {
  // A shell waiting for its sleep: the recording ends when the shell exits.
  const pid_t sh = fork();
  if (sh == 0) {
    execl("/bin/sh", "sh", "-c", "/bin/sleep 1; exit 0", nullptr);
    _exit(127);
  }
  usleep(200000);
  const std::string f1 = dir_ + "/attach_exit.trace";
  testing::Result r = Pfmctl(socket(), {"record", "-p", std::to_string(sh), "-o", f1});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  int ws;
  waitpid(sh, &ws, 0);
  json::value rep = Report(f1);
  EXPECT_TRUE(rep.at("complete").as_bool());
  EXPECT_EQ(rep.at("trailer").at("exit").as_string(), "exited");
  EXPECT_EQ(rep.at("header").at("command").as_string(), "sh");
  EXPECT_GT(Num(rep.at("summary").at("by_type").at("branch")), 100u);

  // A loop that never ends: ^C (SIGINT to pfmctl) ends the recording.
  const std::string addr = dir_ + "/attach_addr";
  const std::string loop = testing::Runfile("kernel/drivers/ptrace/testdata_loop_bin");
  const pid_t child = fork();
  if (child == 0) {
    execl(loop.c_str(), loop.c_str(), "1000000000000", addr.c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; i < 300 && access(addr.c_str(), F_OK) != 0; ++i) usleep(20000);
  const std::string f2 = dir_ + "/attach_int.trace";
  std::vector<std::string> argv = {testing::PfmctlPath(), "--socket", socket(), "record",
                                   "-p", std::to_string(child), "-o", f2};
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pfmctl = fork();
  if (pfmctl == 0) {
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  usleep(1500000);
  ASSERT_EQ(::kill(pfmctl, SIGINT), 0);
  ASSERT_EQ(waitpid(pfmctl, &ws, 0), pfmctl);
  EXPECT_TRUE(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGINT) << ws << ": as perf record -p";
  rep = Report(f2);
  EXPECT_TRUE(rep.at("complete").as_bool());
  EXPECT_EQ(rep.at("trailer").at("interrupted").as_string(), strsignal(SIGINT));
  EXPECT_GT(Num(rep.at("summary").at("by_type").at("branch")), 100u);
  bool spin = false;
  for (const json::value& h : rep.at("hot_functions").as_array())
    if (h.at("function").as_string() == "spin") spin = true;
  EXPECT_TRUE(spin) << json::serialize(rep.at("hot_functions"));
  EXPECT_EQ(::kill(child, 0), 0) << "the process did not run on";
  ::kill(child, SIGKILL);
  waitpid(child, &ws, 0);
}

// `stat` prints a command's counters as perf stat does, at full speed (no
// branch tracing), and exits with the command's status.
TEST_F(HostE2e, StatCountsACommandAndAProcessLikePerfStat) {
  testing::Result r = Pfmctl(socket(), {"stat", "--", "/bin/sh", "-c", "exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(testing::Contains(r.err, "Performance counter stats for '/bin/sh -c exit 3':"))
      << r.err;
  for (const char* e : {"task-clock", "context-switches", "cpu-migrations", "page-faults"})
    EXPECT_TRUE(testing::Contains(r.err, e)) << e << " in:\n" << r.err;
  EXPECT_TRUE(testing::Contains(r.err, "seconds time elapsed")) << r.err;
  if (!HasCpuPmu()) {
    EXPECT_TRUE(testing::Contains(r.err, "<not supported>      cycles")) << r.err;
  }
  // The layout of Debian's perf stat itself (linux-perf), line by line: the
  // event's column, the '#' column, the metric's unit, and the time lines
  // (user and sys too, for a command).
  {
    const std::vector<std::string> evs = {"task-clock", "context-switches", "page-faults",
                                          "cpu-migrations"};
    std::vector<std::string> mine = {"stat"}, perf = {"/usr/bin/perf", "stat", "-e",
                                                      "task-clock,context-switches,page-faults,"
                                                      "cpu-migrations"};
    for (const std::string& e : evs) mine.insert(mine.end(), {"-e", e});
    mine.insert(mine.end(), {"--", "/bin/sh", "-c", "for i in 1 2 3; do /bin/true; done"});
    perf.insert(perf.end(), {"--", "/bin/sh", "-c", "for i in 1 2 3; do /bin/true; done"});
    const testing::Result m = Pfmctl(socket(), mine);
    const testing::Result p = testing::Run(perf);
    ASSERT_EQ(p.exit_code, 0) << p.err;
    ASSERT_EQ(m.exit_code, 0) << m.err;
    // The line of `what`, and where its event name and '#' stand; the unit
    // after the metric's number.
    struct Shape {
      size_t event = std::string::npos, hash = std::string::npos;
      std::string unit;
    };
    auto shape = [](const std::string& text, const std::string& what) {
      Shape sh;
      std::istringstream in(text);
      for (std::string line; std::getline(in, line);) {
        const size_t at = line.find(" " + what + " ");
        if (at == std::string::npos) continue;
        sh.event = at + 1;
        sh.hash = line.find('#');
        if (sh.hash != std::string::npos) {
          std::istringstream rest(line.substr(sh.hash + 1));
          std::string number;
          rest >> number;
          std::getline(rest, sh.unit);
          sh.unit.erase(0, sh.unit.find_first_not_of(' '));
          sh.unit.erase(sh.unit.find_last_not_of(' ') + 1);
        }
        break;
      }
      return sh;
    };
    for (const std::string& e : evs) {
      const Shape a = shape(m.err, e), b = shape(p.err, e);
      EXPECT_NE(b.event, std::string::npos) << e << " in perf's:\n" << p.err;
      EXPECT_EQ(a.event, b.event) << e << "\npfmctl:\n" << m.err << "perf:\n" << p.err;
      EXPECT_EQ(a.hash, b.hash) << e << "\npfmctl:\n" << m.err << "perf:\n" << p.err;
      // A rate's prefix depends on the run's numbers: the unit's words.
      const auto tail = [](const std::string& u) { return u.substr(u.find('/') == std::string::npos ? 0 : u.find('/')); };
      EXPECT_EQ(tail(a.unit), tail(b.unit)) << e << "\npfmctl:\n" << m.err << "perf:\n" << p.err;
    }
    for (const char* t : {" seconds time elapsed", " seconds user", " seconds sys"}) {
      const size_t a = m.err.find(t), b = p.err.find(t);
      ASSERT_NE(b, std::string::npos) << t << " in perf's:\n" << p.err;
      ASSERT_NE(a, std::string::npos) << t << " in pfmctl's:\n" << m.err;
      // The number's column: where its line starts to where it ends.
      EXPECT_EQ(a - m.err.rfind('\n', a), b - p.err.rfind('\n', b)) << t;
    }
  }
  // In the user's locale, as perf stat (which calls setlocale(LC_ALL, "")):
  // de_DE.UTF-8, compiled here into a LOCPATH of the test's own (the system
  // may have only C), gives both a decimal comma in the clock's msec and
  // the metric, and the same columns.
  {
    const std::string locdir = dir_ + "/locales";
    ASSERT_EQ(testing::Run({"/bin/sh", "-c", "mkdir -p " + locdir +
                                                 " && localedef -i de_DE -f UTF-8 " + locdir +
                                                 "/de_DE.UTF-8"})
                  .exit_code,
              0)
        << "localedef (Debian's locales package)";
    const std::map<std::string, std::string> env = {{"LOCPATH", locdir},
                                                    {"LC_ALL", "de_DE.UTF-8"}};
    const std::vector<std::string> cmd = {"--", "/bin/sh", "-c", "/bin/true"};
    std::vector<std::string> mine = {testing::PfmctlPath(), "--socket", socket(), "stat",
                                     "-e", "task-clock", "-e", "page-faults"};
    std::vector<std::string> perf = {"/usr/bin/perf", "stat", "-e", "task-clock,page-faults"};
    mine.insert(mine.end(), cmd.begin(), cmd.end());
    perf.insert(perf.end(), cmd.begin(), cmd.end());
    const testing::Result m = testing::Run(mine, env);
    const testing::Result p = testing::Run(perf, env);
    ASSERT_EQ(m.exit_code, 0) << m.err;
    ASSERT_EQ(p.exit_code, 0) << p.err;
    // "  0,82 msec task-clock  #    0,422 CPUs utilized": a comma where C
    // has a point, in both numbers, at the same columns.
    auto clock_line = [](const std::string& text) {
      std::istringstream in(text);
      for (std::string line; std::getline(in, line);)
        if (line.find(" msec task-clock") != std::string::npos) return line;
      return std::string();
    };
    const std::string a = clock_line(m.err), b = clock_line(p.err);
    ASSERT_FALSE(b.empty()) << p.err;
    ASSERT_FALSE(a.empty()) << m.err;
    for (const std::string* l : {&a, &b}) {
      EXPECT_EQ(l->find('.'), std::string::npos) << *l;
      EXPECT_NE(l->find(" msec"), std::string::npos);
      EXPECT_EQ(l->find(','), l->find(" msec") - 3) << *l;  // "0,82 msec"
      EXPECT_NE(l->find(',', l->find('#')), std::string::npos) << *l;  // "0,422"
    }
    EXPECT_EQ(a.find(" msec"), b.find(" msec")) << a << "\n" << b;
    EXPECT_EQ(a.find('#'), b.find('#')) << a << "\n" << b;
    const size_t ma = m.err.find(" seconds time elapsed"), pa = p.err.find(" seconds time elapsed");
    ASSERT_NE(ma, std::string::npos);
    ASSERT_NE(pa, std::string::npos);
    EXPECT_EQ(m.err[ma - 10], ',') << m.err;  // "0,001946727"
    EXPECT_EQ(p.err[pa - 10], ',') << p.err;
  }
  // --json: the numbers, from the kernel's perf events.
  const json::value v = PfmctlJson(socket(), {"--json", "stat", "-e", "page-faults", "-e",
                                              "task-clock", "--", "/bin/true"});
  const json::array& cs = v.at("counters").as_array();
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].at("event").as_string(), "page-faults");
  EXPECT_GT(Num(cs[0].at("value")), 10u);  // a dynamic /bin/true faults its pages in
  EXPECT_GT(Num(cs[1].at("value")), 0u);
  EXPECT_EQ(Num(v.at("wait_status")), 0u);
  EXPECT_TRUE(v.at("user_s").is_number()) << v;
  EXPECT_TRUE(v.at("sys_s").is_number()) << v;
  // --json's stdout is the JSON alone: the program's output goes to stderr.
  r = Pfmctl(socket(), {"--json", "stat", "-e", "task-clock", "--", "/bin/echo", "hello"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("counters").as_array().size(), 1u) << r.out;
  EXPECT_TRUE(testing::Contains(r.err, "hello\n")) << r.err;
  // -p: a running process, until it exits.
  const pid_t child = fork();
  if (child == 0) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
    while (std::chrono::steady_clock::now() < end) {
    }
    _exit(0);
  }
  r = Pfmctl(socket(), {"stat", "-e", "task-clock", "-p", std::to_string(child)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(testing::Contains(r.err, "process id '" + std::to_string(child) + "'")) << r.err;
  EXPECT_TRUE(testing::Contains(r.err, "msec task-clock")) << r.err;
  int ws;
  waitpid(child, &ws, 0);
  // -t: one thread of this (multi-threaded) test process, which spins 800
  // ms and exits; stat ends with it, this process runs on.
  std::atomic<pid_t> tid{0};
  std::thread spinner([&] {
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
    while (std::chrono::steady_clock::now() < end) {
    }
  });
  while (tid == 0) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  r = Pfmctl(socket(), {"--json", "stat", "-e", "task-clock", "-t", std::to_string(tid.load())});
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spinner.join();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(took, 30.0) << "stat -t did not end with its thread";
  json::value tv = json::parse(r.out);
  const json::array& tc = tv.at("counters").as_array();
  ASSERT_EQ(tc.size(), 1u);
  // task-clock in ns: the thread spun for most of the 800 ms it had left.
  EXPECT_GT(Num(tc[0].at("value")), 100'000'000u) << r.out;
  // Nothing left behind.
  EXPECT_EQ(PfmctlJson(socket(), {"--json", "session", "list"}).as_array().size(), 0u);
}

// `stat -- CMD` and signals, as perf stat: SIGTERM (or SIGHUP) to pfmctl
// alone ends the counting at once, prints the counts so far, leaves the
// command running and dies of the signal; ^C (SIGINT to the whole group)
// ends the command, and stat then prints and dies of SIGINT. Before, stat
// ignored SIGTERM until the command ended and exited 128 + N.
TEST_F(HostE2e, StatEndedByASignalPrintsTheCountsThenDiesOfIt) {
  const std::string started = dir_ + "/stat_started";
  for (const int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(strsignal(sig));
    ::unlink(started.c_str());
    std::vector<std::string> argv = {testing::PfmctlPath(), "--socket", socket(), "--json",
                                     "stat", "-e", "task-clock", "--", "/bin/sh", "-c",
                                     "echo $$ > " + started + ".tmp; mv " + started +
                                         ".tmp " + started + "; exec sleep 60"};
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    int out[2];
    ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
    const pid_t pfmctl = ::fork();
    ASSERT_GE(pfmctl, 0);
    if (pfmctl == 0) {
      ::setpgid(0, 0);  // its own group, with the command
      ::dup2(out[1], 1);
      ::execv(cargv[0], cargv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    for (int i = 0; i < 500 && access(started.c_str(), F_OK) != 0; ++i) usleep(10000);
    ASSERT_EQ(access(started.c_str(), F_OK), 0) << "the command never started";
    // The command: sh, which wrote its pid, then exec'd sleep.
    pid_t cmd = 0;
    std::ifstream(started) >> cmd;
    ASSERT_GT(cmd, 0);
    const auto t0 = std::chrono::steady_clock::now();
    if (sig == SIGTERM) {
      ASSERT_EQ(::kill(pfmctl, SIGTERM), 0);  // pfmctl alone
    } else {
      ASSERT_EQ(::kill(-pfmctl, SIGINT), 0);  // ^C: the terminal's group
    }
    int ws = 0;
    ASSERT_EQ(::waitpid(pfmctl, &ws, 0), pfmctl);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(took, 10.0) << "stat did not stop at the signal";
    EXPECT_TRUE(WIFSIGNALED(ws) && WTERMSIG(ws) == sig) << ws;
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(out[0], buf, sizeof(buf))) > 0;) text.append(buf, size_t(n));
    ::close(out[0]);
    boost::system::error_code ec;
    const json::value v = json::parse(text, ec);
    ASSERT_FALSE(ec) << text;
    EXPECT_EQ(v.at("counters").as_array().size(), 1u) << text;
    EXPECT_EQ(v.at("interrupted").as_string(), strsignal(sig)) << text;
    if (sig == SIGTERM) {
      EXPECT_EQ(::kill(cmd, 0), 0) << "the command did not run on";
      EXPECT_FALSE(v.as_object().contains("wait_status")) << text;
    } else {
      EXPECT_EQ(Num(v.at("wait_status")) & 0x7f, static_cast<uint64_t>(SIGINT)) << text;
    }
    ::kill(cmd, SIGKILL);
    ::waitpid(cmd, nullptr, WNOHANG);
  }
  EXPECT_EQ(PfmctlJson(socket(), {"--json", "session", "list"}).as_array().size(), 0u);
}

// Address filters (issue 17, docs/host_drivers.md "Address filters"):
// `--filter '@ /bin/ls'` records ls's own branches only, with gap records
// where ls ran in libc and ld.so; bad filters change nothing.
TEST_F(HostE2e, FileFilterRecordsOnlyThatFilesBranchesWithGaps) {
  const std::string all = dir_ + "/all.trace", ls = dir_ + "/ls.trace";
  testing::Result r = Pfmctl(socket(), {"record", "-o", all, "--", "/bin/ls", "/"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Pfmctl(socket(), {"record", "--filter", "@ /bin/ls", "-o", ls, "--", "/bin/ls", "/"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json::value a = ReportAll(all), f = ReportAll(ls);
  const uint64_t branches_all = Num(a.at("summary").at("by_type").at("branch"));
  const json::object& by_type = f.at("summary").at("by_type").as_object();
  const uint64_t branches = Num(by_type.at("branch"));
  EXPECT_GT(branches, 1000u);
  EXPECT_LT(branches, branches_all / 3);
  ASSERT_NE(by_type.if_contains("gap"), nullptr);
  EXPECT_GT(Num(by_type.at("gap")), 10u);
  // Every branch leaves from ls's text (one mapping, ~90 KiB), and every
  // gap ends in it, where tracing resumed.
  auto addr = [](const json::value& v) {
    return std::stoull(std::string(v.as_string()), nullptr, 16);
  };
  uint64_t lo = UINT64_MAX, hi = 0;
  size_t gaps = 0;
  for (const json::value& rec : f.at("records").as_array()) {
    if (rec.at("type").as_string() != "branch") continue;
    lo = std::min<uint64_t>(lo, addr(rec.at("from")));
    hi = std::max<uint64_t>(hi, addr(rec.at("from")));
  }
  EXPECT_LT(hi - lo, 0x20000u);
  for (const json::value& rec : f.at("records").as_array()) {
    if (rec.at("type").as_string() != "gap") continue;
    ++gaps;
    EXPECT_GE(addr(rec.at("to")), lo - 0x1000) << json::serialize(rec);  // _init: no branch before
    EXPECT_LE(addr(rec.at("to")), hi) << json::serialize(rec);
  }
  EXPECT_EQ(gaps, Num(by_type.at("gap")));
  // The session's own count (session show's soft_bts.gaps, kept in the
  // trailer) says the same.
  absl::StatusOr<Trace> lt = ReadTrace(ls);
  ASSERT_TRUE(lt.ok()) << lt.status();
  ASSERT_TRUE(lt->trailer.contains("soft_bts")) << json::serialize(lt->trailer);
  EXPECT_EQ(Num(lt->trailer.at("soft_bts").at("gaps")), gaps);
  // Refusals: a name no file has; bad ranges and files.
  const std::string bad = dir_ + "/bad.trace";
  r = Pfmctl(socket(), {"record", "--start", "pfm_no_such_fn", "-o", bad, "--", "/bin/ls", "/"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("NOT_FOUND: no symbol 'pfm_no_such_fn' in /usr/bin/ls"), std::string::npos)
      << r.err;
  r = Pfmctl(socket(), {"record", "--filter", "range 0x5000-0x4000", "-o", bad, "--", "/bin/true"});
  EXPECT_NE(r.err.find("INVALID_ARGUMENT: address filter 'range 0x5000-0x4000'"),
            std::string::npos) << r.err;
  r = Pfmctl(socket(), {"record", "--filter", "@ /no/such/file", "-o", bad, "--", "/bin/true"});
  EXPECT_NE(r.err.find("NOT_FOUND: --filter '@ /no/such/file'"), std::string::npos) << r.err;
  EXPECT_NE(access(bad.c_str(), F_OK), 0);
  EXPECT_EQ(PfmctlJson(socket(), {"--json", "session", "list"}).as_array().size(), 0u);
}

// `--start main` on Debian's stripped /bin/true (GDB's `start`, Intel PT's
// start filter): main is found from _start (symbolizer.cc, MainFromEntry);
// nothing before it is recorded, one gap from the first instruction to
// main stands for it. main's address is checked against binutils' reading
// of _start (objdump), an independent decoder.
TEST_F(HostE2e, StartMainOnAStrippedProgramSkipsTheLoader) {
  const std::string all = dir_ + "/all.trace", started = dir_ + "/started.trace";
  testing::Result r = Pfmctl(socket(), {"record", "-o", all, "--", "/bin/true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Pfmctl(socket(), {"record", "--start", "main", "-o", started, "--", "/bin/true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // objdump's view of _start: `lea -0x..(%rip),%rdi        # 2310 <...>`.
  testing::Result hdr = testing::Run({"/usr/bin/readelf", "-h", "/usr/bin/true"});
  ASSERT_EQ(hdr.exit_code, 0) << hdr.err;
  const size_t e = hdr.out.find("Entry point address:");
  ASSERT_NE(e, std::string::npos);
  const uint64_t entry = std::stoull(hdr.out.substr(e + 20), nullptr, 16);
  testing::Result dis = testing::Run(
      {"/usr/bin/objdump", "-d", "--start-address=" + std::to_string(entry),
       "--stop-address=" + std::to_string(entry + 0x30), "/usr/bin/true"});
  ASSERT_EQ(dis.exit_code, 0) << dis.err;
  const size_t lea = dis.out.find(",%rdi");
  ASSERT_NE(lea, std::string::npos) << dis.out;
  const size_t hash = dis.out.find("# ", lea);
  ASSERT_NE(hash, std::string::npos) << dis.out;
  const uint64_t main_vaddr = std::stoull(dis.out.substr(hash + 2), nullptr, 16);
  char want[64];
  snprintf(want, sizeof(want), "[/usr/bin/true+0x%llx]", (unsigned long long)main_vaddr);

  json::value a = ReportAll(all), f = ReportAll(started);
  const uint64_t branches_all = Num(a.at("summary").at("by_type").at("branch"));
  const json::object& by_type = f.at("summary").at("by_type").as_object();
  ASSERT_NE(by_type.if_contains("gap"), nullptr);
  EXPECT_EQ(Num(by_type.at("gap")), 1u);
  const uint64_t branches = Num(by_type.at("branch"));
  EXPECT_GT(branches, 20u);  // main, exit, the atexit handlers
  EXPECT_LT(branches, branches_all / 10) << "the loader was traced";
  bool seen_gap = false;
  for (const json::value& rec : f.at("records").as_array()) {
    const std::string type(rec.at("type").as_string());
    if (type == "gap") {
      seen_gap = true;
      EXPECT_EQ(testing::Str(rec.at("to_sym")), want) << json::serialize(rec);
      EXPECT_TRUE(testing::StartsWith(testing::Str(rec.at("from_sym")), "_start"))
          << json::serialize(rec);  // ld.so's entry: where the untraced run began
    }
    if (type == "branch") {
      EXPECT_TRUE(seen_gap) << "a branch before main: " << json::serialize(rec);
      break;
    }
  }
  EXPECT_TRUE(f.at("complete").as_bool());
}

// `--start ADDR` as a number, for `record -- CMD`: the program's address
// (a non-PIE program's main, which it prints), not the address in the copy
// of pfmctl held before the exec (pfmctl runs the command to its exec stop
// first, as for names; breakpoint_names.h).
TEST_F(HostE2e, StartAtANumberIsTheCommandsAddress) {
  const std::string prog = testing::Runfile("libpfm-bts/names_prog_nopie_stripped");
  testing::Result plain = testing::Run({prog});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_TRUE(testing::StartsWith(plain.out, "main=0x")) << plain.out;
  const std::string main_hex = plain.out.substr(5, plain.out.find('\n') - 5);
  const std::string file = dir_ + "/started.trace";
  testing::Result r =
      Pfmctl(socket(), {"record", "--start", main_hex, "-o", file, "--", prog});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(testing::Contains(r.out, main_hex)) << r.out;  // it printed and ran on
  json::value f = ReportAll(file);
  const json::object& by_type = f.at("summary").at("by_type").as_object();
  ASSERT_NE(by_type.if_contains("gap"), nullptr) << "main was never reached";
  EXPECT_EQ(Num(by_type.at("gap")), 1u);
  EXPECT_GT(Num(by_type.at("branch")), 20u);
  for (const json::value& rec : f.at("records").as_array()) {
    if (rec.at("type").as_string() != "gap") continue;
    EXPECT_EQ(testing::Addr(rec.at("to")), std::stoull(main_hex, nullptr, 16))
        << json::serialize(rec);
  }
}

TEST_F(HostE2e, RecordTrueShowsThousandsOfSymbolizedBranches) {
  const std::string file = dir_ + "/true.trace";
  testing::Result r = Pfmctl(socket(), {"--json", "record", "--bts", "lossless",
                                        "--buffer", "16MiB", "-o", file, "--", "/bin/true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json::value rep = ReportAll(file);
  EXPECT_TRUE(rep.at("complete").as_bool());
  const uint64_t branches = Num(rep.at("summary").at("by_type").at("branch"));
  EXPECT_GT(branches, 2000u);
  // pfmd's tracers branch-step (docs/host_drivers.md): a stop at each
  // block's branch (int3) and single steps only for syscalls and the like,
  // so fewer than 3 traps per recorded branch, where single-stepping
  // /bin/true takes about 10.
  const json::object& sb = rep.at("trailer").at("soft_bts").as_object();
  EXPECT_EQ(sb.at("stepping").as_string(), "branch");
  const uint64_t stops = Num(sb.at("steps")) + Num(sb.at("int3_stops"));
  EXPECT_EQ(Num(rep.at("trailer").at("steps")), Num(sb.at("steps")));
  EXPECT_GT(Num(sb.at("emulated")), branches / 2);
  EXPECT_GE(stops, branches / 2);
  EXPECT_LT(stops, 3 * branches);
  EXPECT_EQ(Num(sb.at("resyncs")), 0u);
  EXPECT_EQ(Num(rep.at("summary").at("lost")), 0u);
  // Symbolized into the dynamic loader and libc.
  uint64_t in_ld = 0, in_libc = 0, symbolized = 0;
  std::ifstream maps_check;
  for (const json::value& rec : rep.at("records").as_array()) {
    if (rec.at("type").as_string() != "branch") continue;
    const std::string sym(rec.at("from_sym").as_string());
    if (!sym.empty() && sym[0] != '[') ++symbolized;
    if (sym.rfind("_dl_", 0) == 0 || sym.rfind("dl_main", 0) == 0) ++in_ld;
    if (sym.rfind("_IO_", 0) == 0 || sym.rfind("__libc_", 0) == 0 || sym.rfind("exit", 0) == 0)
      ++in_libc;
  }
  EXPECT_GT(in_ld, 100u);
  EXPECT_GT(in_libc, 5u);
  EXPECT_GT(symbolized, branches * 9 / 10);
  // The command's exit status is pfmctl's.
  EXPECT_EQ(Pfmctl(socket(), {"record", "-o", file, "--", "/bin/false"}).exit_code, 1);
}

TEST_F(HostE2e, CrashHistoryHoldsTheBranchesLeadingToTheFault) {
  constexpr int kHistory = 16;
  const std::string file = dir_ + "/crash.trace", addr_file = dir_ + "/addr";
  testing::Result r = Pfmctl(
      socket(),
      {"record", "--role", "debugger", "--bts", "history", "--buffer",
       std::to_string(kHistory * 64), "-o", file, "--",
       testing::Runfile("kernel/drivers/ptrace/testdata_crash_bin"), addr_file});
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV) << r.err;
  json::value rep = ReportAll(file);
  std::vector<json::object> branches;
  for (const json::value& rec : rep.at("records").as_array())
    if (rec.at("type").as_string() == "branch") branches.push_back(rec.as_object());
  ASSERT_EQ(branches.size(), static_cast<size_t>(kHistory));
  // The last branch reaches the faulting function.
  EXPECT_EQ(std::string(branches.back().at("to_sym").as_string()).rfind("crash_here", 0), 0u)
      << json::serialize(branches.back());
  EXPECT_EQ(Num(rep.at("trailer").at("fatal_signal")), static_cast<uint64_t>(SIGSEGV));
  for (size_t i = 1; i < branches.size(); ++i)
    EXPECT_GE(Num(branches[i].at("time")), Num(branches[i - 1].at("time")));
}

TEST_F(HostE2e, SoftwareCountersCountRealValues) {
  pid_t child = fork();
  if (child == 0) {
    // Busy, then sleepy: task-clock and voluntary switches both grow.
    for (;;) {
      for (volatile int i = 0; i < 2000000; ++i) {}
      usleep(1000);
    }
  }
  testing::Result c = Pfmctl(socket(), {"--json", "session", "create", "--pid",
                                        std::to_string(child), "--counter", "task-clock",
                                        "--counter", "context-switches"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const uint64_t id = Num(json::parse(c.out).at("id"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  json::value show = PfmctlJson(socket(), {"session", "show", std::to_string(id)});
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  const json::array& counters = show.at("counters").as_array();
  ASSERT_EQ(counters.size(), 2u);
  EXPECT_GT(Num(counters[0].at("value")), 10000000u) << "task-clock ns";
  EXPECT_GT(Num(counters[1].at("value")), 10u) << "context switches";
  EXPECT_GT(Num(counters[0].at("time_enabled")), 0u);
  EXPECT_DOUBLE_EQ(counters[0].at("ratio").to_number<double>(), 1.0);
  EXPECT_EQ(show.at("state").as_string(), "running");
  ASSERT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
}

TEST_F(HostE2e, PebsAndHardwareCountersAreNotSupportedHereAndChangeNothing) {
  if (HasCpuPmu()) GTEST_SKIP() << "this machine has a CPU PMU";
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  const std::string pid = std::to_string(child);
  testing::Result r = Pfmctl(socket(), {"session", "create", "--pid", pid, "--pebs",
                                        "MEM_LOAD_RETIRED.L3_MISS"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("UNIMPLEMENTED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not supported on this machine"), std::string::npos) << r.err;
  r = Pfmctl(socket(), {"session", "create", "--pid", pid, "--counter", "cycles"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not supported on this machine"), std::string::npos) << r.err;
  json::value st = PfmctlJson(socket(), {"status"});
  EXPECT_EQ(Num(st.at("sessions")), 0u);
  EXPECT_TRUE(st.at("memory").at("charged").as_array().empty());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

TEST_F(HostE2e, DebuggerAndProfilerTraceOneRealProcessAtOnce) {
  // A process that loops until told to stop (a file appears), then exits.
  const std::string stop = dir_ + "/stop";
  pid_t child = fork();
  if (child == 0) {
    while (access(stop.c_str(), F_OK) != 0) {
      for (volatile int i = 0; i < 200; ++i) {}
    }
    _exit(0);
  }
  const std::string pid = std::to_string(child);
  testing::Result dbg = Pfmctl(socket(), {"--json", "session", "create", "--role", "debugger",
                                          "--pid", pid, "--bts", "history", "--buffer", "2KiB",
                                          "--breakpoint", "0x401000:8:w"});
  ASSERT_EQ(dbg.exit_code, 0) << dbg.err;
  testing::Result prof = Pfmctl(socket(), {"--json", "session", "create", "--role", "profiler",
                                           "--pid", pid, "--bts", "lossless", "--counter",
                                           "task-clock"});
  ASSERT_EQ(prof.exit_code, 0) << prof.err;
  const uint64_t d_id = Num(json::parse(dbg.out).at("id"));
  const uint64_t p_id = Num(json::parse(prof.out).at("id"));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  json::value res = PfmctlJson(socket(), {"resources"});
  const std::string rs = json::serialize(res);
  EXPECT_NE(rs.find("debug register"), std::string::npos) << rs;
  EXPECT_NE(rs.find("debugger history"), std::string::npos) << rs;
  EXPECT_NE(rs.find("profiler lossless"), std::string::npos) << rs;
  json::value snap = PfmctlJson(socket(), {"snapshot", std::to_string(d_id)});
  EXPECT_EQ(snap.at("records").as_array().size(), 32u);
  { std::ofstream(stop.c_str()) << "stop\n"; }
  int ws = 0;
  waitpid(child, &ws, 0);
  const std::string file = dir_ + "/prof.trace";
  testing::Result s = Pfmctl(socket(), {"stream", std::to_string(p_id), "-o", file});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  json::value rep = ReportAll(file);
  EXPECT_GT(Num(rep.at("summary").at("by_type").at("branch")), 1000u);
  EXPECT_EQ(Num(rep.at("summary").at("by_type").at("exit")), 1u);
  // The stream's trailer carries the target's mappings: branches symbolize.
  uint64_t symbolized = 0, branch_count = 0;
  for (const json::value& rec : rep.at("records").as_array()) {
    if (rec.at("type").as_string() != "branch") continue;
    ++branch_count;
    const std::string sym(rec.at("from_sym").as_string());
    if (!sym.empty() && sym[0] != '[') ++symbolized;
  }
  EXPECT_GT(symbolized, branch_count * 9 / 10) << symbolized << " of " << branch_count;
  EXPECT_GT(Num(rep.at("trailer").at("steps")), 0u);
  json::value show = PfmctlJson(socket(), {"session", "show", std::to_string(p_id)});
  EXPECT_EQ(show.at("state").as_string(), "exited");
  for (uint64_t id : {d_id, p_id})
    EXPECT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
  json::value st = PfmctlJson(socket(), {"status"});
  EXPECT_TRUE(st.at("memory").at("charged").as_array().empty());
}

// A detached debugger session outlives the client that opened its debug
// channel. When that client dies, the tracer helper says the channel ended
// (kDebugEnded) and pfmd frees the session's one-debugger slot and the
// debugger's hardware points; before, pfmd never learnt it (it sees only
// its own connections) and both stayed held until `session kill`.
TEST_F(HostE2e, ADeadDebuggersChannelAndHardwarePointsAreFreed) {
  const pid_t child = fork();
  if (child == 0) {
    for (;;) {
      for (volatile int i = 0; i < 200; ++i) {
      }
    }
  }
  testing::ScopedChild reap_target{child};
  ASSERT_GT(child, 0);
  absl::StatusOr<Client> c = Client::Connect(socket());
  ASSERT_TRUE(c.ok()) << c.status();
  SessionSpec spec;
  spec.role = "debugger";
  spec.pid = child;
  spec.debug = true;
  spec.detached = true;
  absl::StatusOr<Client::Reply> made = c->Call("session_create", {{"spec", spec.ToJson()}});
  ASSERT_TRUE(made.ok()) << made.status();
  const uint64_t id = Num(made->result.at("id"));
  // The debugger: another process, which opens the channel, inserts a
  // watchpoint, says so and waits to be killed.
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  const std::string sock = socket();
  const pid_t debugger = fork();
  if (debugger == 0) {
    absl::StatusOr<Client> d = Client::Connect(sock);
    if (!d.ok()) _exit(1);
    absl::StatusOr<Client::Reply> ch = d->Call("session_debug", {{"id", id}});
    if (!ch.ok() || ch->fds.size() != 1) _exit(2);
    absl::StatusOr<Client::Reply> bp = d->Call(
        "session_breakpoint",
        {{"id", id}, {"insert", true}, {"access", "w"}, {"addr", 0x601000}, {"len", 8}});
    if (!bp.ok()) _exit(3);
    (void)!::write(ready[1], "k", 1);
    for (;;) ::pause();
  }
  testing::ScopedChild reap_debugger{debugger};
  ASSERT_GT(debugger, 0);
  ::close(ready[1]);
  char k = 0;
  ASSERT_EQ(::read(ready[0], &k, 1), 1) << "the debugger could not take the channel";
  ::close(ready[0]);
  auto resources = [&] { return json::serialize(PfmctlJson(socket(), {"resources"})); };
  EXPECT_NE(resources().find("0x601000:8:w (gdb, debug register)"), std::string::npos);
  absl::StatusOr<Client::Reply> second = c->Call("session_debug", {{"id", id}});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(),
            "session " + std::to_string(id) + " has its debug channel already");
  ::kill(debugger, SIGKILL);
  ::waitpid(debugger, nullptr, 0);
  reap_debugger.pid = -1;
  // The helper's word travels asynchronously: the next requests see it.
  absl::StatusOr<Client::Reply> again = absl::UnavailableError("not tried");
  for (int i = 0; i < 100; ++i) {
    again = c->Call("session_debug", {{"id", id}});
    if (again.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->fds.size(), 1u);
  EXPECT_EQ(resources().find("(gdb, debug register)"), std::string::npos) << resources();
  EXPECT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
}

// The attach workflow carries the maps too: `snapshot -o` of a history and a
// `stream` whose session is killed mid-way both name the loop's function.
TEST_F(HostE2e, SnapshotAndKilledStreamFilesCarryTheMaps) {
  const std::string addr = dir_ + "/spin_addr";
  const std::string loop = testing::Runfile("kernel/drivers/ptrace/testdata_loop_bin");
  const pid_t child = fork();
  if (child == 0) {
    execl(loop.c_str(), loop.c_str(), "1000000000000", addr.c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; i < 300 && access(addr.c_str(), F_OK) != 0; ++i) usleep(20000);
  ASSERT_EQ(access(addr.c_str(), F_OK), 0);
  const std::string pid = std::to_string(child);
  const uint64_t d_id = testing::Num(PfmctlJson(socket(), {"--json", "session", "create",
                                                           "--pid", pid, "--bts", "history",
                                                           "--buffer", "4KiB"})
                                         .at("id"));
  const uint64_t p_id = testing::Num(PfmctlJson(socket(), {"--json", "session", "create",
                                                           "--pid", pid, "--bts", "lossless"})
                                         .at("id"));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto names_spin = [&](const std::string& file) {
    json::value rep = Report(file);
    for (const json::value& h : rep.at("hot_functions").as_array())
      if (h.at("function").as_string() == "spin") return true;
    ADD_FAILURE() << file << ": " << json::serialize(rep.at("hot_functions"));
    return false;
  };
  const std::string snap = dir_ + "/snap.trace";
  ASSERT_EQ(Pfmctl(socket(), {"snapshot", std::to_string(d_id), "-o", snap}).exit_code, 0);
  EXPECT_TRUE(names_spin(snap));

  const std::string file = dir_ + "/killed.trace";
  testing::Result sr;
  std::thread reader([&] { sr = Pfmctl(socket(), {"stream", std::to_string(p_id), "-o", file}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(p_id)}).exit_code, 0);
  reader.join();
  EXPECT_EQ(sr.exit_code, 0) << sr.err;
  EXPECT_TRUE(names_spin(file));
  // The stream's header names the task (perf's COMM in an export).
  const json::value header = Report(file).at("header");
  EXPECT_EQ(header.at("command").as_string(), "testdata_loop_b");  // comm: 15 bytes
  EXPECT_EQ(Num(header.at("pid")), static_cast<uint64_t>(child));
  EXPECT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(d_id)}).exit_code, 0);
  ::kill(child, SIGKILL);
  int ws;
  ::waitpid(child, &ws, 0);
}

TEST_F(HostE2e, FifthBreakpointIsRefusedByTheArbiterBeforeTheKernel) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  std::vector<std::string> f = {"--json", "session", "create", "--role", "debugger",
                                "--pid", std::to_string(child)};
  for (int i = 0; i < 4; ++i) {
    f.push_back("--breakpoint");
    f.push_back("0x4010" + std::to_string(i) + "0:8:w");
  }
  testing::Result ok = Pfmctl(socket(), f);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  testing::Result r = Pfmctl(socket(), {"session", "create", "--role", "debugger", "--pid",
                                        std::to_string(child), "--breakpoint", "0x402000:8:w"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("RESOURCE_EXHAUSTED: debug registers"), std::string::npos) << r.err;
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

}  // namespace
}  // namespace pfm
