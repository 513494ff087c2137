#include "kernel/drivers/ptrace/tracer_protocol.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
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

bool ReadMsgFd(int fd, MsgHeader* h, std::string* payload, int* passed) {
  *passed = -1;
  // The fd travels with the frame's first byte: read the header with
  // recvmsg, the rest as usual.
  char* c = reinterpret_cast<char*>(h);
  size_t got = 0;
  while (got < sizeof(*h)) {
    iovec iov = {c + got, sizeof(*h) - got};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof(ctl);
    const ssize_t r = ::recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&m); cm != nullptr; cm = CMSG_NXTHDR(&m, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
      const size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        if (*passed < 0) {
          *passed = f;
        } else {
          ::close(f);
        }
      }
    }
    got += static_cast<size_t>(r);
  }
  if (h->len > kMaxMsgBytes) return false;
  payload->resize(h->len);
  return h->len == 0 || ReadAll(fd, payload->data(), h->len);
}

bool SendWithFd(int fd, const std::string& frame, int pass) {
  iovec iov = {const_cast<char*>(frame.data()), frame.size()};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof(ctl);
  cmsghdr* cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &pass, sizeof(int));
  ssize_t w;
  do {
    w = ::sendmsg(fd, &m, MSG_NOSIGNAL);
  } while (w < 0 && errno == EINTR);
  if (w <= 0) return false;
  const size_t sent = static_cast<size_t>(w);
  return sent == frame.size() ||
         WriteAll(fd, frame.data() + sent, frame.size() - sent, true);
}

void MapsPayloads(int32_t pid, const std::vector<Mapping>& maps, bool cut,
                  const std::function<void(const std::string&)>& send,
                  size_t part_bytes, size_t list_bytes) {
  size_t at = 0, total = 0;
  while (true) {
    std::string p(8, '\0');
    std::memcpy(p.data(), &pid, 4);
    std::string enc;
    const size_t k = EncodeMappings(maps, at, part_bytes, &enc);
    at += k;
    total += enc.size();
    // The last part: everything sent, less than a whole part of the budget
    // left, or a mapping that cannot be encoded or fit.
    const bool more = k != 0 && at < maps.size() && total <= list_bytes &&
                      list_bytes - total >= part_bytes;
    const uint32_t flags = more ? kMapsMore : (cut || at < maps.size() ? kMapsCut : 0);
    std::memcpy(p.data() + 4, &flags, 4);
    p += enc;
    send(p);
    if (!more) return;
  }
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
                   s.switch_errno,
                   s.branch_stops,  s.emulated,   s.planted,
                   s.gaps,       s.children_first, s.stale_stops,
                   s.bound_cpu};
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
  s.branch_stops = w.branch_stops;
  s.emulated = w.emulated;
  s.planted = w.planted;
  s.gaps = w.gaps;
  s.children_first = w.children_first;
  s.stale_stops = w.stale_stops;
  s.bound_cpu = w.bound_cpu >= -1 && w.bound_cpu < CPU_SETSIZE ? static_cast<int32_t>(w.bound_cpu) : -1;
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
