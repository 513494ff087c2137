#include "kernel/drivers/ptrace/debug_channel.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "kernel/drivers/ptrace/tracer_protocol.h"

namespace pfm::debug_channel {
namespace {

using tracer_protocol::Frame;
using tracer_protocol::MsgHeader;
using tracer_protocol::ReadAll;
using tracer_protocol::WriteAll;

template <typename T>
bool Take(const std::string& p, size_t* at, T* v) {
  if (p.size() < *at + sizeof(T)) return false;
  std::memcpy(v, p.data() + *at, sizeof(T));
  *at += sizeof(T);
  return true;
}

template <typename T>
void Put(std::string* p, const T& v) {
  p->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

std::string ReadAuxv(pid_t pid) {
  std::string out;
  const int fd = open(("/proc/" + std::to_string(pid) + "/auxv").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0 && out.size() < kMaxMemBytes) out.append(buf, n);
  close(fd);
  return out;
}

// One request; the reply's rc and payload.
int Dispatch(uint32_t type, const std::string& p, SoftBtsTracer* t, pid_t pid,
             bool* kill_on_close, std::mutex* send_mu, int fd, std::string* out) {
  size_t at = 0;
  switch (type) {
    case kEnable: {
      uint8_t at_exec = 0, kill = 0;
      if (!Take(p, &at, &at_exec) || !Take(p, &at, &kill)) return -EINVAL;
      *kill_on_close = kill != 0;
      return t->DebugEnable(at_exec != 0, [send_mu, fd](const DebugStopEvent& e) {
        WireStop w{};
        w.kind = e.kind;
        w.tid = e.tid;
        w.signo = e.signo;
        w.exit_code = e.exit_code;
        w.swbreak = e.swbreak ? 1 : 0;
        w.hw_kind = static_cast<uint8_t>(e.hw_kind);
        w.hw_addr = e.hw_addr;
        const std::string f = Frame(kStop, &w, sizeof(w));
        std::lock_guard<std::mutex> lk(*send_mu);
        WriteAll(fd, f.data(), f.size(), true);
      });
    }
    case kInterrupt:
      return t->DebugInterrupt();
    case kResume: {
      uint8_t cont = 0, pad[3];
      uint32_t nstep = 0, nsig = 0, ncont = 0;
      if (!Take(p, &at, &cont) || !Take(p, &at, &pad) || !Take(p, &at, &nstep) ||
          !Take(p, &at, &nsig) || !Take(p, &at, &ncont) || nstep > kMaxThreads ||
          nsig > kMaxThreads || ncont > kMaxThreads)
        return -EINVAL;
      DebugResumeSpec spec;
      spec.continue_others = cont != 0;
      for (uint32_t i = 0; i < nstep; ++i) {
        int32_t tid;
        if (!Take(p, &at, &tid)) return -EINVAL;
        spec.step.push_back(tid);
      }
      for (uint32_t i = 0; i < nsig; ++i) {
        int32_t tid, sig;
        if (!Take(p, &at, &tid) || !Take(p, &at, &sig) || sig < 0 || sig > 64) return -EINVAL;
        spec.signals[tid] = sig;
      }
      for (uint32_t i = 0; i < ncont; ++i) {
        int32_t tid;
        if (!Take(p, &at, &tid)) return -EINVAL;
        spec.cont.push_back(tid);
      }
      return t->DebugResume(spec);
    }
    case kGetRegs: {
      int32_t tid;
      if (!Take(p, &at, &tid)) return -EINVAL;
      DebugRegs r;
      const int rc = t->DebugGetRegs(tid, &r);
      if (rc == 0) Put(out, r);
      return rc;
    }
    case kSetRegs: {
      int32_t tid;
      DebugRegs r;
      if (!Take(p, &at, &tid) || !Take(p, &at, &r)) return -EINVAL;
      return t->DebugSetRegs(tid, r);
    }
    case kReadMem: {
      uint64_t addr;
      uint32_t len;
      if (!Take(p, &at, &addr) || !Take(p, &at, &len) || len > kMaxMemBytes) return -EINVAL;
      return t->DebugReadMemory(addr, len, out);
    }
    case kWriteMem: {
      uint64_t addr;
      if (!Take(p, &at, &addr) || p.size() - at > kMaxMemBytes) return -EINVAL;
      return t->DebugWriteMemory(addr, p.substr(at));
    }
    case kBreak: {
      uint64_t addr;
      uint8_t insert;
      if (!Take(p, &at, &addr) || !Take(p, &at, &insert)) return -EINVAL;
      return t->DebugBreakpoint(addr, insert != 0);
    }
    case kHwPoint: {
      uint64_t addr;
      uint32_t len;
      uint8_t kind, insert;
      if (!Take(p, &at, &addr) || !Take(p, &at, &len) || !Take(p, &at, &kind) ||
          !Take(p, &at, &insert))
        return -EINVAL;
      return t->DebugHwPoint(kind, addr, len, insert != 0, out);
    }
    case kThreads: {
      std::vector<pid_t> tids;
      const int rc = t->DebugThreads(&tids);
      for (pid_t tid : tids) Put(out, static_cast<int32_t>(tid));
      return rc;
    }
    case kKill:
      return t->DebugKill();
    case kDetach:
      *kill_on_close = false;
      return t->DebugDisable(false);
    case kAuxv:
      *out = ReadAuxv(pid);
      return out->empty() ? -ESRCH : 0;
    default:
      return -ENOSYS;
  }
}

}  // namespace

void Serve(int fd, SoftBtsTracer* t, pid_t pid) {
  std::mutex send_mu;
  bool kill_on_close = false;
  MsgHeader h;
  std::string p, out;
  while (ReadAll(fd, &h, sizeof(h)) && h.len <= kMaxMsg) {
    p.resize(h.len);
    if (h.len != 0 && !ReadAll(fd, p.data(), h.len)) break;
    out.clear();
    const int32_t rc = Dispatch(h.type, p, t, pid, &kill_on_close, &send_mu, fd, &out);
    std::string reply;
    Put(&reply, rc);
    reply += out;
    const std::string f = Frame(kReply, reply.data(), static_cast<uint32_t>(reply.size()));
    std::lock_guard<std::mutex> lk(send_mu);
    if (!WriteAll(fd, f.data(), f.size(), true)) break;
  }
  // The debugger is gone (or told us to go): the process runs on, or dies
  // with it if it launched it. Afterwards no event is sent any more.
  t->DebugDisable(kill_on_close);
}

bool Client::ReadOne(uint32_t* type, std::string* payload) {
  if (in_.size() < sizeof(MsgHeader)) return false;
  MsgHeader h;
  std::memcpy(&h, in_.data(), sizeof(h));
  if (h.len > kMaxMsg) {
    closed_ = true;
    return false;
  }
  if (in_.size() < sizeof(h) + h.len) return false;
  *type = h.type;
  payload->assign(in_, sizeof(h), h.len);
  in_.erase(0, sizeof(h) + h.len);
  return true;
}

void Client::QueueStop(uint32_t type, const std::string& p) {
  WireStop w;
  if (type != kStop || p.size() != sizeof(w)) return;  // a stray reply
  std::memcpy(&w, p.data(), sizeof(w));
  DebugStopEvent e;
  e.kind = static_cast<DebugStopEvent::Kind>(w.kind);
  e.tid = w.tid;
  e.signo = w.signo;
  e.exit_code = w.exit_code;
  e.swbreak = w.swbreak != 0;
  e.hw_kind = w.hw_kind;
  e.hw_addr = w.hw_addr;
  stops_.push_back(e);
}

bool Client::Pump() {
  char buf[8192];
  for (;;) {
    const ssize_t n = recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed_ = true;
    break;
  }
  uint32_t type;
  std::string p;
  while (ReadOne(&type, &p)) QueueStop(type, p);
  return !closed_;
}

bool Client::PopStop(DebugStopEvent* e) {
  if (stops_.empty()) return false;
  *e = stops_.front();
  stops_.pop_front();
  return true;
}

int Client::Call(uint32_t type, const std::string& payload, std::string* reply) {
  if (closed_) return -EPIPE;
  const std::string f = Frame(type, payload.data(), static_cast<uint32_t>(payload.size()));
  if (!WriteAll(fd_.get(), f.data(), f.size(), true)) {
    closed_ = true;
    return -EPIPE;
  }
  for (;;) {
    uint32_t t;
    std::string p;
    while (ReadOne(&t, &p)) {
      if (t == kReply && p.size() >= 4) {
        int32_t rc;
        std::memcpy(&rc, p.data(), 4);
        if (reply != nullptr) reply->assign(p, 4, std::string::npos);
        // Stops read along with the reply are queued now: their bytes have
        // left the socket, so poll() will not say so again.
        uint32_t t2;
        std::string p2;
        while (ReadOne(&t2, &p2)) QueueStop(t2, p2);
        return rc;
      }
      QueueStop(t, p);  // stops that came before the reply, in order
    }
    if (closed_) return -EPIPE;
    char buf[8192];
    const ssize_t n = recv(fd_.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      closed_ = true;
      return -EPIPE;
    }
    in_.append(buf, static_cast<size_t>(n));
  }
}

int Client::Enable(bool stop_at_exec, bool kill_on_close) {
  std::string p;
  Put(&p, static_cast<uint8_t>(stop_at_exec));
  Put(&p, static_cast<uint8_t>(kill_on_close));
  return Call(kEnable, p, nullptr);
}
int Client::Interrupt() { return Call(kInterrupt, "", nullptr); }
int Client::Resume(const DebugResumeSpec& spec) {
  std::string p;
  Put(&p, static_cast<uint8_t>(spec.continue_others));
  const uint8_t pad[3] = {};
  Put(&p, pad);
  Put(&p, static_cast<uint32_t>(spec.step.size()));
  Put(&p, static_cast<uint32_t>(spec.signals.size()));
  Put(&p, static_cast<uint32_t>(spec.cont.size()));
  for (pid_t t : spec.step) Put(&p, static_cast<int32_t>(t));
  for (auto& [tid, sig] : spec.signals) {
    Put(&p, static_cast<int32_t>(tid));
    Put(&p, static_cast<int32_t>(sig));
  }
  for (pid_t t : spec.cont) Put(&p, static_cast<int32_t>(t));
  return Call(kResume, p, nullptr);
}
int Client::GetRegs(pid_t tid, DebugRegs* out) {
  std::string p, r;
  Put(&p, static_cast<int32_t>(tid));
  const int rc = Call(kGetRegs, p, &r);
  if (rc < 0) return rc;
  if (r.size() != sizeof(*out)) return -EPROTO;
  std::memcpy(out, r.data(), sizeof(*out));
  return 0;
}
int Client::SetRegs(pid_t tid, const DebugRegs& in) {
  std::string p;
  Put(&p, static_cast<int32_t>(tid));
  Put(&p, in);
  return Call(kSetRegs, p, nullptr);
}
int Client::ReadMemory(uint64_t addr, uint32_t len, std::string* out) {
  std::string p;
  Put(&p, addr);
  Put(&p, len);
  return Call(kReadMem, p, out);
}
int Client::WriteMemory(uint64_t addr, const std::string& bytes) {
  std::string p;
  Put(&p, addr);
  p += bytes;
  return Call(kWriteMem, p, nullptr);
}
int Client::Breakpoint(uint64_t addr, bool insert) {
  std::string p;
  Put(&p, addr);
  Put(&p, static_cast<uint8_t>(insert));
  return Call(kBreak, p, nullptr);
}
int Client::HwPoint(int kind, uint64_t addr, uint32_t len, bool insert,
                    std::string* err) {
  std::string p, r;
  Put(&p, addr);
  Put(&p, len);
  Put(&p, static_cast<uint8_t>(kind));
  Put(&p, static_cast<uint8_t>(insert));
  const int rc = Call(kHwPoint, p, &r);
  if (rc < 0 && err != nullptr) *err = r;
  return rc;
}
int Client::Threads(std::vector<pid_t>* out) {
  std::string r;
  const int rc = Call(kThreads, "", &r);
  out->clear();
  for (size_t at = 0; at + 4 <= r.size(); at += 4) {
    int32_t tid;
    std::memcpy(&tid, r.data() + at, 4);
    out->push_back(tid);
  }
  return rc;
}
int Client::Kill() { return Call(kKill, "", nullptr); }
int Client::Detach() { return Call(kDetach, "", nullptr); }
int Client::Auxv(std::string* out) { return Call(kAuxv, "", out); }

}  // namespace pfm::debug_channel
