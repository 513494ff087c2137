// End to end, issue 7: faults while a trace streams. Each test kills one
// party (the streaming client, the traced process, or pfmd itself) and
// checks what the others are left with: a healthy daemon, a complete trace
// file, or a file that is readable and says it was cut short.
//
// Waits are bounded polls on work done (file contents, process exit), never
// assertions on elapsed time.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "pfm/trace_file.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Daemon;
using testing::Num;
using testing::Pfmctl;
using testing::PfmctlJson;
using testing::ReadFile;

// Polls `done` every 20 ms, at most `tries` times.
bool WaitFor(const std::function<bool()>& done, int tries = 1500) {
  for (int i = 0; i < tries; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// `pfmctl --socket S stream ID -o FILE` running in the background, stdout
// and stderr to files next to FILE.
class StreamProc {
 public:
  StreamProc(const std::string& socket, uint64_t id, const std::string& file)
      : err_(file + ".err") {
    const std::vector<std::string> argv = {testing::PfmctlPath(), "--socket", socket,
                                           "stream", std::to_string(id), "-o", file};
    pid_ = ::fork();
    if (pid_ == 0) {
      const int out = ::open((file + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(out, 1);
      ::dup2(err, 2);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~StreamProc() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Exit code (128 + signal), or -1 if it has not exited after the polls;
  // *signaled: whether it died of a signal.
  int Wait(int tries = 1500, bool* signaled = nullptr) {
    int status = 0;
    if (!WaitFor([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, tries))
      return -1;
    pid_ = -1;
    if (signaled != nullptr) *signaled = WIFSIGNALED(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void Kill(int sig = SIGKILL) { ::kill(pid_, sig); }
  bool Running() const {
    int status = 0;
    return pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == 0;
  }
  std::string Err() const { return ReadFile(err_); }

 private:
  std::string err_;
  pid_t pid_ = -1;
};

// Records the stream has flushed to `file` so far (0 while it has none).
size_t FlushedRecords(const std::string& file) {
  absl::StatusOr<Trace> t = ReadTrace(file);
  return t.ok() ? t->records.size() : 0;
}

size_t CountType(const Trace& t, uint32_t type) {
  size_t n = 0;
  for (const pfm_record& r : t.records) n += r.type == type;
  return n;
}

class SimFault : public testing::DaemonTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartSim({"--sim-pmu", "skl", "--sim-cpus", "2", "--sim-tasks",
                                      "4", "--sim-seed", "11", "--sim-paused"}));
    dir_ = testing::MakeTempDir("fault");
  }
  uint64_t CreateLossless(int pid) {
    return Create({"--pid", std::to_string(pid), "--bts", "lossless", "--buffer", "16MiB"});
  }
  void SimRun(uint64_t ns) {
    testing::Result r = Pfmctl(socket(), {"sim", "run", std::to_string(ns)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  uint64_t BtsUser(int pid) {
    json::value v = PfmctlJson(socket(), {"sim", "stats", std::to_string(pid)});
    return Num(v.at("tasks").as_array().at(0).at("bts_user"));
  }
  std::string dir_;
};

TEST_F(SimFault, ClientKilledMidStreamLeavesDaemonServingAndSessionKillable) {
  const uint64_t id = CreateLossless(1000);
  const std::string file = dir_ + "/killed.trace";
  StreamProc s(socket(), id, file);
  SimRun(20000000);
  ASSERT_TRUE(WaitFor([&] { return FlushedRecords(file) > 0; })) << s.Err();
  s.Kill();
  EXPECT_EQ(s.Wait(), 128 + SIGKILL);
  // What the killed client flushed stays readable; without a trailer.
  absl::StatusOr<Trace> t = ReadTrace(file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->complete);
  EXPECT_GT(t->records.size(), 0u);
  // The daemon still serves; the detached session outlives its reader, keeps
  // collecting, and a new reader can take over the ring.
  json::value show = PfmctlJson(socket(), {"session", "show", std::to_string(id)});
  EXPECT_EQ(Num(show.at("id")), id);
  SimRun(5000000);
  json::value snap = PfmctlJson(socket(), {"snapshot", std::to_string(id)});
  EXPECT_GT(snap.at("records").as_array().size(), 0u);
  EXPECT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
  json::value st = PfmctlJson(socket(), {"status"});
  EXPECT_EQ(Num(st.at("sessions")), 0u);
  EXPECT_TRUE(st.at("memory").at("charged").as_array().empty());
  EXPECT_EQ(d_->Stop(), 0);
}

// SIGINT, SIGTERM and SIGHUP (a closed terminal) end a stream cleanly:
// the file gets its trailer ("interrupted": true) and the session summary,
// then pfmctl dies of the signal, as perf record does, so a shell script
// running it stops as for any ^C'd program.
TEST_F(SimFault, AStreamEndedByASignalFinishesItsFileThenDiesOfIt) {
  int pid = 1001;  // the sim's tasks are 1000..1003
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    const uint64_t id = CreateLossless(pid++);
    const std::string file = dir_ + "/sig" + std::to_string(sig) + ".trace";
    StreamProc s(socket(), id, file);
    SimRun(5000000);
    ASSERT_TRUE(WaitFor([&] { return FlushedRecords(file) > 0; })) << s.Err();
    s.Kill(sig);
    bool signaled = false;
    EXPECT_EQ(s.Wait(1500, &signaled), 128 + sig) << s.Err();
    EXPECT_TRUE(signaled) << "pfmctl exited instead of dying of the signal";
    absl::StatusOr<Trace> t = ReadTrace(file);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(t->complete) << t->cut_reason;
    EXPECT_TRUE(t->trailer.at("interrupted").as_bool());
    EXPECT_GT(t->records.size(), 0u);
    EXPECT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
  }
}

TEST_F(SimFault, PfmdSigtermWhileStreamingLeavesACompleteFileWithEveryBranch) {
  const uint64_t id = CreateLossless(1001);
  const std::string file = dir_ + "/term.trace";
  StreamProc s(socket(), id, file);
  SimRun(20000000);
  ASSERT_TRUE(WaitFor([&] { return FlushedRecords(file) > 0; })) << s.Err();
  // The sim is paused: nothing is stored after this count.
  const uint64_t stored = BtsUser(1001);
  ASSERT_GT(stored, 1000u);
  EXPECT_EQ(d_->Stop(), 0);
  ASSERT_EQ(s.Wait(), 0) << s.Err();
  absl::StatusOr<Trace> t = ReadTrace(file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete) << t->cut_reason;
  // pfmd ends the rings as it exits, after draining: nothing is lost.
  EXPECT_EQ(CountType(*t, PFM_REC_BRANCH), stored);
  EXPECT_TRUE(t->trailer.at("ended").as_bool());
  EXPECT_TRUE(t->trailer.at("daemon_exited").as_bool());
  EXPECT_EQ(Num(t->trailer.at("lost")), 0u);
  // report needs no daemon; it reads the file as complete.
  json::value rep = PfmctlJson(socket(), {"report", file});
  EXPECT_TRUE(rep.at("complete").as_bool());
  EXPECT_EQ(Num(rep.at("summary").at("by_type").at("branch")), stored);
}

TEST_F(SimFault, PfmdSigkillWhileStreamingEndsTheStreamAndReportSaysCutShort) {
  const uint64_t id = CreateLossless(1002);
  const std::string file = dir_ + "/kill.trace";
  StreamProc s(socket(), id, file);
  SimRun(20000000);
  ASSERT_TRUE(WaitFor([&] { return FlushedRecords(file) > 0; })) << s.Err();
  const size_t flushed = FlushedRecords(file);
  ASSERT_EQ(::kill(d_->pid(), SIGKILL), 0);
  // Before the fix this stream polled the orphaned ring forever.
  const int code = s.Wait();
  ASSERT_NE(code, -1) << "pfmctl stream did not notice pfmd was killed";
  EXPECT_EQ(code, 1);
  EXPECT_NE(s.Err().find("cut short"), std::string::npos) << s.Err();
  EXPECT_EQ(d_->Stop(), 128 + SIGKILL);
  absl::StatusOr<Trace> t = ReadTrace(file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->complete);
  EXPECT_GE(t->records.size(), flushed);
  testing::Result human = Pfmctl(socket(), {"report", file});
  EXPECT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("cut short"), std::string::npos) << human.out;
  json::value rep = PfmctlJson(socket(), {"report", file});
  EXPECT_FALSE(rep.at("complete").as_bool());
  EXPECT_EQ(Num(rep.at("summary").at("records")), t->records.size());
}

TEST(HostFault, TracedProcessKilledMidTraceEndsTheStreamWithAnExitRecord) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: ptrace on any process";
  Daemon d({"--driver", "host"});
  ASSERT_TRUE(d.started());
  const std::string dir = testing::MakeTempDir("fault-host");
  pid_t child = ::fork();
  if (child == 0) {
    for (;;) {
      for (volatile int i = 0; i < 200; ++i) {
      }
    }
  }
  testing::Result c = Pfmctl(d.socket(), {"--json", "session", "create", "--pid",
                                          std::to_string(child), "--bts", "lossless",
                                          "--buffer", "16MiB"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const uint64_t id = Num(json::parse(c.out).at("id"));
  const std::string file = dir + "/victim.trace";
  StreamProc s(d.socket(), id, file);
  const bool flowing = WaitFor([&] { return FlushedRecords(file) > 1000; });
  ::kill(child, SIGKILL);
  int ws = 0;
  ::waitpid(child, &ws, 0);
  ASSERT_TRUE(flowing) << s.Err();
  // The ring ends with the task: the stream finishes on its own.
  ASSERT_EQ(s.Wait(), 0) << s.Err();
  absl::StatusOr<Trace> t = ReadTrace(file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete) << t->cut_reason;
  EXPECT_GT(CountType(*t, PFM_REC_BRANCH), 1000u);
  ASSERT_FALSE(t->records.empty());
  EXPECT_EQ(t->records.back().type, static_cast<uint32_t>(PFM_REC_EXIT));
  EXPECT_EQ(CountType(*t, PFM_REC_EXIT), 1u);
  EXPECT_EQ(t->records.back().pid, static_cast<uint32_t>(child));
  // The daemon is unharmed and the exited session can be killed.
  EXPECT_EQ(Pfmctl(d.socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
  json::value st = PfmctlJson(d.socket(), {"status"});
  EXPECT_EQ(Num(st.at("sessions")), 0u);
  EXPECT_TRUE(st.at("memory").at("charged").as_array().empty());
}

}  // namespace
}  // namespace pfm
