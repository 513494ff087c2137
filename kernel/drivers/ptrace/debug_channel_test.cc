// The debug channel against a real tracer on a real process
// (testdata/loop.c): the client's encodings reach SoftBtsTracer's debug
// calls, malformed requests are refused with -EINVAL and change nothing,
// a continue of one named thread (scheduler locking) runs it, and
// interrupt, step, kill and detach report what they should. pfmctl
// gdbserver and GDB on top are tests/gdb_e2e_test's.
#include "kernel/drivers/ptrace/debug_channel.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernel/drivers/ptrace/soft_bts.h"
#include "kernel/drivers/ptrace/tracer_protocol.h"

namespace pfm {
namespace {

using debug_channel::Client;

std::string TestProgram(const std::string& name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  std::string base = srcdir != nullptr ? srcdir : ".";
  return base + "/" + (ws != nullptr ? ws : "pfm") + "/kernel/drivers/ptrace/" + name;
}

std::string TmpPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

// A core that keeps one DS area per task and drops what is handed over:
// this test is about run control, not records.
class NullCore : public CoreHooks {
 public:
  DsArea* TaskArea(TaskId task) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto& a = areas_[task.tid];
    if (a == nullptr) a = std::make_unique<DsArea>(0, 4096, 4096, 1, 1);
    return a.get();
  }
  void TaskDsInterrupt(TaskId task, int, uint64_t) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (DsArea* a = areas_[task.tid].get()) a->ResetBts();
  }
  bool TaskHeld(TaskId) override { return false; }
  void ContextSwitch(int, uint64_t, TaskId, TaskId, bool) override {}
  void TaskCreated(TaskId, TaskId, uint64_t) override {}
  void TaskExec(TaskId, uint64_t) override {}
  void TaskExit(TaskId, uint64_t, int64_t) override {}
  DsArea* Area(int) override { return nullptr; }
  void DsInterrupt(int, uint64_t) override {}
  TraceConfig TaskConfig(int, TaskId) override { return TraceConfig{}; }
  int ScheduledCounters(int, ScheduledCounter*, int) override { return 0; }
  void AddCount(uint32_t, uint64_t) override {}
  void Tick(int, uint64_t) override {}

 private:
  std::mutex mu_;
  std::map<int32_t, std::unique_ptr<DsArea>> areas_;
};

template <typename T>
void Put(std::string* p, const T& v) {
  p->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

class DebugChannelTest : public ::testing::Test {
 protected:
  // `loop 1000000000 OUT` under a tracer, debug control on (stopped at its
  // exec), its channel served on a thread.
  void SetUp() override {
    out_ = TmpPath("loop.out");
    ::unlink(out_.c_str());
    ErrorDetail d;
    ASSERT_EQ(SpawnStopped({TestProgram("testdata_loop_bin"), "1000000000", out_}, &pid_, &d),
              0)
        << d.message;
    ASSERT_EQ(SoftBtsTracer::Start(pid_, SoftBtsOptions(), &core_, &tracer_, &d), 0)
        << d.message;
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    serve_ = std::thread([this, fd = sv[0]] {
      debug_channel::Serve(fd, tracer_.get(), pid_);
      ::close(fd);
    });
    client_ = std::make_unique<Client>(UniqueFd(sv[1]));
    ASSERT_EQ(client_->Enable(/*stop_at_exec=*/true, /*kill_on_close=*/true), 0);
    ASSERT_EQ(Release(pid_, &d), 0) << d.message;
    DebugStopEvent e;
    ASSERT_TRUE(WaitStop(&e));
    EXPECT_EQ(e.kind, DebugStopEvent::kStopped);
    EXPECT_EQ(e.tid, pid_);
    EXPECT_EQ(e.signo, SIGTRAP);
  }
  void TearDown() override {
    if (client_ != nullptr) {
      (void)client_->Kill();
      ::shutdown(client_->fd(), SHUT_RDWR);
    }
    if (serve_.joinable()) serve_.join();
    if (tracer_ != nullptr) tracer_->Stop();
  }

  bool WaitStop(DebugStopEvent* e, int ms = 30000) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!client_->PopStop(e)) {
      if (std::chrono::steady_clock::now() > until) return false;
      pollfd p{client_->fd(), POLLIN, 0};
      ::poll(&p, 1, 50);
      if (!client_->Pump() && !client_->has_stops()) return false;
    }
    return true;
  }
  // A request framed by hand: the reply's rc. Only while the process is
  // stopped (no stop event can come in between).
  int32_t Raw(uint32_t type, const std::string& payload) {
    const std::string f = tracer_protocol::Frame(type, payload.data(),
                                                 static_cast<uint32_t>(payload.size()));
    EXPECT_TRUE(tracer_protocol::WriteAll(client_->fd(), f.data(), f.size(), true));
    tracer_protocol::MsgHeader h;
    EXPECT_TRUE(tracer_protocol::ReadAll(client_->fd(), &h, sizeof(h)));
    EXPECT_EQ(h.type, debug_channel::kReply);
    std::string body(h.len, '\0');
    EXPECT_TRUE(tracer_protocol::ReadAll(client_->fd(), body.data(), h.len));
    int32_t rc = 1;
    if (body.size() >= sizeof(rc)) std::memcpy(&rc, body.data(), sizeof(rc));
    return rc;
  }
  static std::string ResumeFrame(uint8_t cont_others, uint32_t nstep, uint32_t nsig,
                                 uint32_t ncont, const std::vector<int32_t>& rest) {
    std::string p;
    Put(&p, cont_others);
    const uint8_t pad[3] = {};
    Put(&p, pad);
    Put(&p, nstep);
    Put(&p, nsig);
    Put(&p, ncont);
    for (int32_t v : rest) Put(&p, v);
    return p;
  }
  uint64_t Rip() {
    DebugRegs r;
    EXPECT_EQ(client_->GetRegs(pid_, &r), 0);
    return r.regs.rip;
  }

  std::string out_;
  pid_t pid_ = 0;
  NullCore core_;
  std::unique_ptr<SoftBtsTracer> tracer_;
  std::thread serve_;
  std::unique_ptr<Client> client_;
};

TEST_F(DebugChannelTest, MalformedRequestsAreRefusedAndChangeNothing) {
  const uint64_t rip = Rip();
  using namespace debug_channel;  // NOLINT: the message types
  EXPECT_EQ(Raw(kResume, "\x01\x00"), -EINVAL);                           // truncated
  EXPECT_EQ(Raw(kResume, ResumeFrame(1, kMaxThreads + 1, 0, 0, {})), -EINVAL);  // too many
  EXPECT_EQ(Raw(kResume, ResumeFrame(0, 0, 0, kMaxThreads + 1, {})), -EINVAL);
  EXPECT_EQ(Raw(kResume, ResumeFrame(0, 0, 0, 1, {})), -EINVAL);          // cont tid missing
  EXPECT_EQ(Raw(kResume, ResumeFrame(0, 0, 1, 0, {pid_, 99})), -EINVAL);  // no signal 99
  EXPECT_EQ(Raw(kResume, ResumeFrame(0, 1, 0, 0, {1})), -ESRCH);          // pid 1 not ours
  EXPECT_EQ(Raw(kResume, ResumeFrame(0, 0, 0, 1, {1})), -ESRCH);
  std::string rd;
  Put(&rd, uint64_t{0x400000});
  Put(&rd, uint32_t{kMaxMemBytes + 1});
  EXPECT_EQ(Raw(kReadMem, rd), -EINVAL);
  std::string regs;
  Put(&regs, int32_t{1});
  EXPECT_EQ(Raw(kGetRegs, regs), -ESRCH);
  EXPECT_EQ(Raw(kSetRegs, regs), -EINVAL);  // no registers after the tid
  EXPECT_EQ(Raw(77, ""), -ENOSYS);

  // Nothing moved and nothing was reported.
  EXPECT_EQ(Rip(), rip);
  DebugStopEvent e;
  EXPECT_FALSE(WaitStop(&e, 300));
  // The channel still serves: a step of the named thread.
  DebugResumeSpec step;
  step.continue_others = false;
  step.step.push_back(pid_);
  ASSERT_EQ(client_->Resume(step), 0);
  ASSERT_TRUE(WaitStop(&e));
  EXPECT_EQ(e.kind, DebugStopEvent::kStopped);
  EXPECT_EQ(e.tid, pid_);
  EXPECT_NE(Rip(), rip);
}

// A continue that names the thread (GDB's vCont;c:TID under scheduler
// locking) runs it; an interrupt stops it; kill reports the end.
TEST_F(DebugChannelTest, ContinueOfANamedThreadInterruptAndKill) {
  DebugResumeSpec cont;
  cont.continue_others = false;
  cont.cont.push_back(pid_);
  ASSERT_EQ(client_->Resume(cont), 0);
  // The program runs: it writes spin's address, then spins.
  uint64_t spin = 0;
  for (int i = 0; i < 600 && spin == 0; ++i) {
    std::ifstream in(out_);
    in >> std::hex >> spin;
    if (spin == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(spin, 0u) << "the continued thread did not run";
  ASSERT_EQ(client_->Interrupt(), 0);
  DebugStopEvent e;
  ASSERT_TRUE(WaitStop(&e));
  EXPECT_EQ(e.kind, DebugStopEvent::kStopped);
  EXPECT_EQ(e.signo, SIGINT);
  std::string code;
  EXPECT_EQ(client_->ReadMemory(spin, 16, &code), 0);
  EXPECT_EQ(code.size(), 16u);
  std::vector<pid_t> threads;
  ASSERT_EQ(client_->Threads(&threads), 0);
  ASSERT_EQ(threads, std::vector<pid_t>{pid_});

  ASSERT_EQ(client_->Kill(), 0);
  ASSERT_TRUE(WaitStop(&e));
  EXPECT_EQ(e.kind, DebugStopEvent::kKilled);
  EXPECT_EQ(e.signo, SIGKILL);
}

// Detach: debug control ends, the process runs on (soft BTS keeps
// tracing it) and no event comes any more.
TEST_F(DebugChannelTest, DetachLetsTheProcessRunOn) {
  ASSERT_EQ(client_->Detach(), 0);
  uint64_t spin = 0;
  for (int i = 0; i < 600 && spin == 0; ++i) {
    std::ifstream in(out_);
    in >> std::hex >> spin;
    if (spin == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(spin, 0u) << "the detached process did not run";
  DebugStopEvent e;
  EXPECT_FALSE(WaitStop(&e, 300));
  EXPECT_EQ(::kill(pid_, 0), 0);
  ::kill(pid_, SIGKILL);
}

}  // namespace
}  // namespace pfm
