// The session manager's lifetime, the drivers' callbacks and every query;
// creation and release are in session_create.cc.
#include "userspace/pfmd/session_manager.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "kernel/drivers/credentials.h"
#include "kernel/drivers/ptrace/tracer_process.h"
#include "kernel/uapi/counter_scale.h"
#include "pfm/events.h"
#include "userspace/pfmd/errno_status.h"
#include "userspace/pfmd/host_tracers.h"
#include "userspace/pfmd/session_manager_internal.h"
#include "userspace/pfmd/sim_runner.h"

namespace pfm {

using session_internal::kSnapshotDrainWait;
using session_internal::kTracerProcessBytes;
using session_internal::kMaxSimRunNs;

namespace {

// What soft BTS covers on the host, for `status`: switch records probed as a
// tracer opens them (user-only, on a task: what an unprivileged client's
// tracer asks for).
MachineInfo WithSoftBtsScope(MachineInfo m, bool host) {
  if (!host || !m.soft_bts) return m;
  std::unique_ptr<PerfSampler> probe;
  ErrorDetail d;
  const int rc = PerfSampler::OpenSwitchWatcher(PerfTarget::Task(::getpid()), 1, &probe, &d);
  m.soft_bts_scope = absl::StrCat(
      "user mode only; every thread of a traced process, its children with --inherit "
      "(pfmctl record: by default); switch records ",
      rc == 0 ? "from the kernel (perf context_switch of each traced task)"
              : absl::StrCat("inferred from CPU changes (", d.message, ")"));
  return m;
}

}  // namespace

SessionManager::SessionManager(PfmdConfig config, MachineInfo machine,
                               SessionManagerDeps deps)
    : config_(std::move(config)),
      machine_(WithSoftBtsScope(std::move(machine), config_.driver != "sim")),
      clock_(deps.clock != nullptr ? deps.clock : &monotonic_),
      after_target_checked_(std::move(deps.after_target_checked)),
      before_tracer_start_(std::move(deps.before_tracer_start)),
      kernel_(std::make_unique<Kernel>(machine_, [&] {
        KernelOptions ko;
        ko.mux_interval_ns = uint64_t(config_.mux_interval_ms) * 1000000ull;
        return ko;
      }())),
      accountant_(config_.mem_limit_per_uid, config_.mem_limit_total) {
  if (config_.driver == "sim") {
    SimConfig sc;
    sc.machine = machine_;
    sc.tasks = config_.sim_tasks;
    sc.seed = config_.sim_seed;
    sim_ = std::make_unique<SimRunner>(kernel_.get(), sc, config_.sim_speed,
                                       config_.sim_paused);
  } else {
    HostTracers::Callbacks cb;
    cb.exited = [this](TaskId t, int64_t st) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      OnTaskExitedLocked(t, st);
    };
    cb.signaled = [this](TaskId t, int signo) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      OnTaskSignaledLocked(t, signo);
    };
    tracers_ = std::make_unique<HostTracers>(kernel_.get(), std::move(cb));
    ErrorDetail d;
    ProbePerfCaps("/sys/bus/event_source/devices", &perf_caps_, &d);

  }
}

SessionManager::~SessionManager() {
  {
    KernelLockGuard l(&kernel_->lock());
    for (auto& [id, s] : sessions_) ReleaseLocked(*s);
    sessions_.clear();
  }
  // Tracers (their processes report into the kernel) and the sim thread
  // stop before the kernel goes: member order.
  tracers_.reset();
  sim_.reset();
}

uint64_t SessionManager::NowLocked() const {
  return sim_ ? sim_->machine().now() : clock_->NowNs();
}

bool SessionManager::Idle() const {
  KernelLockGuard l(&kernel_->lock());
  return sessions_.empty();
}

void SessionManager::ReapTracers() {
  if (!tracers_) return;
  tracers_->Reap();
  KernelLockGuard l(&kernel_->lock());
  ExpireDebugChannelsLocked();
}

void SessionManager::Disconnected(ConnectionId conn) {
  {
    KernelLockGuard l(&kernel_->lock());
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second->conn == conn && !it->second->spec.detached) {
        ReleaseLocked(*it->second);
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  ReapTracers();
}

void SessionManager::OnTaskExitedLocked(TaskId task, int64_t status) {
  for (auto& [id, s] : sessions_)
    if (s->host_bts && s->spec.pid == task.pid && !s->exited) {
      s->exited = true;
      s->exit_status = status;
    }
}

void SessionManager::OnTaskSignaledLocked(TaskId task, int signo) {
  for (auto& [id, s] : sessions_)
    if (s->host_bts && s->spec.pid == task.pid && !s->exited) s->fatal_signal = signo;
}

// ---- reading ----

absl::StatusOr<SessionManager::Session*> SessionManager::FindLocked(const Peer& peer,
                                                                    SessionId id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || (it->second->uid != peer.uid && !peer.privileged()))
    return absl::NotFoundError(absl::StrCat("no session ", id));
  return it->second.get();
}

uint64_t SessionManager::PoolShareLocked(const Session& s) const {
  if (!s.charged || s.pool == 0) return 0;
  // The uid's share, by the accountant's own split rule, divided among the
  // uid's sessions on the pool: floor each, the remainder one byte each to
  // the lowest ids, so the sessions' shares add up to the uid's.
  const uint64_t share = accountant_.ShareOf(s.uid, s.pool);
  std::vector<SessionId> mine;
  for (const auto& [id, o] : sessions_)
    if (o->uid == s.uid && o->pool == s.pool && o->charged) mine.push_back(id);
  if (mine.empty()) return 0;
  const uint64_t n = mine.size();
  const size_t rank = static_cast<size_t>(
      std::find(mine.begin(), mine.end(), s.id) - mine.begin());
  return share / n + (rank < share % n ? 1 : 0);
}

bool SessionManager::TargetExitedLocked(const Session& s) const {
  if (s.spec.pid <= 0) return false;
  if (sim_) return !sim_->machine().HasTask(s.spec.pid);
  if (s.exited) return true;
  return s.pidfd.valid() && !PidfdAlive(s.pidfd.get());
}

SessionInfo SessionManager::InfoLocked(const Session& s, bool detail) const {
  SessionInfo o;
  o.id = s.id;
  o.uid = s.uid;
  o.role = s.spec.role;
  o.target = s.target;
  o.comm = s.comm;
  o.bts = s.spec.bts;
  o.filter = s.spec.filter;
  o.format = s.spec.format;
  o.detached = s.spec.detached;
  o.buffer_bytes = s.buffer_bytes;
  o.charged_bytes =
      (s.charged ? s.ring_bytes + s.overhead_bytes : 0) + PoolShareLocked(s);
  ConsumerStats st;
  if (s.consumer && kernel_->ConsumerStatsOf(s.consumer, &st) == 0) {
    o.has_stream = true;
    o.records = st.records;
    o.lost = st.lost;
    o.overwritten = st.overwritten;
  }
  if (s.spec.pid > 0) {
    if (s.exited) o.exit_status = s.exit_status;
    o.state = TargetExitedLocked(s) ? TaskState::kExited : TaskState::kRunning;
    o.fatal_signal = s.fatal_signal;
  }
  if (!detail) return o;
  const uint64_t now = NowLocked();
  auto reading = [&](const Session::Req& q, RequestInfo* out)
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock()) {
    PmuArbiter::Reading& r = out->reading;
    if (q.muxed) {
      MuxReadingLocked(s, static_cast<size_t>(&q - s.reqs.data()), now, &r);
    } else if (q.perf >= 0) {
      // The host kernel's own count, with its enabled/running times.
      PerfCount pc;
      ErrorDetail d;
      if (s.perf[q.perf]->Read(&pc, &d) != 0) return;
      r.value = pc.value;
      r.time_enabled = pc.time_enabled;
      r.time_running = pc.time_running;
      const CounterScale sc = ScaleCounter(pc.value, pc.time_enabled, pc.time_running);
      r.counted = sc.counted;
      r.ratio = sc.ratio;
      r.scaled = sc.scaled;
    } else if (kernel_->ReadRequest(q.id, now, &r) != 0) {
      return;
    }
    out->readable = true;
  };
  if (s.pebs_request) {
    RequestInfo c;
    c.request = s.pebs_request;
    c.label = s.spec.pebs_event;
    c.pebs = true;
    c.pebs_period = s.spec.pebs_period;
    Session::Req pq;
    pq.id = s.pebs_request;
    reading(pq, &c);
    o.counters.push_back(std::move(c));
  }
  for (const Session::Req& r : s.reqs) {
    RequestInfo c;
    c.request = r.id;
    c.label = r.label;
    c.pinned = r.pinned;
    reading(r, &c);
    (r.breakpoint ? o.breakpoints : o.counters).push_back(std::move(c));
  }
  if (s.host_bts) {
    if (const TracerProcess* t = s.tracer.get()) o.soft_bts = t->stats();
  }
  return o;
}

absl::StatusOr<SessionInfo> SessionManager::Show(const Peer& peer, SessionId id) {
  KernelLockGuard l(&kernel_->lock());
  ExpireDebugChannelsLocked();
  absl::StatusOr<Session*> s = FindLocked(peer, id);
  if (!s.ok()) return s.status();
  return InfoLocked(**s, true);
}

absl::StatusOr<MapsLists> SessionManager::Maps(const Peer& peer, SessionId id,
                                               uint64_t seq, bool current,
                                               size_t max_lists) {
  std::shared_ptr<TracerProcess> tracer;
  {
    KernelLockGuard l(&kernel_->lock());
    absl::StatusOr<Session*> s = FindLocked(peer, id);
    if (!s.ok()) return s.status();
    if ((*s)->host_bts) tracer = (*s)->tracer;
  }
  MapsLists out;
  if (tracer == nullptr) return out;
  if (current) {
    TracerProcess::NumberedMaps m = tracer->numbered_maps();
    uint64_t newest = 0;
    tracer->maps_since(~uint64_t{0}, 0, &newest);
    out.newest = newest;
    if (m.seq != 0 && m.seq >= seq && max_lists > 0)
      out.lists.push_back(MapsLists::List{m.seq, std::move(m.maps)});
    return out;
  }
  for (TracerProcess::NumberedMaps& m : tracer->maps_since(seq, max_lists, &out.newest))
    out.lists.push_back(MapsLists::List{m.seq, std::move(m.maps)});
  return out;
}

std::vector<SessionInfo> SessionManager::List(const Peer& peer, SessionId after,
                                               size_t limit) {
  KernelLockGuard l(&kernel_->lock());
  std::vector<SessionInfo> out;
  for (auto it = sessions_.upper_bound(after); it != sessions_.end() && out.size() < limit;
       ++it) {
    const Session& s = *it->second;
    if (s.uid != peer.uid && !peer.privileged()) continue;
    out.push_back(InfoLocked(s, false));
  }
  return out;
}

void SessionManager::DrainTracerOf(const Peer& peer, SessionId id) {
  // A soft-BTS tracer holds up to a DS area of branches in its process:
  // ask it to drain, and wait (on a condition its reader signals) without
  // the kernel lock, which its drain takes. Tracers are only stopped by
  // ReapTracers, on a request thread after the request.
  std::shared_ptr<TracerProcess> tracer;  // alive while it is waited on
  {
    KernelLockGuard l(&kernel_->lock());
    absl::StatusOr<Session*> s = FindLocked(peer, id);
    if (s.ok() && (*s)->host_bts && (*s)->tracer && !(*s)->tracer->done())
      tracer = (*s)->tracer;
  }
  if (tracer != nullptr) tracer->WaitDrain(tracer->RequestDrain(), kSnapshotDrainWait);
}

absl::Status SessionManager::Kill(const Peer& peer, SessionId id) {
  // What the tracer still holds reaches the ring before the ring ends: a
  // stream of a killed session is complete up to the kill.
  DrainTracerOf(peer, id);
  {
    KernelLockGuard l(&kernel_->lock());
    absl::StatusOr<Session*> s = FindLocked(peer, id);
    if (!s.ok()) return s.status();
    ReleaseLocked(**s);
    sessions_.erase(id);
  }
  ReapTracers();
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> SessionManager::Debug(const Peer& peer, SessionId id) {
  KernelLockGuard l(&kernel_->lock());
  ExpireDebugChannelsLocked();
  absl::StatusOr<Session*> found = FindLocked(peer, id);
  if (!found.ok()) return found.status();
  Session* s = *found;
  if (!s->spec.debug)
    return absl::FailedPreconditionError(absl::StrCat(
        "session ", s->id, " was not created for run control (debug: true)"));
  if (s->debug_channel)
    return absl::FailedPreconditionError(
        absl::StrCat("session ", s->id, " has its debug channel already"));
  // The session's own tracer, never the one of a process at a recycled pid.
  TracerProcess* t = s->tracer.get();
  if (t == nullptr || t->done() || TargetExitedLocked(*s))
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", s->spec.pid, " is no longer traced (it exited)"));
  for (const auto& [oid, o] : sessions_)
    if (o->debug_channel && o->tracer.get() == t)
      return absl::FailedPreconditionError(absl::StrCat(
          "pid ", s->spec.pid, " is under a debugger already (session ", oid,
          "): one debugger per process"));
  UniqueFd fd;
  ErrorDetail d;
  if (const int rc = t->OpenDebugChannel(&fd, &d); rc < 0) return ErrnoToStatus(rc, d);
  s->debug_channel = true;
  return fd;
}

absl::StatusOr<RingHandle> SessionManager::Ring(const Peer& peer, SessionId id,
                                                bool drain) {
  if (drain) DrainTracerOf(peer, id);
  KernelLockGuard l(&kernel_->lock());
  absl::StatusOr<Session*> s = FindLocked(peer, id);
  if (!s.ok()) return s.status();
  pfm::Ring* ring = (*s)->consumer ? kernel_->ConsumerRing((*s)->consumer) : nullptr;
  if (ring == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(
        "session ", (*s)->id, " has no record stream (no --bts or --pebs)"));
  // Bring the ring up to date: drain the CPU the target runs on.
  if (drain) {
    for (int cpu = 0; cpu < machine_.cpus; ++cpu) {
      const TaskId t = kernel_->Running(cpu);
      if ((*s)->spec.cpu == cpu || ((*s)->spec.pid > 0 && t.pid == (*s)->spec.pid))
        kernel_->DrainCpu(cpu, NowLocked());
    }
  }
  RingHandle h;
  const int fd = ::fcntl(ring->fd(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot pass the ring: ", strerror(errno)));
  h.fd = UniqueFd(fd);
  h.id = (*s)->id;
  h.mode = (*s)->spec.bts;
  h.format = (*s)->spec.format;
  h.target = (*s)->target;
  h.mapped_bytes = ring->mapped_bytes();
  return h;
}

StatusInfo SessionManager::Status() {
  StatusInfo st;
  st.driver = config_.driver;
  st.machine = machine_;
  st.limit_per_uid = config_.mem_limit_per_uid;
  st.limit_total = config_.mem_limit_total;
  KernelLockGuard l(&kernel_->lock());
  st.sessions = sessions_.size();
  st.allocated = accountant_.Allocated();
  st.held = HeldLocked();
  st.charged = accountant_.Charges();
  return st;
}

MetricsInfo SessionManager::Metrics() {
  MetricsInfo m;
  m.gp_counters = machine_.gp_counters;
  m.fixed_counters = machine_.fixed_counters;
  m.debug_registers = machine_.debug_registers;
  m.limit_per_uid = config_.mem_limit_per_uid;
  m.limit_total = config_.mem_limit_total;
  m.slots.resize(static_cast<size_t>(std::max(machine_.cpus, 0)));
  std::vector<PmuArbiter::Holder> holders;
  KernelLockGuard l(&kernel_->lock());
  ExpireDebugChannelsLocked();  // scrapes see what resources sees
  m.sessions.reserve(sessions_.size());
  for (const auto& [id, s] : sessions_) {
    MetricsInfo::Session o;
    o.id = id;
    o.uid = s->uid;
    o.role = s->spec.role;
    ConsumerStats st;
    if (s->consumer && kernel_->ConsumerStatsOf(s->consumer, &st) == 0) {
      o.has_stream = true;
      o.records = st.records;
      o.lost = st.lost;
      o.overwritten = st.overwritten;
    }
    m.sessions.push_back(o);
  }
  m.allocated = accountant_.Allocated();
  m.held = HeldLocked();
  m.charged = accountant_.Charges();
  const uint64_t now = NowLocked();
  kernel_->DescribeHolders(now, &holders);
  for (const PmuArbiter::Holder& h : holders) {
    bool on = false;
    std::optional<double> host_ratio;
    std::string label;
    if (HostRequestLocked(h.session, h.id, now, &on, &host_ratio, &label)) {
      // Host breakpoints and counters: the kernel's registers and counts
      // (host_breakpoints.cc), as session show and resources give them,
      // not the arbiter's bookkeeping, which on the host follows a task
      // only when a soft-BTS tracer reports its switches.
      if (host_ratio) m.requests.push_back({h.session, h.id, label, *host_ratio});
      if (h.breakpoint && on) ++m.host_breakpoints_on;
      continue;
    }
    if (h.ratio >= 0)
      m.requests.push_back({h.session, h.id, RequestLabelLocked(h.session, h.id, h.label),
                            h.ratio});
    if (!h.on_hw || h.on_cpu < 0 || static_cast<size_t>(h.on_cpu) >= m.slots.size())
      continue;
    MetricsInfo::CpuSlots& c = m.slots[static_cast<size_t>(h.on_cpu)];
    // Slot names are the arbiter's: "gp3", "fixed0", "dr1".
    if (h.breakpoint) {
      ++c.debug;
    } else if (std::strncmp(h.slot, "fixed", 5) == 0) {
      ++c.fixed;
    } else {
      ++c.gp;
    }
  }
  m.rotations = kernel_->Rotations();
  if (tracers_) {
    const HostTracers::Totals t = tracers_->TotalsLocked();
    m.tracers = t.processes;
    m.tracers_bound = t.bound_by_cpu;
    m.tracer_steps = t.steps;
    m.tracer_branches = t.branches;
  }
  return m;
}

std::string SessionManager::RequestLabelLocked(SessionId session, RequestId id,
                                               const char* fallback) const {
  auto it = sessions_.find(session);
  if (it != sessions_.end()) {
    const Session& s = *it->second;
    for (const Session::Req& q : s.reqs)
      if (q.id == id) return q.label;
    if (s.pebs_request != 0 && s.pebs_request == id) return s.spec.pebs_event;
  }
  return fallback;
}

uint64_t SessionManager::HeldLocked() const {
  uint64_t held = kernel_->HeldBytes();
  std::set<int32_t> traced;  // host: one tracer process per traced pid
  for (const auto& [id, s] : sessions_) {
    held += s->overhead_bytes;
    if (s->host_bts) traced.insert(s->spec.pid);
  }
  return held + traced.size() * kTracerProcessBytes;
}

SessionManager::MemoryTotals SessionManager::Memory() {
  KernelLockGuard l(&kernel_->lock());
  MemoryTotals m;
  for (const auto& [id, s] : sessions_) m.sessions += InfoLocked(*s, false).charged_bytes;
  m.allocated = accountant_.Allocated();
  m.held = HeldLocked();
  return m;
}

ResourcesInfo SessionManager::Resources(const Peer& peer) {
  KernelLockGuard l(&kernel_->lock());
  ExpireDebugChannelsLocked();  // a dead debugger's points are not shown
  const uint64_t now = NowLocked();
  std::vector<PmuArbiter::Holder> holders;
  kernel_->DescribeHolders(now, &holders);
  // Who may see whom: the unprivileged see their own sessions' holders and
  // anonymous "held" slots for others'.
  auto visible = [&](uint64_t session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock()) {
    auto it = sessions_.find(session);
    return peer.privileged() || (it != sessions_.end() && it->second->uid == peer.uid);
  };
  std::map<int, std::vector<HolderInfo>> by_cpu;
  std::map<int32_t, std::vector<HolderInfo>> by_task;
  for (const PmuArbiter::Holder& h : holders) {
    HolderInfo o;
    o.slot = h.slot;
    o.what = visible(h.session) ? RequestLabelLocked(h.session, h.id, h.label) : "(other uid)";
    o.kind = h.breakpoint ? "debug register" : "counter";
    o.session = h.session;
    o.mode = h.pinned ? "pinned" : "flexible";
    o.state = h.on_hw ? "on hw" : "waiting";
    if (h.ratio >= 0) o.ratio = h.ratio;
    // The host's debug registers are the kernel's: a pinned breakpoint
    // holds one while its event (or the tracer's) is open; a flexible one
    // while pfmd's rotation has it open (host_breakpoints.cc).
    bool on = false;
    if (h.breakpoint && HostRequestLocked(h.session, h.id, now, &on, &o.ratio)) {
      o.slot = on ? "dr" : "-";
      o.state = on ? "on hw" : "waiting";
    }
    (h.cpu >= 0 ? by_cpu[h.cpu] : by_task[h.pid]).push_back(std::move(o));
  }
  // BTS / PEBS holders: the consumers of each context.
  for (const auto& [id, s] : sessions_) {
    if (!s->consumer) continue;
    HolderInfo o;
    o.slot = s->spec.bts != BtsMode::kOff ? "bts" : "pebs";
    o.what = visible(id) ? absl::StrCat(Name(s->spec.role), " ", Name(s->spec.bts),
                                        s->spec.pebs_event.empty()
                                            ? ""
                                            : " +pebs " + s->spec.pebs_event)
                         : "(other uid)";
    o.kind = "debug store";
    o.session = id;
    o.mode = "shared";
    o.state = "attached";
    o.ratio = 1.0;
    (s->spec.task() ? by_task[s->spec.pid] : by_cpu[s->spec.cpu]).push_back(std::move(o));
  }
  ResourcesInfo r;
  for (int c = 0; c < machine_.cpus; ++c) {
    ResourcesInfo::Cpu cpu{c, kernel_->Running(c).pid, {}};
    if (auto it = by_cpu.find(c); it != by_cpu.end()) cpu.holders = std::move(it->second);
    r.cpus.push_back(std::move(cpu));
  }
  for (auto& [pid, list] : by_task) r.tasks.push_back({pid, std::move(list)});
  r.debug_registers = machine_.debug_registers;
  r.gp_counters = machine_.gp_counters;
  r.fixed_counters = machine_.fixed_counters;
  return r;
}

absl::StatusOr<SimReport> SessionManager::Sim(const Peer& peer, const SimRequest& req) {
  if (!sim_)
    return absl::FailedPreconditionError(
        "the sim command needs pfmd --driver sim (this one runs the host)");
  // The simulated machine is the daemon owner's test bench: its clock and
  // tasks are shared by every session on it.
  if (peer.uid != ::geteuid() && !peer.privileged())
    return absl::PermissionDeniedError(absl::StrCat(
        "the sim command is for the daemon's owner (uid ", ::geteuid(),
        ") or a privileged client; uid ", peer.uid, " is neither"));
  KernelLockGuard l(&kernel_->lock());
  SimMachine& sim = sim_->machine();
  SimReport out;
  using A = SimRequest::Action;
  switch (req.action) {
    case A::kPause:
    case A::kResume:
      sim_->set_paused(req.action == A::kPause);
      break;
    case A::kRun:
      if (req.ns == 0 || req.ns > kMaxSimRunNs)
        return absl::InvalidArgumentError(absl::StrCat(
            "sim run needs \"ns\": 1..", kMaxSimRunNs,
            " virtual nanoseconds per request (it holds the daemon while it runs)"));
      sim.Run(req.ns);
      break;
    case A::kExit:
      if (!sim.HasTask(req.pid))
        return absl::NotFoundError(absl::StrCat("no simulated task ", req.pid));
      sim.ExitTask(req.pid, 0);
      out.exited_pid = req.pid;
      break;
    case A::kStats: {
      // Exited tasks keep their stats.
      std::vector<int32_t> pids;
      if (req.pid >= 0) {
        SimMachine::TaskStats st{};
        if (sim.Stats(req.pid, &st) != 0)
          return absl::NotFoundError(absl::StrCat("no simulated task ", req.pid));
        pids.push_back(req.pid);
      } else {
        pids = sim.Pids();
      }
      for (int32_t pid : pids) {
        SimTaskStats t;
        t.pid = pid;
        if (sim.Stats(pid, &t.stats) != 0) continue;
        // The ground truth for every counter a visible session asks of it.
        for (const auto& [id, s] : sessions_) {
          if (s->spec.pid != pid || (s->uid != peer.uid && !peer.privileged())) continue;
          for (const Session::Req& r : s->reqs)
            if (!r.breakpoint)
              t.true_counts.emplace_back(r.label, sim.TrueCount(pid, r.type, r.config));
        }
        out.tasks.push_back(std::move(t));
      }
      break;
    }
  }
  out.now = sim.now();
  out.paused = sim_->paused();
  return out;
}

}  // namespace pfm
