// The tracer process: pfmd's binary re-executed with kTracerHelperFlag
// (tracer_process.h says why). It takes the client's credentials, runs a
// SoftBtsTracer against a RemoteCore that holds the task's DS area and
// forwards every report to pfmd, and leaves cleanly when pfmd does.
#include "kernel/drivers/ptrace/tracer_process.h"
#include "kernel/drivers/ptrace/debug_channel.h"
#include "kernel/drivers/ptrace/tracer_protocol.h"

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
#include <map>
#include <set>
#include <memory>
#include <string>
#include <utility>


namespace pfm {
namespace {

using tracer_protocol::Frame;
using tracer_protocol::MsgHeader;
using tracer_protocol::WireTask;
using tracer_protocol::kDrainHead;
using tracer_protocol::kTaskCreated;
using tracer_protocol::kTaskExec;
using tracer_protocol::kBound;
using tracer_protocol::WireBound;
using tracer_protocol::ReadMsg;
using tracer_protocol::ToWire;
using tracer_protocol::WireStats;
using tracer_protocol::WriteAll;
using tracer_protocol::kDebugClose;
using tracer_protocol::kDebugEnded;
using tracer_protocol::kDebugOpen;
using tracer_protocol::ReadMsgFd;
using tracer_protocol::kDrain;
using tracer_protocol::kDrainServed;
using tracer_protocol::kExited;
using tracer_protocol::kHeld;
using tracer_protocol::kHeldQuery;
using tracer_protocol::kHelperDsRecords;
using tracer_protocol::kMaps;
using tracer_protocol::MapsPayloads;
using tracer_protocol::kMaxMsgBytes;
using tracer_protocol::kRequestDrain;
using tracer_protocol::kSignaled;
using tracer_protocol::kStarted;
using tracer_protocol::kStats;
using tracer_protocol::kStop;
using tracer_protocol::kSwitch;

// ---------------------------------------------------------------------------
// The helper process.

// The tracer's core in the helper process: it holds each task's DS area and
// forwards everything to pfmd, waiting for pfmd's answer where the tracer
// needs one (a drain, whether to hold). Only the task-level hooks mean
// anything here; the per-CPU ones are never called by a soft-BTS tracer.
class RemoteCore : public CoreHooks {
 public:
  explicit RemoteCore(int fd) : fd_(fd) {}

  void set_tracer(SoftBtsTracer* t) { tracer_.store(t, std::memory_order_release); }

  // CoreHooks: the task-level part. Areas are created on first use and
  // freed at the task's exit; only the tracer thread calls these.
  DsArea* TaskArea(TaskId task) override {
    auto it = areas_.find(task.tid);
    if (it != areas_.end()) return it->second.get();
    auto area = std::make_unique<DsArea>(0, kHelperDsRecords, kHelperDsRecords, 1, 1);
    DsArea* a = area.get();
    areas_.emplace(task.tid, std::move(area));
    return a;
  }
  void TaskDsInterrupt(TaskId task, int cpu, uint64_t) override {
    MaybeSendMaps();  // names for these records, before them
    DsArea& area = *TaskArea(task);
    const uint32_t n = static_cast<uint32_t>(
        std::min<size_t>(area.bts_count(), kHelperDsRecords));
    std::string p(kDrainHead + n * sizeof(pfm_bts_raw), '\0');
    const WireStats ws = ToWire(Stats());
    const WireTask wt{task.pid, task.tid};
    const int32_t c = cpu;
    char* at = p.data();
    std::memcpy(at, &ws, sizeof(ws));
    std::memcpy(at + sizeof(ws), &wt, sizeof(wt));
    std::memcpy(at + sizeof(ws) + sizeof(wt), &c, 4);
    std::memcpy(at + sizeof(ws) + sizeof(wt) + 4, &n, 4);
    std::memcpy(at + kDrainHead, area.bts_records(), n * sizeof(pfm_bts_raw));
    area.ResetBts();
    Request(kDrain, p);
  }
  bool TaskHeld(TaskId task) override {
    // Cheap while not held (asked before every step); while held, ask
    // pfmd again (the tracer asks again every millisecond).
    if (!held_.load(std::memory_order_acquire)) return false;
    const WireTask wt{task.pid, task.tid};
    Request(kHeldQuery, std::string(reinterpret_cast<const char*>(&wt), sizeof(wt)));
    return held_.load(std::memory_order_acquire);
  }
  void ContextSwitch(int cpu, uint64_t, TaskId prev, TaskId next,
                     bool preempt) override {
    const bool in = next.pid != 0;
    const TaskId task = in ? next : prev;
    struct {
      int32_t cpu;
      WireTask task;
      uint8_t in, preempt;
      uint16_t pad;
    } m{cpu, {task.pid, task.tid}, in, preempt, 0};
    Send(Frame(kSwitch, &m, sizeof(m)));
  }
  void TaskExit(TaskId task, uint64_t, int64_t wait_status) override {
    SendStats();
    struct {
      WireTask task;
      int64_t status;
    } m{{task.pid, task.tid}, wait_status};
    Send(Frame(kExited, &m, sizeof(m)));
    areas_.erase(task.tid);
  }
  void TaskSignaled(TaskId task, uint64_t, int signo) override {
    struct {
      WireTask task;
      int32_t signo;
    } m{{task.pid, task.tid}, signo};
    Send(Frame(kSignaled, &m, sizeof(m)));
  }
  void TaskCreated(TaskId parent, TaskId child, uint64_t) override {
    const WireTask m[2] = {{parent.pid, parent.tid}, {child.pid, child.tid}};
    Send(Frame(kTaskCreated, m, sizeof(m)));
    MaybeSendMaps();  // a new process's maps, before its records
  }
  void TaskExec(TaskId task, uint64_t) override {
    const WireTask m{task.pid, task.tid};
    Send(Frame(kTaskExec, &m, sizeof(m)));
    MaybeSendMaps();  // the new program's, before its records
  }
  // SoftBtsOptions::on_bound: what pfmd gives the task back should this
  // process die without detaching.
  void TaskBound(TaskId task, int cpu, const cpu_set_t& own) {
    WireBound m{};
    m.task = WireTask{task.pid, task.tid};
    m.cpu = cpu;
    m.n = sizeof(own);
    std::memcpy(m.own, &own, sizeof(own));
    Send(Frame(kBound, &m, sizeof(m)));
  }
  // CoreHooks: the per-CPU part, unused by a task-level driver.
  DsArea* Area(int) override { return nullptr; }
  void DsInterrupt(int, uint64_t) override {}
  TraceConfig TaskConfig(int, TaskId) override { return TraceConfig{}; }
  int ScheduledCounters(int, ScheduledCounter*, int) override { return 0; }
  void AddCount(uint32_t, uint64_t) override {}
  void Tick(int, uint64_t) override {}

  // pfmd learns that the debugger it passed a channel for is gone: the
  // session's one-debugger slot and hardware points are free again.
  void SendDebugEnded() { Send(Frame(kDebugEnded, nullptr, 0)); }

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
  // Sends the mappings of every traced process whose list changed since it
  // was last sent.
  void MaybeSendMaps() {
    SoftBtsTracer* t = tracer_.load(std::memory_order_acquire);
    if (t == nullptr) return;
    std::set<pid_t> cut;
    std::map<pid_t, std::vector<Mapping>> now = t->process_maps(&cut);
    std::lock_guard<std::mutex> lk(maps_mu_);
    for (auto& [pid, m] : now) {
      const bool is_cut = cut.count(pid) != 0;
      auto it = sent_maps_.find(pid);
      if (it != sent_maps_.end() && it->second == m && sent_cut_.count(pid) == (is_cut ? 1u : 0u))
        continue;
      // In address order, in parts of at most one message each (pfmd
      // puts them together), up to kMaxMapsListBytes in all: only a list
      // longer than that (thousands of mappings with long paths) loses its
      // highest mappings, and says so (kMapsCut).
      MapsPayloads(pid, m, is_cut, [this](const std::string& p) {
        Send(Frame(kMaps, p.data(), static_cast<uint32_t>(p.size())));
      });
      sent_maps_[pid] = std::move(m);
      if (is_cut) {
        sent_cut_.insert(pid);
      } else {
        sent_cut_.erase(pid);
      }
    }
    for (auto it = sent_maps_.begin(); it != sent_maps_.end();) {
      if (now.count(it->first)) {
        ++it;
      } else {
        sent_cut_.erase(it->first);
        it = sent_maps_.erase(it);
      }
    }
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
  // Each task's area, by tid; the tracer thread's only.
  std::map<int32_t, std::unique_ptr<DsArea>> areas_;
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
  std::map<pid_t, std::vector<Mapping>> sent_maps_;  // guarded by maps_mu_
  std::set<pid_t> sent_cut_;  // of sent_maps_, those sent cut; guarded by maps_mu_
};

// Waits for a helper told to leave (kStop, or its socket closed) to exit;
// kills it only after `timeout`: a helper killed while attached can leave
// its tracee with the trap flag set.
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
  // argv: exe FLAG FD PID OPTIONS [UID GID GROUPS]; OPTIONS "-" or a comma
  // list of "inherit", "branch", "free" (not bind_cpu), "cpu:N" (decimal),
  // "range:LO:HI",
  // "file:HEXPATH", "start:ADDR" (hex numbers; TracerProcess::Start writes
  // them).
  if (argc != 5 && argc != 8) return 2;
  const int fd = std::atoi(argv[2]);
  const pid_t pid = static_cast<pid_t>(std::atol(argv[3]));
  if (fd < 3 || pid <= 0) return 2;
  SoftBtsOptions opt;
  for (const char* o = argv[4]; *o != '\0';) {
    const char* comma = std::strchr(o, ',');
    const size_t n = comma != nullptr ? static_cast<size_t>(comma - o) : std::strlen(o);
    const std::string item(o, n);
    if (item == "inherit") {
      opt.inherit = true;
    } else if (item == "branch") {
      opt.branch_step = true;
    } else if (item == "free") {
      opt.bind_cpu = false;
    } else if (item.rfind("cpu:", 0) == 0) {
      char* end = nullptr;
      const long cpu = std::strtol(item.c_str() + 4, &end, 10);
      if (end == item.c_str() + 4 || *end != '\0' || cpu < 0 || cpu >= CPU_SETSIZE) return 2;
      opt.cpu = static_cast<int>(cpu);
    } else if (item.rfind("range:", 0) == 0) {
      SoftBtsOptions::AddrRange r;
      char* end = nullptr;
      r.lo = std::strtoull(item.c_str() + 6, &end, 16);
      if (*end != ':') return 2;
      r.hi = std::strtoull(end + 1, &end, 16);
      if (*end != '\0' || r.lo >= r.hi) return 2;
      opt.filter_ranges.push_back(r);
    } else if (item.rfind("file:", 0) == 0) {
      std::string path;
      for (size_t i = 5; i + 1 < item.size(); i += 2) {
        const std::string two = item.substr(i, 2);
        char* end = nullptr;
        const unsigned long c = std::strtoul(two.c_str(), &end, 16);
        if (*end != '\0') return 2;
        path.push_back(static_cast<char>(c));
      }
      if (path.empty() || (item.size() - 5) % 2 != 0) return 2;
      opt.filter_files.push_back(path);
    } else if (item.rfind("start:", 0) == 0) {
      char* end = nullptr;
      opt.start_at = std::strtoull(item.c_str() + 6, &end, 16);
      if (*end != '\0' || opt.start_at == 0) return 2;
    } else if (item != "-") {
      return 2;
    }
    o += n + (comma != nullptr ? 1 : 0);
  }
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
  if (argc == 8) {
    Credentials c;
    c.uid = static_cast<uid_t>(std::strtoul(argv[5], nullptr, 10));
    c.gid = static_cast<gid_t>(std::strtoul(argv[6], nullptr, 10));
    ErrorDetail d;
    int rc = ParseGroups(argv[7], &c.groups) ? AssumeCredentials(c, &d)
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
  opt.on_bound = [&sink](TaskId task, int cpu, const cpu_set_t& own) {
    sink.TaskBound(task, cpu, own);
  };
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false, gone = false;
  std::atomic<SoftBtsTracer*> tracer{nullptr};
  // pfmd's tickets with the tracer's own, until served.
  std::deque<std::pair<uint64_t, uint64_t>> pending;
  std::deque<uint64_t> unstarted;  // asked before the tracer existed
  // The debug channel (debug_channel.h): one at a time, served by its own
  // thread once the tracer runs.
  int debug_fd = -1;          // being served
  int debug_pending = -1;     // passed by pfmd, not served yet
  std::thread debug_thread;

  std::thread reader([&] {
    MsgHeader h;
    std::string p;
    int passed = -1;
    while (ReadMsgFd(fd, &h, &p, &passed)) {
      if (passed >= 0 && h.type != kDebugOpen) {
        ::close(passed);
        passed = -1;
      }
      if (h.type == kDebugOpen) {
        // Every channel pfmd passes ends with one kDebugEnded (pfmd counts
        // them): served ones when Serve returns, the others here (sent
        // outside `mu`: the write may wait for pfmd).
        bool refused = true;  // no fd came with it, or one is served
        {
          std::lock_guard<std::mutex> lk(mu);
          if (passed >= 0 && debug_fd < 0 && debug_pending < 0) {
            debug_pending = passed;
            refused = false;
            cv.notify_all();
          } else if (passed >= 0) {
            ::close(passed);  // one debugger at a time
          }
        }
        passed = -1;
        if (refused) sink.SendDebugEnded();
      } else if (h.type == kDebugClose) {
        bool unserved = false;
        {
          std::lock_guard<std::mutex> lk(mu);
          if (debug_fd >= 0) ::shutdown(debug_fd, SHUT_RDWR);
          if (debug_pending >= 0) {
            ::close(debug_pending);  // never served
            debug_pending = -1;
            unserved = true;
          }
        }
        if (unserved) sink.SendDebugEnded();
      } else if (h.type == kHeld && p.size() == 1) {
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
  const int rc = SoftBtsTracer::Start(pid, opt, &sink, &t, &d);
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
      if (debug_pending >= 0 && !debug_thread.joinable()) {
        debug_fd = debug_pending;
        debug_pending = -1;
        const int dfd = debug_fd;
        debug_thread = std::thread([&, dfd] {
          debug_channel::Serve(dfd, t.get(), pid);
          {
            std::lock_guard<std::mutex> dlk(mu);
            ::close(debug_fd);
            debug_fd = -1;
          }
          // After debug_fd is free: a channel pfmd passes once it knows is
          // served, not refused as a second one.
          sink.SendDebugEnded();
        });
      } else if (debug_thread.joinable() && debug_fd < 0) {
        lk.unlock();
        debug_thread.join();
        lk.lock();
        continue;
      }
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
    // The debugger's channel ends first (a launched program dies with it,
    // an attached one is let go), then the tracer.
    if (debug_fd >= 0) ::shutdown(debug_fd, SHUT_RDWR);
    if (debug_pending >= 0) {
      ::close(debug_pending);
      debug_pending = -1;
    }
    lk.unlock();
    if (debug_thread.joinable()) debug_thread.join();
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
  if (debug_pending >= 0) ::close(debug_pending);  // never served
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


}  // namespace pfm
