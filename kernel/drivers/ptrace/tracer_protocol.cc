#include "kernel/drivers/ptrace/tracer_protocol.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pfm::tracer_protocol {

bool WriteAll(int fd, const void* p, size_t n, bool wait) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool ReadMsg(int fd, MsgHeader* h, std::string* payload) {
  if (!ReadAll(fd, h, sizeof(*h)) || h->len > kMaxMsgBytes) return false;
  payload->resize(h->len);
  return h->len == 0 || ReadAll(fd, payload->data(), h->len);
}

std::string Frame(uint32_t type, const void* payload, uint32_t len) {
  std::string out(sizeof(MsgHeader) + len, '\0');
  const MsgHeader h{type, len};
  std::memcpy(out.data(), &h, sizeof(h));
  if (len) std::memcpy(out.data() + sizeof(h), payload, len);
  return out;
}

WireStats ToWire(const SoftBtsTracer::Stats& s) {
  return WireStats{s.steps,      s.branches,       s.singleblock_honoured ? 1u : 0u,
                   s.reg_reads,  s.computed,       s.mispredictions,
                   s.resyncs,    s.tasks,          s.tasks_seen,
                   s.processes_seen, s.switches,   s.switch_artifacts,
                   s.switch_errno};
}

SoftBtsTracer::Stats FromWire(const WireStats& w) {
  SoftBtsTracer::Stats s;
  s.steps = w.steps;
  s.branches = w.branches;
  s.singleblock_honoured = w.singleblock != 0;
  s.reg_reads = w.reg_reads;
  s.computed = w.computed;
  s.mispredictions = w.mispredictions;
  s.resyncs = w.resyncs;
  s.tasks = w.tasks;
  s.tasks_seen = w.tasks_seen;
  s.processes_seen = w.processes_seen;
  s.switches = w.switches;
  s.switch_artifacts = w.switch_artifacts;
  s.switch_errno = w.switch_errno;
  return s;
}

void ReapHelper(pid_t helper, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(helper, &st, WNOHANG);
    if (r == helper || (r < 0 && errno != EINTR)) return;
    if (std::chrono::steady_clock::now() >= until) break;
    ::usleep(2000);
  }
  ::kill(helper, SIGKILL);
  while (::waitpid(helper, &st, 0) < 0 && errno == EINTR) {
  }
}


}  // namespace pfm::tracer_protocol
