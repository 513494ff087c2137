#include "kernel/drivers/ptrace/tracer_protocol.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
  return WireStats{s.steps,    s.branches,       s.singleblock_honoured ? 1u : 0u,
                   s.reg_reads, s.computed, s.mispredictions,
                   s.resyncs};
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
  return s;
}

std::string EncodeMaps(const std::vector<TraceeMapping>& maps) {
  std::string out;
  const uint32_t n = static_cast<uint32_t>(std::min<size_t>(maps.size(), kMaxMaps));
  out.append(reinterpret_cast<const char*>(&n), sizeof(n));
  for (uint32_t i = 0; i < n; ++i) {
    const TraceeMapping& m = maps[i];
    const uint32_t plen = static_cast<uint32_t>(std::min<size_t>(m.path.size(), kMaxPath));
    WireMap w{m.start, m.end, m.offset, m.writable, m.shared, 0, plen};
    if (out.size() + sizeof(w) + plen > kMaxMsgBytes) break;
    out.append(reinterpret_cast<const char*>(&w), sizeof(w));
    out.append(m.path.data(), plen);
  }
  // The count written first may be larger than what fit; fix it.
  uint32_t written = 0;
  for (size_t at = sizeof(n); at < out.size(); ++written) {
    WireMap w;
    std::memcpy(&w, out.data() + at, sizeof(w));
    at += sizeof(w) + w.path_len;
  }
  std::memcpy(out.data(), &written, sizeof(written));
  return out;
}

bool DecodeMaps(const std::string& p, std::vector<TraceeMapping>* out) {
  uint32_t n;
  if (p.size() < sizeof(n)) return false;
  std::memcpy(&n, p.data(), sizeof(n));
  if (n > kMaxMaps) return false;
  size_t at = sizeof(n);
  out->clear();
  for (uint32_t i = 0; i < n; ++i) {
    WireMap w;
    if (p.size() - at < sizeof(w)) return false;
    std::memcpy(&w, p.data() + at, sizeof(w));
    at += sizeof(w);
    if (w.path_len > kMaxPath || p.size() - at < w.path_len || w.start > w.end)
      return false;
    TraceeMapping m;
    m.start = w.start;
    m.end = w.end;
    m.offset = w.offset;
    m.writable = w.writable != 0;
    m.shared = w.shared != 0;
    m.path.assign(p.data() + at, w.path_len);
    at += w.path_len;
    out->push_back(std::move(m));
  }
  return at == p.size();
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
