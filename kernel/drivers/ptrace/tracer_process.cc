#include "kernel/drivers/ptrace/tracer_process.h"
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
#include <string_view>
#include <string>
#include <utility>


namespace pfm {

using tracer_protocol::Frame;
using tracer_protocol::kDebugEnded;
using tracer_protocol::FromWire;
using tracer_protocol::MsgHeader;
using tracer_protocol::WireTask;
using tracer_protocol::kDrainHead;
using tracer_protocol::kTaskCreated;
using tracer_protocol::kTaskExec;
using tracer_protocol::kBound;
using tracer_protocol::ReadMsg;
using tracer_protocol::ReapHelper;
using tracer_protocol::WireStats;
using tracer_protocol::WriteAll;
using tracer_protocol::kDrain;
using tracer_protocol::kDrainServed;
using tracer_protocol::kExited;
using tracer_protocol::kHeld;
using tracer_protocol::kHeldQuery;
using tracer_protocol::kHelperDsRecords;
using tracer_protocol::kMaps;
using tracer_protocol::kMapsCut;
using tracer_protocol::kMapsMore;
using tracer_protocol::kMaxMapsListBytes;
using tracer_protocol::kRequestDrain;
using tracer_protocol::kSignaled;
using tracer_protocol::kStartTimeoutMs;
using tracer_protocol::kStarted;
using tracer_protocol::kStats;
using tracer_protocol::kStop;
using tracer_protocol::kSwitch;

// ---------------------------------------------------------------------------
// pfmd's side.

int TracerProcess::Start(pid_t pid, const std::optional<Credentials>& creds,
                         Host host, std::unique_ptr<TracerProcess>* out,
                         ErrorDetail* d, const std::string& exe,
                         Options options) {
  if (pid <= 0 || pid == ::getpid())
    return SetError(d, -EINVAL, "soft BTS needs another process's pid, got %d", pid);
  if (host.core == nullptr || host.lock == nullptr || out == nullptr)
    return SetError(d, -EINVAL, "a tracer process needs a core, its lock and an output pointer");
  // Everything the child needs, built before fork: between fork and exec
  // only async-signal-safe calls.
  // argv[0] names the helper for ps; the program is `exe`.
  // OPTIONS: a comma list (RunHelper); a file's path goes in hex (it may
  // hold commas).
  std::string opts;
  auto add = [&opts](const std::string& o) { opts += (opts.empty() ? "" : ",") + o; };
  if (options.inherit) add("inherit");
  if (options.branch_step) add("branch");
  if (!options.bind_cpu) add("free");
  if (options.bind_cpu && options.cpu >= 0) add("cpu:" + std::to_string(options.cpu));
  char buf[64];
  for (const SoftBtsOptions::AddrRange& r : options.filter_ranges) {
    std::snprintf(buf, sizeof buf, "range:%llx:%llx", static_cast<unsigned long long>(r.lo),
                  static_cast<unsigned long long>(r.hi));
    add(buf);
  }
  for (const std::string& f : options.filter_files) {
    std::string hex = "file:";
    for (unsigned char c : f) {
      std::snprintf(buf, sizeof buf, "%02x", c);
      hex += buf;
    }
    add(hex);
  }
  if (options.start_at != 0) {
    std::snprintf(buf, sizeof buf, "start:%llx", static_cast<unsigned long long>(options.start_at));
    add(buf);
  }
  std::vector<std::string> args = {"pfm-tracer", kTracerHelperFlag, "3",
                                    std::to_string(pid), opts.empty() ? "-" : opts};
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
    // Nothing else of pfmd's reaches the helper (which runs as the client).
    // glibc's closefrom: close_range, or where that is refused (Linux before
    // 5.9, a seccomp policy) the fds /proc/self/fd lists, with raw syscalls
    // (async-signal-safe, as this child of a threaded process must be).
    ::closefrom(4);
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
  std::unique_ptr<TracerProcess> t(new TracerProcess(pid, child, fd, std::move(host), options));
  t->reader_ = std::thread(&TracerProcess::ReadLoop, t.get());
  *out = std::move(t);
  return 0;
}

TracerProcess::TracerProcess(pid_t pid, pid_t helper, int fd, Host host,
                             Options options)
    : pid_(pid), helper_(helper), fd_(fd), host_(std::move(host)), options_(options) {}

TracerProcess::~TracerProcess() { Stop(); }

bool TracerProcess::Send(uint32_t type, const void* payload, uint32_t len,
                         bool wait) {
  const std::string f = Frame(type, payload, len);
  std::lock_guard<std::mutex> lk(send_mu_);
  return fd_ >= 0 && WriteAll(fd_, f.data(), f.size(), wait);
}

void TracerProcess::MarkDone() {
  std::lock_guard<std::mutex> lk(mu_);
  done_.store(true, std::memory_order_release);
  served_ = UINT64_MAX;
  cv_.notify_all();
}

namespace {

// The TracerPid of /proc/TID/status: -1 when the task is gone (or the file
// unreadable). A zombie is gone too: it has a /proc entry, with TracerPid 0
// once its tracer collected its exit (a child that exits at once can be one
// before its creation's report is read here, and was taken for a task
// someone else traces, which closed the helper's channel mid-tree).
pid_t TracerOf(int32_t tid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/status", tid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  if (const char* state = std::strstr(buf, "\nState:\t");
      state != nullptr && (state[8] == 'Z' || state[8] == 'X'))
    return -1;
  const char* at = std::strstr(buf, "\nTracerPid:");
  return at == nullptr ? -1 : static_cast<pid_t>(std::atol(at + 11));
}

// When task TID started (field 22 of /proc/TID/stat, clock ticks since
// boot; 0: gone or unreadable): with its tid, what names one task for good.
uint64_t StartTimeOf(int32_t tid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", tid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* at = std::strrchr(buf, ')');  // the name may hold anything
  if (at == nullptr) return 0;
  // Field N (N >= 3) follows the (N-2)th space after the name.
  for (int field = 3; field <= 22 && at != nullptr; ++field) at = std::strchr(at + 1, ' ');
  return at == nullptr ? 0 : std::strtoull(at + 1, nullptr, 10);
}

}  // namespace

// Validates and carries out what the helper reports (see "Trust" in the
// header). Time is pfmd's own; a malformed message, or one naming a task
// that was not announced, ends the conversation (the helper sees EOF and
// detaches cleanly).
void TracerProcess::ReadLoop() {
  const TaskId root{pid_, pid_};
  CoreHooks* const core = host_.core;
  auto cpu_of = [&](int32_t cpu) { return cpu >= 0 && cpu < host_.cpus ? cpu : 0; };
  // The live tasks, by tid.
  std::map<int32_t, TaskId> live = {{pid_, root}};
  int64_t root_status = -1;
  bool ended = false;
  // The live tasks the helper bound to one CPU (kBound): the CPU, and the
  // affinity to give back should the helper die without detaching.
  struct Bound {
    int32_t cpu;
    cpu_set_t own;
    uint64_t started;  // StartTimeOf the task, when it was the helper's
  };
  std::map<int32_t, Bound> bound;
  // The task a message names, if it is live.
  auto known = [&](const WireTask& w, TaskId* out) {
    auto it = live.find(w.tid);
    if (it == live.end() || it->second.pid != w.pid) return false;
    *out = it->second;
    return true;
  };
  // The mapping list whose last part has not come yet: one at a time (the
  // helper sends a list's parts back to back), so a helper cannot make
  // pfmd hold more than kMaxMapsListBytes of unfinished lists.
  struct PartialMaps {
    int32_t pid = 0;  // 0: none
    std::vector<Mapping> mappings;
    size_t bytes = 0;  // encoded, in the parts so far
    bool cut = false;  // a part said kMapsCut
  };
  PartialMaps part;
  MsgHeader h;
  std::string p;
  // A fixed-size message: exactly sizeof(*m) bytes.
  auto fixed = [&p](auto* m) {
    if (p.size() != sizeof(*m)) return false;
    std::memcpy(m, p.data(), sizeof(*m));
    return true;
  };
  while (ReadMsg(fd_, &h, &p)) {
    const uint64_t now = MonotonicNs();
    bool ok = true;
    TaskId task;
    switch (h.type) {
      case kDrain: {
        uint32_t n = 0;
        int32_t cpu = 0;
        WireTask wt{};
        if (p.size() >= kDrainHead) {
          std::memcpy(&wt, p.data() + sizeof(WireStats), sizeof(wt));
          std::memcpy(&cpu, p.data() + sizeof(WireStats) + sizeof(wt), 4);
          std::memcpy(&n, p.data() + sizeof(WireStats) + sizeof(wt) + 4, 4);
        }
        if (p.size() < kDrainHead || n > kHelperDsRecords ||
            p.size() != kDrainHead + size_t{n} * sizeof(pfm_bts_raw) ||
            !known(wt, &task)) {
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
            std::memcpy(&r, p.data() + kDrainHead + i * sizeof(r), sizeof(r));
            // Soft BTS sees user mode only: a kernel address is not a
            // branch this tracer can have seen.
            if (PFM_ADDR_IS_KERNEL(r.from) || PFM_ADDR_IS_KERNEL(r.to)) continue;
            r.flags &= PFM_BTS_RAW_GAP;  // the only flag soft BTS writes
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
        WireTask wt{};
        if (!fixed(&wt) || !known(wt, &task)) {
          ok = false;
          break;
        }
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
          WireTask task;
          uint8_t in, preempt;
          uint16_t pad;
        } m;
        if (!fixed(&m) || !known(m.task, &task)) {
          ok = false;
          break;
        }
        KernelLockGuard l(host_.lock);
        core->ContextSwitch(cpu_of(m.cpu), now, m.in ? TaskId{} : task,
                            m.in ? task : TaskId{}, m.preempt != 0);
        break;
      }
      case kTaskCreated: {
        WireTask m[2];
        if (!fixed(&m)) {
          ok = false;
          break;
        }
        TaskId parent;
        const TaskId child{m[1].pid, m[1].tid};
        const bool thread = child.pid == m[0].pid;
        if (!known(m[0], &parent) || child.tid <= 0 || child.pid <= 0 ||
            live.count(child.tid) != 0 ||
            !(thread || (options_.inherit && child.pid == child.tid))) {
          ok = false;
          break;
        }
        // Gone already (short-lived) is fine: it cannot be anyone else's
        // now. Alive, it must be the helper's tracee: TracerPid names the
        // tracer *thread*, which must be one of the helper's.
        const pid_t tracer = TracerOf(child.tid);
        char helper_task[64];
        std::snprintf(helper_task, sizeof(helper_task), "/proc/%d/task/%d", helper_, tracer);
        if (tracer >= 0 && tracer != helper_ && ::access(helper_task, F_OK) != 0) {
          ok = false;
          break;
        }
        live[child.tid] = child;
        KernelLockGuard l(host_.lock);
        core->TaskCreated(parent, child, now);
        break;
      }
      case kBound: {
        tracer_protocol::WireBound m;
        if (!fixed(&m) || !known(m.task, &task) || m.cpu < 0 || m.cpu >= CPU_SETSIZE ||
            m.n == 0 || m.n > sizeof(cpu_set_t)) {
          ok = false;
          break;
        }
        Bound b{m.cpu, {}, 0};
        CPU_ZERO(&b.own);
        std::memcpy(&b.own, m.own, m.n);
        if (CPU_COUNT(&b.own) == 0) {
          ok = false;
          break;
        }
        {
          // Stats come with drains; a task bound may not drain for long
          // (blocked): status shows its CPU from now on.
          std::lock_guard<std::mutex> lk(mu_);
          stats_.bound_cpu = m.cpu;
        }
        // Kept only for a task the helper traces now (its TracerPid one of
        // the helper's threads), with the time it started: pfmd, root,
        // changes nothing of a task that is not that one (pid reuse).
        const pid_t tracer = TracerOf(task.tid);
        char helper_task[64];
        std::snprintf(helper_task, sizeof(helper_task), "/proc/%d/task/%d", helper_, tracer);
        if (tracer <= 0 || (tracer != helper_ && ::access(helper_task, F_OK) != 0)) break;
        b.started = StartTimeOf(task.tid);
        if (b.started == 0 || TracerOf(task.tid) != tracer) break;
        bound[task.tid] = b;
        break;
      }
      case kTaskExec: {
        WireTask wt{};
        if (!fixed(&wt) || !known(wt, &task)) {
          ok = false;
          break;
        }
        KernelLockGuard l(host_.lock);
        core->TaskExec(task, now);
        break;
      }
      case kExited: {
        struct {
          WireTask task;
          int64_t status;
        } m;
        if (!fixed(&m) || !known(m.task, &task)) {
          ok = false;
          break;
        }
        live.erase(task.tid);
        bound.erase(task.tid);
        if (task == root) root_status = m.status;
        {
          KernelLockGuard l(host_.lock);
          core->TaskExit(task, now, m.status);
          if (live.empty() && host_.exited) host_.exited(root_status);
        }
        if (live.empty()) {
          ended = true;
          MarkDone();
        }
        break;
      }
      case kSignaled: {
        struct {
          WireTask task;
          int32_t signo;
        } m;
        if (!fixed(&m) || !known(m.task, &task)) {
          ok = false;
          break;
        }
        if (m.signo > 0 && m.signo < 65) {
          KernelLockGuard l(host_.lock);
          core->TaskSignaled(task, now, m.signo);
          if (host_.signaled) host_.signaled(m.signo);
        }
        break;
      }
      case kMaps: {
        int32_t pid = 0;
        uint32_t flags = ~0u;
        std::vector<Mapping> m;
        if (p.size() >= 8) {
          std::memcpy(&pid, p.data(), 4);
          std::memcpy(&flags, p.data() + 4, 4);
        }
        if (p.size() < 8 || (flags & ~(kMapsMore | kMapsCut)) != 0 ||
            DecodeMappings(std::string_view(p).substr(8), &m, nullptr) != 0) {
          ok = false;
          break;
        }
        // A list in parts (tracer_protocol.h): put together here, kept
        // once its last part came; never over kMaxMapsListBytes, and
        // another process's part before the last is a protocol error.
        if (part.pid != 0 && part.pid != pid) {
          ok = false;
          break;
        }
        // The list of a process no longer traced is dropped, not an error:
        // the helper's maps thread can send a child's list just after its
        // tracer thread reported the child's exit (a child that exits at
        // once). Before, pfmd closed the channel at that, and the helper
        // detached everything mid-tree.
        bool traced = false;
        for (const auto& [tid, t] : live) traced |= t.pid == pid;
        if (!traced) {
          part = PartialMaps();
          break;
        }
        part.pid = pid;
        part.bytes += p.size() - 8;
        if (part.bytes > kMaxMapsListBytes ||
            part.mappings.size() + m.size() > kMaxMappings) {
          ok = false;
          break;
        }
        if (part.mappings.empty()) {
          part.mappings = std::move(m);
        } else {
          part.mappings.insert(part.mappings.end(), std::make_move_iterator(m.begin()),
                               std::make_move_iterator(m.end()));
        }
        part.cut |= (flags & kMapsCut) != 0;
        if (flags & kMapsMore) break;
        ProcessMaps pm;
        pm.pid = pid;
        pm.time_ns = now;  // pfmd's clock, as for the records
        pm.mappings = std::move(part.mappings);
        pm.cut = part.cut;
        const size_t bytes = part.bytes;
        part = PartialMaps();
        std::lock_guard<std::mutex> lk(mu_);
        KeepMapsLocked(std::make_shared<const ProcessMaps>(std::move(pm)), bytes);
        break;
      }
      case kDebugEnded:
        if (!p.empty()) {
          ok = false;
          break;
        }
        // Never past what was opened: a helper cannot make a channel look
        // ended before pfmd passed it.
        if (debug_ended_.load() < debug_opened_.load()) debug_ended_.fetch_add(1);
        break;
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
  // closing our side makes a live helper detach and exit. Tasks it did not
  // report gone were detached and run on untraced: they are not exits.
  ::shutdown(fd_, SHUT_RDWR);
  if (!ended) {
    // A helper that detached gave every task its affinity back; one that
    // died (SIGKILL) could not: a task still on just its one CPU gets its
    // own back here (not a task that only has its tid now: its start time
    // is another). When this side ended the conversation, the helper,
    // still detaching, may do the same after: both give the same mask.
    for (const auto& [tid, b] : bound) {
      if (live.count(tid) == 0 || StartTimeOf(tid) != b.started) continue;
      cpu_set_t now, one;
      CPU_ZERO(&now);
      CPU_ZERO(&one);
      CPU_SET(b.cpu, &one);
      if (::sched_getaffinity(tid, sizeof(now), &now) == 0 && CPU_EQUAL(&now, &one))
        (void)::sched_setaffinity(tid, sizeof(b.own), &b.own);
    }
    KernelLockGuard l(host_.lock);
    for (const auto& [tid, t] : live) core->TaskDetached(t, MonotonicNs());
  }
  MarkDone();
  std::lock_guard<std::mutex> lk(mu_);
  stats_.bound_cpu = -1;  // nothing is bound by this tracer any more
  stopped_ = true;  // the reader is finished
  cv_.notify_all();
}

SoftBtsTracer::Stats TracerProcess::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void TracerProcess::KeepMapsLocked(std::shared_ptr<const ProcessMaps> list,
                                   size_t bytes) {
  // Room first, within both bounds: the oldest list of another process
  // goes first, then the root's oldest; the root's newest stays whatever
  // happens (so at most it and the new list are over the byte bound).
  while (!maps_.empty() && (maps_.size() >= kMaxMapsHistory ||
                            maps_bytes_ + bytes > kMaxMapsHistoryBytes)) {
    auto victim = std::find_if(maps_.begin(), maps_.end(),
                               [&](const NumberedMaps& x) { return x.maps->pid != pid_; });
    if (victim == maps_.end()) {
      // Only the root's lists: the oldest, unless it is the only one and
      // the new list is another process's.
      if (maps_.size() == 1 && list->pid != pid_) break;
      victim = maps_.begin();
    }
    maps_bytes_ -= victim->bytes;
    maps_.erase(victim);
  }
  maps_bytes_ += bytes;
  maps_.push_back(NumberedMaps{++maps_received_, std::move(list), bytes});
}

ProcessMaps TracerProcess::maps() const { return *numbered_maps().maps; }

TracerProcess::NumberedMaps TracerProcess::numbered_maps() const {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = maps_.rbegin(); it != maps_.rend(); ++it)
    if (it->maps->pid == pid_) return *it;
  ProcessMaps none;
  none.pid = pid_;
  return NumberedMaps{0, std::make_shared<const ProcessMaps>(std::move(none))};
}

std::vector<TracerProcess::NumberedMaps> TracerProcess::maps_since(
    uint64_t seq, size_t max_lists, uint64_t* newest) const {
  std::lock_guard<std::mutex> lk(mu_);
  *newest = maps_received_;
  // Numbers grow along the vector (lists are appended, and erased anywhere).
  auto it = std::lower_bound(
      maps_.begin(), maps_.end(), seq,
      [](const NumberedMaps& m, uint64_t s) { return m.seq < s; });
  std::vector<NumberedMaps> out;
  for (; it != maps_.end() && out.size() < max_lists; ++it) out.push_back(*it);
  return out;
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

int TracerProcess::OpenDebugChannel(UniqueFd* client, ErrorDetail* d) {
  if (done()) return SetError(d, -ESRCH, "the tracer of pid %d is gone", pid_);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return SetError(d, -errno, "socketpair failed: %s", strerror(errno));
  const uint8_t zero = 0;
  const std::string f = Frame(tracer_protocol::kDebugOpen, &zero, 1);
  bool sent;
  // Counted before the helper can have it: its kDebugEnded may come back
  // before SendWithFd returns.
  debug_opened_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lk(send_mu_);
    sent = fd_ >= 0 && tracer_protocol::SendWithFd(fd_, f, sv[1]);
  }
  ::close(sv[1]);
  if (!sent) {
    debug_opened_.fetch_sub(1);
    ::close(sv[0]);
    return SetError(d, -EPIPE, "the tracer of pid %d does not answer", pid_);
  }
  client->reset(sv[0]);
  return 0;
}

void TracerProcess::CloseDebugChannel() {
  Send(tracer_protocol::kDebugClose, nullptr, 0, false);
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
  {
    // A stopped tracer may still be asked to send (a session on its pid
    // that ends later closes its debug channel): never to a reused number.
    std::lock_guard<std::mutex> lk(send_mu_);
    ::close(fd_);
    fd_ = -1;
  }
  MarkDone();
  reaped_ = true;
}

}  // namespace pfm
