// Over 600 lines, on purpose: the stub is one state machine (ack mode,
// selected threads, running or stopped, btrace readers) whose packet
// handlers share that state; framing, parsing, registers and the btrace
// documents live apart in userspace/gdbstub.
#include "userspace/pfmctl/gdbserver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kernel/drivers/ptrace/debug_channel.h"
#include "kernel/drivers/ptrace/soft_bts.h"
#include "pfm/client.h"
#include "pfm/ring_reader.h"
#include "pfm/session_spec.h"
#include "userspace/gdbstub/amd64_regs.h"
#include "userspace/gdbstub/btrace_xml.h"
#include "userspace/gdbstub/rsp.h"
#include "userspace/pfmctl/capture.h"
#include "userspace/pfmctl/connect.h"
#include "userspace/pfmctl/flags.h"
#include "userspace/pfmctl/reply.h"

namespace pfm {
namespace {

namespace json = boost::json;
using gdbstub::Request;

// Our PacketSize (hex in qSupported): GDB sends at most this many bytes of
// payload; memory replies stay under it too.
constexpr size_t kPacketSize = 0x4000;
// How long the first stop (attach, or the launched program's exec) may take.
constexpr std::chrono::seconds kFirstStopWait{30};
// How long a kill waits for the process's end to be reported.
constexpr std::chrono::seconds kKillWait{5};
// GDB's default `record btrace bts` buffer (gdb/record-btrace.c: 64 KiB).
constexpr uint64_t kDefaultBtsBytes = 64 * 1024;
constexpr size_t kMaxBtraceThreads = 64;

// Linux signal numbers to GDB's (include/gdb/signals.def: the remote
// protocol's numbering), and back. 0 where GDB has none.
int ToGdbSignal(int sig) {
  static const int kMap[32] = {0,  1,  2,  3,  4,  5,  6,  10, 8,  9,  30,
                               11, 31, 13, 14, 15, 0,  20, 19, 17, 18, 21,
                               22, 16, 24, 25, 26, 27, 28, 23, 32, 12};
  if (sig >= 0 && sig < 32) return kMap[sig];
  if (sig == 32) return 77;             // GDB_SIGNAL_REALTIME_32
  if (sig == 33) return 45;             // GDB_SIGNAL_REALTIME_33
  if (sig >= 34 && sig <= 63) return 46 + (sig - 34);  // REALTIME_34..63
  if (sig == 64) return 78;             // GDB_SIGNAL_REALTIME_64
  return 0;
}
int FromGdbSignal(int g) {
  for (int s = 1; s <= 64; ++s)
    if (ToGdbSignal(s) == g) return s;
  return 0;
}

std::string Hex8(uint64_t v) { return absl::StrFormat("%x", v); }

class Stub {
 public:
  Stub(Client* pfmd, debug_channel::Client* ch, pid_t pid, bool attached,
       int in, int out, std::ostream* err)
      : pfmd_(pfmd), ch_(ch), pid_(pid), attached_(attached), in_(in), out_(out),
        err_(err), reader_(kPacketSize) {}

  // Waits for the first stop (attach or exec) before GDB is answered.
  absl::Status WaitFirstStop();
  // Serves GDB until it detaches, kills or goes away. The exit status.
  int Serve();
  // Sessions the stub made for btrace end with it (the connection does that
  // too; this keeps pfmd's view exact while the command runs on).
  void EndBtraceSessions();
  // The debugger session: hardware points are its pinned requests.
  void set_session(uint64_t id) { session_ = id; }
  void SetConnection(int in, int out) {
    in_ = in;
    out_ = out;
  }

 private:
  struct Btrace {
    uint64_t session = 0;
    uint64_t bytes = 0;
    std::optional<RingReader> ring;
    // The newest branch GDB has been given (to find where "delta" starts).
    bool have_last = false;
    pfm_record last{};
    std::string cached;  // a read being served in chunks
  };

  void Send(std::string_view payload);
  void Handle(const std::string& payload);
  std::string StopReply(const DebugStopEvent& e) const;
  pid_t GThread() const { return g_thread_ > 0 ? g_thread_ : last_stop_.tid; }
  pid_t CThread() const { return c_thread_ > 0 ? c_thread_ : 0; }
  std::vector<pid_t> Threads();
  std::string ReadRegisters(pid_t tid, bool* ok);
  std::string HandleWriteRegs(const Request& r);
  std::string HandleMemoryRead(const Request& r);
  std::string HandleMemoryWrite(const Request& r);
  // Resumes; no reply until the process stops (false: refused, *reply says why).
  bool Resume(const DebugResumeSpec& spec, std::string* reply);
  std::string HandleVCont(const Request& r);
  std::string HandleXfer(const Request& r);
  std::string HandleBtrace(const Request& r);
  // Z1/Z2/Z4 and z: a debug register, admitted by pfmd's arbiter as a
  // pinned request of the session, then armed by the tracer.
  std::string HandleHwPoint(const Request& r);
  std::string BtraceRead(pid_t tid, gdbstub::BtraceRead how, bool* error);
  // Waits (bounded) for the process's end after a kill.
  void AwaitExit();
  void OnStop(const DebugStopEvent& e);

  Client* pfmd_;
  debug_channel::Client* ch_;
  const pid_t pid_;
  const bool attached_;
  int in_, out_;
  std::ostream* err_;
  gdbstub::PacketReader reader_;
  bool ack_ = true;
  bool swbreak_ = false;
  bool hwbreak_ = false;
  uint64_t session_ = 0;
  std::string last_sent_;
  pid_t g_thread_ = 0, c_thread_ = 0;
  bool running_ = false;
  bool exited_ = false;
  bool done_ = false;
  int exit_code_ = 0;
  DebugStopEvent last_stop_;
  std::vector<pid_t> thread_list_;
  size_t thread_cursor_ = 0;
  uint64_t bts_bytes_ = kDefaultBtsBytes;
  std::map<pid_t, Btrace> btrace_;
  // PFMCTL_GDB_TRACE=1: every packet and stop on stderr (docs/gdb.md).
  const bool trace_ = [] {
    const char* v = std::getenv("PFMCTL_GDB_TRACE");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
};

void Stub::Send(std::string_view payload) {
  if (trace_) *err_ << "gdbserver: -> " << payload.substr(0, 200) << "\n";
  last_sent_ = gdbstub::EncodePacket(payload);
  size_t off = 0;
  while (off < last_sent_.size()) {
    const ssize_t n = ::write(out_, last_sent_.data() + off, last_sent_.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      done_ = true;  // GDB is gone
      return;
    }
    off += static_cast<size_t>(n);
  }
}

std::string Stub::HandleHwPoint(const Request& r) {
  const bool insert = r.kind == Request::kInsertBreak;
  const int kind = r.break_type;
  if (kind != kDebugHwExec && r.break_kind > 8) return "E.pfm.a watchpoint is at most 8 bytes";
  const uint32_t len = kind == kDebugHwExec ? 1 : static_cast<uint32_t>(r.break_kind);
  const char* access = kind == kDebugHwExec ? "x" : kind == kDebugHwWrite ? "w" : "rw";
  const char* what = kind == kDebugHwExec ? "hardware breakpoint" : "hardware watchpoint";
  const boost::json::object req{{"id", session_}, {"insert", insert}, {"access", access},
                                {"addr", r.addr}, {"len", len}};
  boost::json::object remove = req;
  remove["insert"] = false;
  // GDB prints the text after the second '.' of a Z1 error ("Remote
  // failure reply: ..."); for watchpoints it says only that it could not
  // insert one, so the reason goes to our stderr (GDB's terminal) too.
  auto refuse = [&](const std::string& why) {
    *err_ << "pfmctl gdbserver: " << what << " at 0x" << Hex8(r.addr) << ": " << why << "\n";
    return absl::StrCat("E.pfm.", why);
  };
  if (!insert) {
    std::string why;
    ch_->HwPoint(kind, r.addr, len, false, &why);
    (void)pfmd_->Call("session_breakpoint", remove);
    return "OK";
  }
  absl::StatusOr<Client::Reply> a = pfmd_->Call("session_breakpoint", req);
  if (!a.ok()) return refuse(std::string(a.status().message()));
  std::string why;
  if (const int rc = ch_->HwPoint(kind, r.addr, len, true, &why); rc < 0) {
    (void)pfmd_->Call("session_breakpoint", remove);
    return refuse(why.empty() ? std::strerror(-rc) : why);
  }
  return "OK";
}

std::string Stub::StopReply(const DebugStopEvent& e) const {
  if (e.kind == DebugStopEvent::kExited) return absl::StrFormat("W%02x", e.exit_code & 0xff);
  if (e.kind == DebugStopEvent::kKilled) return absl::StrFormat("X%02x", ToGdbSignal(e.signo));
  std::string r = absl::StrFormat("T%02xthread:%s;", ToGdbSignal(e.signo), Hex8(e.tid));
  if (e.swbreak && swbreak_) r += "swbreak:;";
  if (e.hw_kind == kDebugHwWrite) r += absl::StrCat("watch:", Hex8(e.hw_addr), ";");
  if (e.hw_kind == kDebugHwAccess) r += absl::StrCat("awatch:", Hex8(e.hw_addr), ";");
  if (e.hw_kind == kDebugHwExec && hwbreak_) r += "hwbreak:;";
  return r;
}

void Stub::OnStop(const DebugStopEvent& e) {
  if (trace_)
    *err_ << "gdbserver: stop kind " << e.kind << " tid " << e.tid << " sig " << e.signo
          << (e.swbreak ? " swbreak" : "") << " hw " << e.hw_kind << (running_ ? "" : " (not running)") << "\n";
  last_stop_ = e;
  if (e.kind != DebugStopEvent::kStopped) {
    exited_ = true;
    exit_code_ = e.kind == DebugStopEvent::kExited ? e.exit_code : 128 + e.signo;
    return;
  }
  // As gdbserver does in all-stop mode, a stop reply makes the thread
  // that stopped the general thread: GDB records it as such and does not
  // send Hg again before reading its registers.
  g_thread_ = e.tid;
  if (e.swbreak && !swbreak_) {
    // Without swbreak GDB expects the PC past the int3 it thinks it
    // planted, and moves it back itself (decr_pc_after_break).
    DebugRegs regs;
    if (ch_->GetRegs(e.tid, &regs) == 0) {
      regs.regs.rip += 1;
      ch_->SetRegs(e.tid, regs);
    }
  }
}

absl::Status Stub::WaitFirstStop() {
  const auto until = std::chrono::steady_clock::now() + kFirstStopWait;
  for (;;) {
    DebugStopEvent e;
    if (ch_->PopStop(&e)) {
      OnStop(e);
      if (exited_)
        return absl::FailedPreconditionError(absl::StrCat(
            "pid ", pid_, " ended before it could be stopped (",
            e.kind == DebugStopEvent::kExited ? "exit " : "signal ",
            e.kind == DebugStopEvent::kExited ? e.exit_code : e.signo, ")"));
      return absl::OkStatus();
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return absl::DeadlineExceededError(
          absl::StrCat("pid ", pid_, " did not stop within ", kFirstStopWait.count(), " s"));
    pollfd p = {ch_->fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
    // A stop that came with the close is taken at the top of the loop.
    if (!ch_->Pump() && ch_->closed()) {
      if (ch_->PopStop(&e)) {
        OnStop(e);
        if (!exited_) return absl::OkStatus();
      }
      return absl::UnavailableError(
          absl::StrCat("the tracer of pid ", pid_, " closed the debug channel"));
    }
  }
}

std::vector<pid_t> Stub::Threads() {
  std::vector<pid_t> t;
  if (ch_->Threads(&t) != 0) t.clear();
  return t;
}

std::string Stub::ReadRegisters(pid_t tid, bool* ok) {
  DebugRegs r;
  *ok = ch_->GetRegs(tid, &r) == 0;
  if (!*ok) return "";
  return gdbstub::EncodeAmd64(r.regs, r.fp);
}

std::string Stub::HandleWriteRegs(const Request& r) {
  const pid_t tid = GThread();
  DebugRegs regs;
  if (ch_->GetRegs(tid, &regs) != 0) return "E01";
  if (r.kind == Request::kWriteRegs) {
    if (!gdbstub::DecodeAmd64(r.bytes, &regs.regs, &regs.fp)) return "E.expected 560 bytes of registers";
  } else {
    size_t off = 0, size = 0;
    if (!gdbstub::RegisterSlice(r.regno, &off, &size) || r.bytes.size() != size)
      return "E.no such register or wrong size";
    std::string raw = gdbstub::EncodeAmd64(regs.regs, regs.fp);
    raw.replace(off, size, r.bytes);
    if (!gdbstub::DecodeAmd64(raw, &regs.regs, &regs.fp)) return "E01";
  }
  return ch_->SetRegs(tid, regs) == 0 ? "OK" : "E01";
}

std::string Stub::HandleMemoryRead(const Request& r) {
  const uint64_t len = std::min<uint64_t>({r.length, (kPacketSize - 8) / 2,
                                           debug_channel::kMaxMemBytes});
  std::string bytes;
  if (ch_->ReadMemory(r.addr, static_cast<uint32_t>(len), &bytes) != 0 ||
      (bytes.empty() && len != 0))
    return "E14";  // EFAULT, as gdbserver answers an unreadable address
  return gdbstub::ToHex(bytes.data(), bytes.size());
}

std::string Stub::HandleMemoryWrite(const Request& r) {
  if (r.bytes.empty()) return "OK";
  if (r.bytes.size() > debug_channel::kMaxMemBytes) return "E.write too large";
  return ch_->WriteMemory(r.addr, r.bytes) == 0 ? "OK" : "E14";
}

bool Stub::Resume(const DebugResumeSpec& spec, std::string* reply) {
  for (auto& [tid, b] : btrace_) b.cached.clear();
  const int rc = ch_->Resume(spec);
  if (rc != 0) {
    *reply = absl::StrCat("E.resume refused: ", std::strerror(-rc));
    return false;
  }
  running_ = true;
  return true;
}

std::string Stub::HandleVCont(const Request& r) {
  // Each thread takes the leftmost action that names it (or names none).
  const std::vector<pid_t> threads = Threads();
  DebugResumeSpec spec;
  spec.continue_others = false;
  for (pid_t tid : threads) {
    for (const gdbstub::VContAction& a : r.actions) {
      const bool match = !a.thread || a.thread->tid == gdbstub::ThreadId::kAll ||
                         a.thread->tid == tid ||
                         (a.thread->tid == gdbstub::ThreadId::kAny && tid == threads.front());
      if (!match) continue;
      if (a.action == 'r') return "E.range stepping is not supported";
      if (a.action == 's' || a.action == 'S') spec.step.push_back(tid);
      if (a.action == 'c' || a.action == 'C') {
        // `c` for all threads also covers any the list has not seen yet;
        // `c:TID` (scheduler locking) resumes that thread alone.
        if (!a.thread || a.thread->tid == gdbstub::ThreadId::kAll)
          spec.continue_others = true;
        else
          spec.cont.push_back(tid);
      }
      if ((a.action == 'C' || a.action == 'S') && a.signal != 0)
        spec.signals[tid] = FromGdbSignal(a.signal);
      break;  // 't' (stop) leaves it stopped: it is
    }
  }
  std::string reply;
  if (!Resume(spec, &reply)) return reply;
  return "";
}

std::string Stub::HandleXfer(const Request& r) {
  std::string whole;
  if (r.object == "auxv") {
    if (ch_->Auxv(&whole) != 0) return "E01";
  } else if (r.object == "btrace-conf") {
    auto it = btrace_.find(GThread());
    whole = gdbstub::BtraceConfXml(it == btrace_.end() ? 0 : it->second.bytes);
  } else if (r.object == "btrace") {
    gdbstub::BtraceRead how;
    if (!gdbstub::ParseBtraceRead(r.annex, &how)) return "E.unknown btrace read";
    auto it = btrace_.find(GThread());
    if (it == btrace_.end()) return "E.No trace.";
    if (r.offset == 0 || it->second.cached.empty()) {
      bool error = false;
      it->second.cached = BtraceRead(GThread(), how, &error);
      if (error) {
        std::string e = it->second.cached;
        it->second.cached.clear();
        return e;
      }
    }
    whole = it->second.cached;
  } else {
    return "";
  }
  std::string reply;
  const uint64_t len = std::min<uint64_t>(r.length, kPacketSize - 16);
  if (!gdbstub::XferSlice(whole, r.offset, len, &reply)) return "E.bad length";
  return reply;
}

std::string Stub::BtraceRead(pid_t tid, gdbstub::BtraceRead how, bool* error) {
  Btrace& b = btrace_[tid];
  std::vector<pfm_record> recs;
  if (!b.ring || !b.ring->Snapshot(&recs).ok()) {
    *error = true;
    return "E.the branch history cannot be read";
  }
  std::vector<pfm_record> mine;
  for (const pfm_record& r : recs)
    if (r.type == PFM_REC_BRANCH && static_cast<pid_t>(r.tid) == tid) mine.push_back(r);
  // Where the branches after the last read start.
  size_t from = 0;
  bool found = !b.have_last;
  if (b.have_last) {
    for (size_t i = mine.size(); i-- > 0;) {
      const pfm_record& r = mine[i];
      if (r.time == b.last.time && r.u.branch.from == b.last.u.branch.from &&
          r.u.branch.to == b.last.u.branch.to) {
        from = i + 1;
        found = true;
        break;
      }
    }
  }
  if (how == gdbstub::BtraceRead::kDelta && !found) {
    *error = true;  // the history ring wrapped since: GDB reads all again
    return "E.Overflow.";
  }
  if (how == gdbstub::BtraceRead::kNew && found && from == mine.size() && b.have_last)
    return gdbstub::EmptyBtraceXml();
  if (how != gdbstub::BtraceRead::kDelta) from = 0;
  DebugRegs regs;
  if (ch_->GetRegs(tid, &regs) != 0) {
    *error = true;
    return "E.the thread is not stopped";
  }
  std::vector<gdbstub::Branch> br;
  for (size_t i = from; i < mine.size(); ++i)
    br.push_back({mine[i].u.branch.from, mine[i].u.branch.to});
  if (!mine.empty()) {
    b.have_last = true;
    b.last = mine.back();
  }
  return gdbstub::BtsXml(br, regs.regs.rip, how);
}

std::string Stub::HandleBtrace(const Request& r) {
  const pid_t tid = GThread();
  if (r.kind == Request::kBtraceConfSize) {
    if (r.value == 0) return "E.size must be positive";
    bts_bytes_ = r.value;
    return "OK";
  }
  if (r.mode == "off") {
    auto it = btrace_.find(tid);
    if (it == btrace_.end()) return "E.Btrace not enabled.";
    if (it->second.session != 0) (void)pfmd_->Call("session_kill", {{"id", it->second.session}});
    btrace_.erase(it);
    return "OK";
  }
  if (r.mode != "bts")
    return absl::StrCat("E.", r.mode, " format is not supported: pfm traces branches as BTS");
  if (btrace_.count(tid)) return "E.Btrace already enabled.";
  if (btrace_.size() >= kMaxBtraceThreads) return "E.too many recorded threads";
  // A history consumer of the configured size on the process's branch
  // stream; this thread's records are picked out of it.
  SessionSpec spec;
  spec.role = "debugger";
  spec.pid = pid_;
  spec.bts = "history";
  spec.buffer_bytes = std::clamp<uint64_t>(bts_bytes_, kMinRingBytes, kMaxRingBytes);
  absl::StatusOr<Client::Reply> cr = pfmd_->Call("session_create", {{"spec", spec.ToJson()}});
  if (!cr.ok()) return absl::StrCat("E.", cr.status().message());
  ReplyReader created("session_create", cr->result);
  const uint64_t id = created.result().Member("id").Id();
  if (!created.ok()) return "E.bad reply from pfmd";
  absl::StatusOr<RingReader> ring = MapRing(*pfmd_, id, false, nullptr);
  if (!ring.ok()) {
    (void)pfmd_->Call("session_kill", {{"id", id}});
    return absl::StrCat("E.", ring.status().message());
  }
  Btrace& b = btrace_[tid];
  b.session = id;
  b.bytes = spec.buffer_bytes;
  b.ring.emplace(std::move(*ring));
  return "OK";
}

void Stub::EndBtraceSessions() {
  for (auto& [tid, b] : btrace_)
    if (b.session != 0) (void)pfmd_->Call("session_kill", {{"id", b.session}});
  btrace_.clear();
}

void Stub::AwaitExit() {
  const auto until = std::chrono::steady_clock::now() + kKillWait;
  while (!exited_ && std::chrono::steady_clock::now() < until) {
    DebugStopEvent e;
    while (ch_->PopStop(&e)) OnStop(e);
    if (exited_) break;
    pollfd p = {ch_->fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    if (!ch_->Pump()) break;
  }
}

void Stub::Handle(const std::string& payload) {
  if (trace_) *err_ << "gdbserver: <- " << payload.substr(0, 200) << "\n";
  const Request r = gdbstub::ParseRequest(payload);
  if (exited_ && r.kind != Request::kSupported && r.kind != Request::kHaltReason &&
      r.kind != Request::kStartNoAck && r.kind != Request::kKill &&
      r.kind != Request::kVKill && r.kind != Request::kDetach) {
    Send("E.the process has exited");
    return;
  }
  switch (r.kind) {
    case Request::kUnsupported:
      Send("");
      return;
    case Request::kMalformed:
      Send(absl::StrCat("E.", r.error));
      return;
    case Request::kSupported: {
      for (const std::string& f : r.features)
        if (f == "swbreak+") swbreak_ = true;
        else if (f == "hwbreak+") hwbreak_ = true;
      std::string s = absl::StrFormat(
          "PacketSize=%x;QStartNoAckMode+;qXfer:auxv:read+;vContSupported+;"
          "Qbtrace:bts+;Qbtrace:off+;Qbtrace-conf:bts:size+;qXfer:btrace:read+;"
          "qXfer:btrace-conf:read+",
          kPacketSize);
      if (swbreak_) s += ";swbreak+";
      if (hwbreak_) s += ";hwbreak+";
      Send(s);
      return;
    }
    case Request::kStartNoAck:
      Send("OK");
      ack_ = false;
      return;
    case Request::kHaltReason:
      Send(StopReply(last_stop_));
      return;
    case Request::kReadRegs: {
      bool ok = false;
      const std::string raw = ReadRegisters(GThread(), &ok);
      Send(ok ? gdbstub::ToHex(raw.data(), raw.size()) : "E01");
      return;
    }
    case Request::kReadReg: {
      bool ok = false;
      size_t off = 0, size = 0;
      if (!gdbstub::RegisterSlice(r.regno, &off, &size)) {
        Send("E.no such register");
        return;
      }
      const std::string raw = ReadRegisters(GThread(), &ok);
      Send(ok ? gdbstub::ToHex(raw.data() + off, size) : "E01");
      return;
    }
    case Request::kWriteRegs:
    case Request::kWriteReg:
      Send(HandleWriteRegs(r));
      return;
    case Request::kReadMem:
      Send(HandleMemoryRead(r));
      return;
    case Request::kWriteMem:
    case Request::kWriteMemBinary:
      Send(HandleMemoryWrite(r));
      return;
    case Request::kContinue:
    case Request::kStep: {
      // gdbserver's rule: with Hc naming a thread only it resumes;
      // otherwise all do, the current one stepping.
      DebugResumeSpec spec;
      const pid_t cur = CThread() ? CThread() : last_stop_.tid;
      spec.continue_others = CThread() == 0;
      (r.kind == Request::kStep ? spec.step : spec.cont).push_back(cur);
      if (r.has_signal && r.signal != 0) spec.signals[cur] = FromGdbSignal(r.signal);
      if (r.has_addr) {
        DebugRegs regs;
        if (ch_->GetRegs(cur, &regs) != 0) {
          Send("E01");
          return;
        }
        regs.regs.rip = r.addr;
        ch_->SetRegs(cur, regs);
      }
      std::string reply;
      if (!Resume(spec, &reply)) Send(reply);
      return;
    }
    case Request::kVContQuery:
      Send("vCont;c;C;s;S;t");
      return;
    case Request::kVCont: {
      const std::string reply = HandleVCont(r);
      if (!reply.empty()) Send(reply);
      return;
    }
    case Request::kSetThread: {
      const int64_t t = r.thread.tid;
      pid_t tid = t <= 0 ? 0 : static_cast<pid_t>(t);
      if (tid != 0) {
        const std::vector<pid_t> threads = Threads();
        if (std::find(threads.begin(), threads.end(), tid) == threads.end()) {
          Send("E01");
          return;
        }
      }
      (r.which == 'g' ? g_thread_ : c_thread_) = tid;
      Send("OK");
      return;
    }
    case Request::kThreadAlive: {
      const std::vector<pid_t> threads = Threads();
      Send(std::find(threads.begin(), threads.end(), r.thread.tid) != threads.end() ? "OK" : "E01");
      return;
    }
    case Request::kThreadInfoFirst:
    case Request::kThreadInfoNext: {
      if (r.kind == Request::kThreadInfoFirst) {
        thread_list_ = Threads();
        thread_cursor_ = 0;
      }
      if (thread_cursor_ >= thread_list_.size()) {
        Send("l");
        return;
      }
      std::string s = "m";
      for (; thread_cursor_ < thread_list_.size() && s.size() < kPacketSize - 32; ++thread_cursor_)
        s += (s.size() > 1 ? "," : "") + Hex8(thread_list_[thread_cursor_]);
      Send(s);
      return;
    }
    case Request::kCurrentThread:
      Send(absl::StrCat("QC", Hex8(last_stop_.tid ? last_stop_.tid : pid_)));
      return;
    case Request::kAttached:
      Send(attached_ ? "1" : "0");
      return;
    case Request::kInsertBreak:
    case Request::kRemoveBreak: {
      // Software breakpoints (0): the stepping tracer compares every next
      // RIP with them. Hardware ones (1, 2, 4) take a debug register
      // through pfmd's arbiter. x86 cannot watch reads only (3): GDB then
      // emulates `rwatch` with an access watchpoint, as with gdbserver.
      if (r.break_type == 1 || r.break_type == 2 || r.break_type == 4) {
        Send(HandleHwPoint(r));
        return;
      }
      if (r.break_type != 0) {
        Send("");
        return;
      }
      const int rc = ch_->Breakpoint(r.addr, r.kind == Request::kInsertBreak);
      Send(rc == 0 ? "OK" : absl::StrCat("E.", std::strerror(-rc)));
      return;
    }
    case Request::kXferRead:
      Send(HandleXfer(r));
      return;
    case Request::kBtraceEnable:
    case Request::kBtraceConfSize:
      Send(HandleBtrace(r));
      return;
    case Request::kKill:
      if (!exited_) {
        ch_->Kill();
        AwaitExit();
      }
      done_ = true;  // `k` has no reply
      return;
    case Request::kVKill:
      if (!exited_) {
        ch_->Kill();
        AwaitExit();
      }
      Send("OK");
      done_ = true;
      return;
    case Request::kDetach:
      if (!exited_) ch_->Detach();
      Send("OK");
      done_ = true;
      return;
  }
  Send("");
}

int Stub::Serve() {
  std::vector<gdbstub::RspEvent> events;
  char buf[16384];
  while (!done_) {
    pollfd p[2] = {{in_, POLLIN, 0}, {ch_->fd(), POLLIN, 0}};
    const int n = ::poll(p, ch_->closed() ? 1 : 2, ch_->has_stops() ? 0 : 1000);
    if (n < 0 && errno != EINTR) break;
    if (!ch_->closed() && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) ch_->Pump();
    DebugStopEvent e;
    while (ch_->PopStop(&e)) {
      OnStop(e);
      if (running_) {
        running_ = false;
        Send(StopReply(last_stop_));
      }
    }
    if (ch_->closed() && !exited_) {
      // The tracer is gone without reporting an end: nothing to control.
      *err_ << "pfmctl gdbserver: the tracer of pid " << pid_ << " closed the debug channel\n";
      if (running_) Send("X09");
      break;
    }
    if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const ssize_t got = ::read(in_, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // GDB went away
    events.clear();
    reader_.Feed(buf, static_cast<size_t>(got), &events);
    for (const gdbstub::RspEvent& ev : events) {
      if (done_) break;
      switch (ev.kind) {
        case gdbstub::RspEvent::kAck:
        case gdbstub::RspEvent::kGarbage:
          break;
        case gdbstub::RspEvent::kNack:
          if (!last_sent_.empty()) (void)!::write(out_, last_sent_.data(), last_sent_.size());
          break;
        case gdbstub::RspEvent::kInterrupt:
          if (running_) ch_->Interrupt();
          break;
        case gdbstub::RspEvent::kBadChecksum:
          if (ack_) (void)!::write(out_, "-", 1);
          break;
        case gdbstub::RspEvent::kOversized:
          if (ack_) (void)!::write(out_, "+", 1);
          Send("E.packet too long");
          break;
        case gdbstub::RspEvent::kPacket:
          if (ack_) (void)!::write(out_, "+", 1);
          if (running_) {
            // Only an interrupt makes sense while it runs (all-stop).
            Send("E.the process is running");
            break;
          }
          Handle(ev.payload);
          break;
      }
    }
  }
  return exited_ ? exit_code_ : 0;
}

// --listen [HOST:]PORT: one connection on a TCP socket.
absl::StatusOr<int> AcceptOne(const std::string& where, std::ostream* err) {
  std::string host = "127.0.0.1", port = where;
  if (const size_t colon = where.rfind(':'); colon != std::string::npos) {
    host = where.substr(0, colon);
    port = where.substr(colon + 1);
    if (host.empty() || host == "localhost") host = "127.0.0.1";
  }
  absl::StatusOr<int> p = ParseIntArg("--listen port", port, 0, 65535);
  if (!p.ok()) return p.status();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(*p));
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
    return UsageError(absl::StrCat("--listen ", where, ": HOST must be an IPv4 address"));
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (!s.valid() || ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(s.get(), 1) != 0)
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port, ": ", std::strerror(errno)));
  socklen_t len = sizeof(a);
  ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len);
  *err << "Listening on port " << ntohs(a.sin_port) << std::endl;
  int c;
  do {
    c = ::accept4(s.get(), nullptr, nullptr, SOCK_CLOEXEC);
  } while (c < 0 && errno == EINTR);
  if (c < 0) return absl::UnavailableError(absl::StrCat("accept: ", std::strerror(errno)));
  const int nodelay = 1;
  ::setsockopt(c, IPPROTO_TCP, 1 /* TCP_NODELAY */, &nodelay, sizeof(nodelay));
  return c;
}

}  // namespace

absl::StatusOr<int> GdbserverCommand(const CliContext& ctx, const CommandArgs& args) {
  CommandFlags f(args, 1);
  absl::StatusOr<std::string> pid_flag = f.Take("--pid");
  if (!pid_flag.ok()) return pid_flag.status();
  absl::StatusOr<std::string> listen = f.Take("--listen");
  if (!listen.ok()) return listen.status();
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("gdbserver");
  if (!pos.ok()) return pos.status();
  const bool run = !pos->empty() && (*pos)[0] == "--";
  if (!pos->empty() && !run)
    return UsageError(absl::StrCat("gdbserver: unexpected argument '", (*pos)[0], "'"));
  if (run == !pid_flag->empty())
    return UsageError("gdbserver: give --pid PID or -- CMD [ARGS...]");
  if (run && pos->size() < 2) return UsageError("gdbserver: -- needs a command to run");
  pid_t pid = -1;
  if (!run) {
    absl::StatusOr<int> p = ParseIntArg("--pid", *pid_flag, 1, 0x3fffffff);
    if (!p.ok()) return p.status();
    pid = *p;
  }
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<std::string> driver = DaemonDriver(*c);
  if (!driver.ok()) return driver.status();
  if (*driver != "host")
    return absl::FailedPreconditionError(
        "gdbserver controls a real process: it needs a pfmd with --driver host");
  ::signal(SIGPIPE, SIG_IGN);
  // With GDB on the other end of stdin/stdout, a launched program gets
  // /dev/null for input and our stderr for output, as gdbserver's stdio
  // mode does.
  const bool stdio = listen->empty();
  if (run) {
    std::vector<std::string> argv(pos->begin() + 1, pos->end());
    ErrorDetail d;
    UniqueFd in0(::fcntl(0, F_DUPFD_CLOEXEC, 3)), out1(::fcntl(1, F_DUPFD_CLOEXEC, 3));
    if (stdio) {
      UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      ::dup2(null.get(), 0);
      ::dup2(2, 1);
    }
    const int rc = SpawnStopped(argv, &pid, &d);
    if (stdio) {
      ::dup2(in0.get(), 0);
      ::dup2(out1.get(), 1);
    }
    if (rc < 0) return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", d.message));
  }
  // A launched child not yet started is abandoned on every error path.
  auto fail = [&](absl::Status s) -> absl::StatusOr<int> {
    if (run) {
      ErrorDetail d;
      if (Abandon(pid, &d) < 0) ::kill(pid, SIGKILL);
      int st;
      ::waitpid(pid, &st, 0);
    }
    return s;
  };
  SessionSpec spec;
  spec.role = "debugger";
  spec.pid = pid;
  spec.debug = true;
  absl::StatusOr<Client::Reply> cr = c->Call("session_create", {{"spec", spec.ToJson()}});
  if (!cr.ok()) return fail(cr.status());
  ReplyReader created("session_create", cr->result);
  const uint64_t id = created.result().Member("id").Id();
  if (!created.ok()) return fail(created.status());
  absl::StatusOr<Client::Reply> dr = c->Call("session_debug", {{"id", id}});
  if (!dr.ok()) return fail(dr.status());
  if (dr->fds.size() != 1)
    return fail(absl::InternalError("pfmd reply: session_debug: expected one fd"));
  debug_channel::Client ch(std::move(dr->fds[0]));
  if (const int rc = ch.Enable(run, run); rc != 0)
    return fail(absl::FailedPreconditionError(
        absl::StrCat("cannot take control of pid ", pid, ": ", std::strerror(-rc))));
  if (run) {
    ErrorDetail d;
    if (Release(pid, &d) < 0)
      return fail(absl::InternalError(absl::StrCat("cannot start the program: ", d.message)));
  }
  UniqueFd conn;
  Stub stub(&*c, &ch, pid, !run, 0, 1, ctx.err);
  stub.set_session(id);
  if (absl::Status s = stub.WaitFirstStop(); !s.ok()) {
    if (run) {
      ::kill(pid, SIGKILL);
      int st;
      ::waitpid(pid, &st, 0);
    }
    return s;
  }
  if (!stdio) {
    absl::StatusOr<int> a = AcceptOne(*listen, ctx.err);
    if (!a.ok()) {
      ch.Kill();
      return a.status();
    }
    conn.reset(*a);
    stub.SetConnection(conn.get(), conn.get());
  }
  const int status = stub.Serve();
  stub.EndBtraceSessions();
  (void)c->Call("session_kill", {{"id", id}});
  if (run) {
    // Killed or ended: reap it; still running (detached): let it be.
    int st;
    ::waitpid(pid, &st, WNOHANG);
  }
  return status;
}

}  // namespace pfm
