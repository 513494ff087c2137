#include "kernel/drivers/ptrace/tracer_process.h"

#include "kernel/drivers/clock.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <utility>

namespace pfm {
namespace {

// The helper's protocol: on a SOCK_STREAM socket pair, each message is a
// header {type, len} followed by `len` bytes of payload. Fixed-size fields
// are host-endian (both ends are the same binary on the same machine).
enum MsgType : uint32_t {
  // helper -> pfmd
  kStarted = 1,       // i32 rc, char detail[256]
  kDrain = 2,         // WireStats, i32 cpu, u32 n, pfm_bts_raw[n]; reply kHeld
  kHeldQuery = 3,     // (empty); reply kHeld
  kSwitch = 4,        // i32 cpu, u8 prev_is_task, u8 next_is_task, u8 preempt
  kExited = 5,        // i64 wait status
  kSignaled = 6,      // i32 signo
  kMaps = 7,          // u32 count, then count x {WireMap, path bytes}
  kStats = 8,         // WireStats
  kDrainServed = 9,   // u64 ticket, WireStats
  // pfmd -> helper
  kHeld = 100,        // u8 held
  kRequestDrain = 101,  // u64 ticket
  kStop = 102,        // (empty)
};

struct MsgHeader {
  uint32_t type;
  uint32_t len;
};

struct WireStats {
  uint64_t steps, branches, singleblock, reg_reads, computed, mispredictions,
      resyncs;
};

struct WireMap {
  uint64_t start, end, offset;
  uint8_t writable, shared;
  uint16_t pad;
  uint32_t path_len;
};

// The DS area of a helper's tracer, in records (SoftBtsOptions' default),
// and the largest message either side accepts.
constexpr uint32_t kHelperDsRecords = SoftBtsOptions{}.ds_records;
constexpr uint32_t kMaxMsgBytes =
    sizeof(WireStats) + 8 + kHelperDsRecords * sizeof(pfm_bts_raw);
constexpr uint32_t kMaxMaps = 65536;
constexpr uint32_t kMaxPath = 4096;
// A helper that has not attached within this long is given up on.
constexpr int kStartTimeoutMs = 15000;

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

// ---------------------------------------------------------------------------
// The helper process.

// The tracer's core in the helper process: it holds the task's DS area and
// forwards everything to pfmd, waiting for pfmd's answer where the tracer
// needs one (a drain, whether to hold). Only the task-level hooks mean
// anything here; the per-CPU ones are never called by a soft-BTS tracer.
class RemoteCore : public CoreHooks {
 public:
  explicit RemoteCore(int fd)
      : fd_(fd), area_(0, kHelperDsRecords, kHelperDsRecords, 1, 1) {}

  void set_tracer(SoftBtsTracer* t) { tracer_.store(t, std::memory_order_release); }

  // CoreHooks: the task-level part.
  DsArea* TaskArea(TaskId) override { return &area_; }
  void TaskDsInterrupt(TaskId, int cpu, uint64_t) override {
    MaybeSendMaps();  // names for these records, before them
    DsArea& area = area_;
    const uint32_t n = static_cast<uint32_t>(
        std::min<size_t>(area.bts_count(), kHelperDsRecords));
    std::string p(sizeof(WireStats) + 8 + n * sizeof(pfm_bts_raw), '\0');
    const WireStats ws = ToWire(Stats());
    const int32_t c = cpu;
    std::memcpy(p.data(), &ws, sizeof(ws));
    std::memcpy(p.data() + sizeof(ws), &c, 4);
    std::memcpy(p.data() + sizeof(ws) + 4, &n, 4);
    std::memcpy(p.data() + sizeof(ws) + 8, area.bts_records(), n * sizeof(pfm_bts_raw));
    area.ResetBts();
    Request(kDrain, p);
  }
  bool TaskHeld(TaskId) override {
    // Cheap while not held (asked before every step); while held, ask
    // pfmd again (the tracer sleeps 1 ms between questions).
    if (!held_.load(std::memory_order_acquire)) return false;
    Request(kHeldQuery, std::string());
    return held_.load(std::memory_order_acquire);
  }
  void ContextSwitch(int cpu, uint64_t, TaskId prev, TaskId next,
                     bool preempt) override {
    struct {
      int32_t cpu;
      uint8_t prev_is_task, next_is_task, preempt, pad;
    } m{cpu, prev.pid != 0, next.pid != 0, preempt, 0};
    Send(Frame(kSwitch, &m, sizeof(m)));
  }
  void TaskExit(TaskId, uint64_t, int64_t wait_status) override {
    SendStats();
    Send(Frame(kExited, &wait_status, sizeof(wait_status)));
  }
  void TaskSignaled(TaskId, uint64_t, int signo) override {
    const int32_t s = signo;
    Send(Frame(kSignaled, &s, sizeof(s)));
  }
  // CoreHooks: the per-CPU part, unused by a task-level driver.
  DsArea* Area(int) override { return nullptr; }
  void DsInterrupt(int, uint64_t) override {}
  TraceConfig TaskConfig(int, TaskId) override { return TraceConfig{}; }
  int ScheduledCounters(int, ScheduledCounter*, int) override { return 0; }
  void AddCount(uint32_t, uint64_t) override {}
  void Tick(int, uint64_t) override {}

  // Sends kStarted, then what the tracer reported before it.
  void SendStarted(const std::string& frame) {
    std::lock_guard<std::mutex> lk(send_mu_);
    started_ = true;
    bool ok = WriteAll(fd_, frame.data(), frame.size(), true);
    for (const std::string& f : queued_)
      ok = ok && WriteAll(fd_, f.data(), f.size(), true);
    queued_.clear();
    if (!ok) OnGone();
  }

  // From the helper's reader thread.
  void OnHeld(bool held) {
    std::lock_guard<std::mutex> lk(mu_);
    held_.store(held, std::memory_order_release);
    ++replies_;
    cv_.notify_all();
  }
  void OnGone() {
    std::lock_guard<std::mutex> lk(mu_);
    gone_ = true;
    held_.store(false, std::memory_order_release);
    cv_.notify_all();
  }

  void SendStats() {
    const WireStats ws = ToWire(Stats());
    Send(Frame(kStats, &ws, sizeof(ws)));
  }
  void SendServed(uint64_t ticket) {
    struct {
      uint64_t ticket;
      WireStats stats;
    } m{ticket, ToWire(Stats())};
    Send(Frame(kDrainServed, &m, sizeof(m)));
  }
  void MaybeSendMaps() {
    SoftBtsTracer* t = tracer_.load(std::memory_order_acquire);
    if (t == nullptr) return;
    std::vector<TraceeMapping> m = t->maps();
    std::lock_guard<std::mutex> lk(maps_mu_);
    auto same = [](const TraceeMapping& a, const TraceeMapping& b) {
      return a.start == b.start && a.end == b.end && a.offset == b.offset &&
             a.path == b.path && a.writable == b.writable && a.shared == b.shared;
    };
    if (sent_maps_ && m.size() == last_maps_.size() &&
        std::equal(m.begin(), m.end(), last_maps_.begin(), same))
      return;
    const std::string p = EncodeMaps(m);
    Send(Frame(kMaps, p.data(), static_cast<uint32_t>(p.size())));
    last_maps_ = std::move(m);
    sent_maps_ = true;
  }

 private:
  SoftBtsTracer::Stats Stats() const {
    SoftBtsTracer* t = tracer_.load(std::memory_order_acquire);
    return t ? t->stats() : SoftBtsTracer::Stats{};
  }
  void Send(const std::string& frame) {
    std::lock_guard<std::mutex> lk(send_mu_);
    // The tracer reports its first switch before Start() returns: pfmd
    // must see kStarted first.
    if (!started_) {
      queued_.push_back(frame);
      return;
    }
    if (!WriteAll(fd_, frame.data(), frame.size(), true)) OnGone();
  }
  // Sends a message that pfmd answers with kHeld, and waits for the answer
  // (or for pfmd to be gone). Only the tracer thread asks, one at a time.
  void Request(uint32_t type, const std::string& payload) {
    uint64_t want;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (gone_) return;
      want = ++asked_;
    }
    Send(Frame(type, payload.data(), static_cast<uint32_t>(payload.size())));
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return gone_ || replies_ >= want; });
  }

  const int fd_;
  DsArea area_;  // the task's, written by the tracer thread only
  std::atomic<SoftBtsTracer*> tracer_{nullptr};
  std::atomic<bool> held_{false};
  std::mutex send_mu_;
  bool started_ = false;              // guarded by send_mu_
  std::vector<std::string> queued_;   // guarded by send_mu_
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t asked_ = 0;
  uint64_t replies_ = 0;
  bool gone_ = false;
  std::mutex maps_mu_;
  std::vector<TraceeMapping> last_maps_;
  bool sent_maps_ = false;
};

// Waits for a helper told to leave (kStop, or its socket closed) to exit;
// kills it only after `timeout`: a helper killed while attached can leave
// its tracee with the trap flag set.
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

bool ParseGroups(const char* s, std::vector<gid_t>* out) {
  if (std::strcmp(s, "-") == 0) return true;
  const char* p = s;
  while (*p) {
    char* end = nullptr;
    const unsigned long g = std::strtoul(p, &end, 10);
    if (end == p || g > 0xffffffffUL) return false;
    out->push_back(static_cast<gid_t>(g));
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') return false;
  }
  return true;
}

int RunHelper(int argc, char** argv) {
  // argv: exe FLAG FD PID [UID GID GROUPS]
  if (argc != 4 && argc != 7) return 2;
  const int fd = std::atoi(argv[2]);
  const pid_t pid = static_cast<pid_t>(std::atol(argv[3]));
  if (fd < 3 || pid <= 0) return 2;
  // pfmd's stop signals are not ours: the helper follows pfmd's socket, so a
  // SIGTERM/SIGINT to pfmd's cgroup or terminal does not cut a trace short
  // or leave a trap flag behind.
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  // The OOM killer must prefer anything over a tracer (its death can kill
  // the tracee); allowed only while still privileged, harmless otherwise.
  if (FILE* f = std::fopen("/proc/self/oom_score_adj", "w")) {
    std::fputs("-1000", f);
    std::fclose(f);
  }
  if (argc == 7) {
    Credentials c;
    c.uid = static_cast<uid_t>(std::strtoul(argv[4], nullptr, 10));
    c.gid = static_cast<gid_t>(std::strtoul(argv[5], nullptr, 10));
    ErrorDetail d;
    int rc = ParseGroups(argv[6], &c.groups) ? AssumeCredentials(c, &d)
                                              : d.Set(-EINVAL, "bad group list");
    if (rc < 0) {
      struct {
        int32_t rc;
        char detail[256];
      } m{rc, {}};
      std::memcpy(m.detail, d.message, sizeof(m.detail));
      const std::string f = Frame(kStarted, &m, sizeof(m));
      WriteAll(fd, f.data(), f.size(), true);
      return 1;
    }
  }
  // Not dumpable: another process of the client's uid may not ptrace the
  // tracer or read its memory (the kernel also does this on a uid change).
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

  RemoteCore sink(fd);
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false, gone = false;
  std::atomic<SoftBtsTracer*> tracer{nullptr};
  // pfmd's tickets with the tracer's own, until served.
  std::deque<std::pair<uint64_t, uint64_t>> pending;
  std::deque<uint64_t> unstarted;  // asked before the tracer existed

  std::thread reader([&] {
    MsgHeader h;
    std::string p;
    while (ReadMsg(fd, &h, &p)) {
      if (h.type == kHeld && p.size() == 1) {
        sink.OnHeld(p[0] != 0);
      } else if (h.type == kRequestDrain && p.size() == 8) {
        uint64_t ticket;
        std::memcpy(&ticket, p.data(), 8);
        std::lock_guard<std::mutex> lk(mu);
        if (SoftBtsTracer* t = tracer.load(std::memory_order_acquire))
          pending.emplace_back(ticket, t->RequestDrain());
        else
          unstarted.push_back(ticket);
        cv.notify_all();
      } else if (h.type == kStop) {
        std::lock_guard<std::mutex> lk(mu);
        stop = true;
        cv.notify_all();
      }
    }
    sink.OnGone();
    std::lock_guard<std::mutex> lk(mu);
    gone = true;
    cv.notify_all();
  });

  std::unique_ptr<SoftBtsTracer> t;
  ErrorDetail d;
  const int rc = SoftBtsTracer::Start(pid, SoftBtsOptions{}, &sink, &t, &d);
  {
    struct {
      int32_t rc;
      char detail[256];
    } m{rc, {}};
    std::memcpy(m.detail, d.message, sizeof(m.detail));
    sink.SendStarted(Frame(kStarted, &m, sizeof(m)));
  }
  if (rc == 0) {
    sink.set_tracer(t.get());
    sink.MaybeSendMaps();
    {
      std::lock_guard<std::mutex> lk(mu);
      tracer.store(t.get(), std::memory_order_release);
      for (uint64_t ticket : unstarted) pending.emplace_back(ticket, t->RequestDrain());
      unstarted.clear();
    }
    auto last_tick = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      cv.wait_for(lk, std::chrono::milliseconds(pending.empty() ? 100 : 1));
      if (stop || gone || t->done()) break;
      std::vector<uint64_t> served;
      while (!pending.empty() && t->DrainServed(pending.front().second)) {
        served.push_back(pending.front().first);
        pending.pop_front();
      }
      const auto now = std::chrono::steady_clock::now();
      const bool tick = now - last_tick >= std::chrono::milliseconds(200);
      if (tick) last_tick = now;
      lk.unlock();
      for (uint64_t s : served) sink.SendServed(s);
      if (tick) {
        sink.MaybeSendMaps();
        sink.SendStats();
      }
      lk.lock();
    }
    lk.unlock();
    // Drains (through pfmd, while it is there) and detaches; the tracee
    // runs on untraced.
    t->Stop();
    sink.MaybeSendMaps();
    sink.SendStats();
    lk.lock();
    for (auto& [ticket, mine] : pending) {
      lk.unlock();
      sink.SendServed(ticket);
      lk.lock();
    }
    pending.clear();
  }
  ::shutdown(fd, SHUT_WR);  // pfmd sees EOF once everything above is read
  // pfmd closes its end when it has read it all (or is gone).
  reader.join();
  ::close(fd);
  return rc == 0 ? 0 : 1;
}

}  // namespace

int MaybeRunTracerHelper(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], kTracerHelperFlag) != 0) return -1;
  return RunHelper(argc, argv);
}

// ---------------------------------------------------------------------------
// pfmd's side.

int TracerProcess::Start(pid_t pid, const std::optional<Credentials>& creds,
                         Host host, std::unique_ptr<TracerProcess>* out,
                         ErrorDetail* d, const std::string& exe) {
  if (pid <= 0 || pid == ::getpid())
    return SetError(d, -EINVAL, "soft BTS needs another process's pid, got %d", pid);
  if (host.core == nullptr || host.lock == nullptr || out == nullptr)
    return SetError(d, -EINVAL, "a tracer process needs a core, its lock and an output pointer");
  // Everything the child needs, built before fork: between fork and exec
  // only async-signal-safe calls.
  // argv[0] names the helper for ps; the program is `exe`.
  std::vector<std::string> args = {"pfm-tracer", kTracerHelperFlag, "3",
                                    std::to_string(pid)};
  if (creds.has_value()) {
    std::string groups;
    for (gid_t g : creds->groups)
      groups += (groups.empty() ? "" : ",") + std::to_string(g);
    args.push_back(std::to_string(creds->uid));
    args.push_back(std::to_string(creds->gid));
    args.push_back(groups.empty() ? "-" : groups);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return SetError(d, -errno, "socketpair for the tracer process: %s", strerror(errno));
  const pid_t child = ::fork();
  if (child < 0) {
    const int e = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    return SetError(d, -e, "fork of the tracer process: %s", strerror(e));
  }
  if (child == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (sv[1] == 3) {
      ::fcntl(3, F_SETFD, 0);
    } else if (::dup2(sv[1], 3) != 3) {
      ::_exit(127);
    }
    ::syscall(SYS_close_range, 4u, ~0u, 0u);
    ::setsid();  // no terminal signals (^C to pfmctl's group)
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(sv[1]);
  const int fd = sv[0];
  auto fail = [&](int err, const std::string& msg) {
    // Closing our end makes a helper that did attach detach cleanly.
    ::close(fd);
    ReapHelper(child, kStopTimeout);
    return SetError(d, err, "%s", msg.c_str());
  };
  pollfd p{fd, POLLIN, 0};
  int pr;
  do {
    pr = ::poll(&p, 1, kStartTimeoutMs);
  } while (pr < 0 && errno == EINTR);
  MsgHeader h{};
  std::string payload;
  if (pr <= 0 || !ReadMsg(fd, &h, &payload) || h.type != kStarted ||
      payload.size() != 4 + 256)
    return fail(-ECHILD, "the tracer process for pid " + std::to_string(pid) +
                             " did not start (" +
                             (pr == 0 ? "timed out" : "exited before attaching") + ")");
  int32_t rc;
  std::memcpy(&rc, payload.data(), 4);
  if (rc < 0) {
    std::string detail(payload.data() + 4, strnlen(payload.data() + 4, 256));
    return fail(rc, detail.empty() ? "attach failed" : detail);
  }
  std::unique_ptr<TracerProcess> t(new TracerProcess(pid, child, fd, std::move(host)));
  t->reader_ = std::thread(&TracerProcess::ReadLoop, t.get());
  *out = std::move(t);
  return 0;
}

TracerProcess::TracerProcess(pid_t pid, pid_t helper, int fd, Host host)
    : pid_(pid), helper_(helper), fd_(fd), host_(std::move(host)) {}

TracerProcess::~TracerProcess() { Stop(); }

bool TracerProcess::Send(uint32_t type, const void* payload, uint32_t len,
                         bool wait) {
  const std::string f = Frame(type, payload, len);
  std::lock_guard<std::mutex> lk(send_mu_);
  return WriteAll(fd_, f.data(), f.size(), wait);
}

void TracerProcess::MarkDone() {
  std::lock_guard<std::mutex> lk(mu_);
  done_.store(true, std::memory_order_release);
  served_ = UINT64_MAX;
  cv_.notify_all();
}

// Validates and carries out what the helper reports. Task identity and time
// are pfmd's own; a malformed message ends the conversation (the helper sees
// EOF and detaches cleanly).
void TracerProcess::ReadLoop() {
  const TaskId task{pid_, pid_};
  CoreHooks* const core = host_.core;
  auto cpu_of = [&](int32_t cpu) { return cpu >= 0 && cpu < host_.cpus ? cpu : 0; };
  MsgHeader h;
  std::string p;
  bool exited = false;
  while (ReadMsg(fd_, &h, &p)) {
    const uint64_t now = MonotonicNs();
    bool ok = true;
    switch (h.type) {
      case kDrain: {
        constexpr size_t kHead = sizeof(WireStats) + 8;
        uint32_t n = 0;
        int32_t cpu = 0;
        if (p.size() >= kHead) {
          std::memcpy(&cpu, p.data() + sizeof(WireStats), 4);
          std::memcpy(&n, p.data() + sizeof(WireStats) + 4, 4);
        }
        if (p.size() < kHead || n > kHelperDsRecords ||
            p.size() != kHead + size_t{n} * sizeof(pfm_bts_raw)) {
          ok = false;
          break;
        }
        WireStats ws;
        std::memcpy(&ws, p.data(), sizeof(ws));
        {
          std::lock_guard<std::mutex> lk(mu_);
          stats_ = FromWire(ws);
        }
        // Into the task's own DS area, as the CPU would write it, under
        // the kernel lock; drained at its threshold and at the end.
        uint8_t held;
        {
          KernelLockGuard l(host_.lock);
          // Null: no consumer wants branches now. A drain does not move the
          // area; only the owner's resize does, which needs this lock.
          DsArea* const area = core->TaskArea(task);
          for (uint32_t i = 0; area != nullptr && i < n; ++i) {
            pfm_bts_raw r;
            std::memcpy(&r, p.data() + kHead + i * sizeof(r), sizeof(r));
            // Soft BTS sees user mode only: a kernel address is not a
            // branch this tracer can have seen.
            if (PFM_ADDR_IS_KERNEL(r.from) || PFM_ADDR_IS_KERNEL(r.to)) continue;
            r.flags = 0;
            if (area->WriteBts(r) != DsArea::kStored)
              core->TaskDsInterrupt(task, cpu_of(cpu), now);
          }
          core->TaskDsInterrupt(task, cpu_of(cpu), now);
          held = core->TaskHeld(task) ? 1 : 0;
        }
        Send(kHeld, &held, 1, true);
        break;
      }
      case kHeldQuery: {
        uint8_t held;
        {
          KernelLockGuard l(host_.lock);
          held = core->TaskHeld(task) ? 1 : 0;
        }
        Send(kHeld, &held, 1, true);
        break;
      }
      case kSwitch: {
        struct {
          int32_t cpu;
          uint8_t prev_is_task, next_is_task, preempt, pad;
        } m;
        if (p.size() != sizeof(m)) {
          ok = false;
          break;
        }
        std::memcpy(&m, p.data(), sizeof(m));
        KernelLockGuard l(host_.lock);
        core->ContextSwitch(cpu_of(m.cpu), now, m.prev_is_task ? task : TaskId{},
                            m.next_is_task ? task : TaskId{}, m.preempt != 0);
        break;
      }
      case kExited: {
        int64_t status;
        if (p.size() != sizeof(status) || exited) {
          ok = false;
          break;
        }
        std::memcpy(&status, p.data(), sizeof(status));
        exited = true;
        {
          KernelLockGuard l(host_.lock);
          core->TaskExit(task, now, status);
          if (host_.exited) host_.exited(status);
        }
        MarkDone();
        break;
      }
      case kSignaled: {
        int32_t signo;
        if (p.size() != sizeof(signo)) {
          ok = false;
          break;
        }
        std::memcpy(&signo, p.data(), sizeof(signo));
        if (signo > 0 && signo < 65) {
          KernelLockGuard l(host_.lock);
          core->TaskSignaled(task, now, signo);
          if (host_.signaled) host_.signaled(signo);
        }
        break;
      }
      case kMaps: {
        std::vector<TraceeMapping> m;
        if (!DecodeMaps(p, &m)) {
          ok = false;
          break;
        }
        std::lock_guard<std::mutex> lk(mu_);
        maps_ = std::move(m);
        break;
      }
      case kStats:
      case kDrainServed: {
        const size_t at = h.type == kDrainServed ? 8 : 0;
        if (p.size() != at + sizeof(WireStats)) {
          ok = false;
          break;
        }
        WireStats ws;
        std::memcpy(&ws, p.data() + at, sizeof(ws));
        std::lock_guard<std::mutex> lk(mu_);
        stats_ = FromWire(ws);
        if (h.type == kDrainServed) {
          uint64_t ticket;
          std::memcpy(&ticket, p.data(), 8);
          if (ticket < next_ticket_.load() && ticket + 1 > served_)
            served_ = ticket + 1;
        }
        cv_.notify_all();
        break;
      }
      default:
        ok = false;
    }
    if (!ok) break;
  }
  // EOF (the helper exited or detached), or a message pfmd does not accept:
  // closing our side makes a live helper detach and exit.
  ::shutdown(fd_, SHUT_RDWR);
  MarkDone();
  std::lock_guard<std::mutex> lk(mu_);
  stopped_ = true;  // the reader is finished
  cv_.notify_all();
}

SoftBtsTracer::Stats TracerProcess::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

std::vector<TraceeMapping> TracerProcess::maps() const {
  std::lock_guard<std::mutex> lk(mu_);
  return maps_;
}

uint64_t TracerProcess::RequestDrain() {
  const uint64_t ticket = next_ticket_.fetch_add(1);
  // Best effort and never blocking: a helper that does not read is not
  // allowed to stall pfmd; WaitDrain's timeout covers it.
  Send(kRequestDrain, &ticket, sizeof(ticket), false);
  return ticket;
}

bool TracerProcess::DrainServed(uint64_t ticket) const {
  std::lock_guard<std::mutex> lk(mu_);
  return served_ > ticket;
}

bool TracerProcess::WaitDrain(uint64_t ticket, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return served_ > ticket; });
}

void TracerProcess::Stop() {
  std::lock_guard<std::mutex> stop_lk(stop_mu_);
  if (reaped_) return;
  Send(kStop, nullptr, 0, false);
  bool finished;
  {
    std::unique_lock<std::mutex> lk(mu_);
    finished = cv_.wait_for(lk, kStopTimeout, [&] { return stopped_; });
  }
  ::shutdown(fd_, SHUT_RDWR);  // a helper that missed kStop sees EOF
  if (reader_.joinable()) reader_.join();
  ReapHelper(helper_, finished ? kStopTimeout : std::chrono::milliseconds(100));
  ::close(fd_);
  MarkDone();
  reaped_ = true;
}

}  // namespace pfm
