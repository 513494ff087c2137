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
#include "userspace/pfmd/sim_runner.h"

namespace pfm {
namespace {

// Pools of shared DS buffers in the accountant: a task context's buffers by
// pid, a CPU catch-all's above 2^32.
PoolId TaskPool(int pid) { return static_cast<PoolId>(pid); }
PoolId CpuPool(int cpu) { return (1ull << 32) + static_cast<PoolId>(cpu); }

uint64_t AreaBytes(uint32_t bts, uint32_t pebs) {
  return uint64_t{bts} * sizeof(pfm_bts_raw) + uint64_t{pebs} * sizeof(pfm_pebs_raw);
}

// How long a snapshot waits for a soft-BTS tracer to hand over what it
// holds (a tracee stopped in a blocking syscall answers at once; the bound
// covers a tracer that does not answer).
constexpr std::chrono::milliseconds kSnapshotDrainWait{500};

// What pfmd itself holds for a session besides its ring and DS buffers: the
// session record, its requests and replies (an estimate, charged so a uid
// cannot grow pfmd without limit through sessions that have no ring); and
// per host perf_event fd, the kernel's perf_event and pfmd's PerfEvent.
constexpr uint64_t kSessionOverheadBytes = 4096;
constexpr uint64_t kPerfEventBytes = 4096;
// A soft-BTS tracer process: its private memory (decode cache, DS area,
// stacks), measured at 3.4 MiB private dirty (PSS 5.0 MiB, 1.7 of it the
// binary's pages shared with pfmd) on this machine, rounded up
// (docs/security.md). Part of the traced task's shared pool, split among
// the uids tracing it.
constexpr uint64_t kTracerProcessBytes = 4ull << 20;
// `sim run` advances at most this much virtual time per request, so one
// request holds the daemon for about a second at most.
constexpr uint64_t kMaxSimRunNs = 10'000'000'000ull;

}  // namespace

struct SessionManager::Session {
  struct Req {
    RequestId id = 0;   // arbiter request (0: not arbitrated, a software event)
    std::string label;  // event name or breakpoint spec
    uint32_t type = 0;
    uint64_t config = 0;
    bool breakpoint = false;
    bool pinned = false;
    int perf = -1;  // host: index into `perf` (the kernel's counter)
  };
  SessionId id = 0;
  uid_t uid = 0;
  ConnectionId conn = 0;
  TypedSpec spec;
  std::string target;
  ConsumerId consumer = 0;
  uint64_t ring_bytes = 0;
  uint64_t buffer_bytes = 0;  // what the ring holds for the user
  PoolId pool = 0;
  bool charged = false;        // ring_bytes + overhead_bytes and the pool
  uint64_t overhead_bytes = 0;  // bookkeeping and perf events
  uint32_t pebs_request = 0;
  std::vector<Req> reqs;
  std::vector<std::unique_ptr<PerfEvent>> perf;  // host counters/breakpoints
  bool host_bts = false;                         // uses the pid's tracer
  UniqueFd pidfd;
  // The traced process's end, as its tracer saw it (host); kept per
  // session, so a new process at a recycled pid never inherits it.
  bool exited = false;
  int64_t exit_status = -1;
  int fatal_signal = 0;
};

SessionManager::SessionManager(PfmdConfig config, MachineInfo machine,
                               SessionManagerDeps deps)
    : config_(std::move(config)),
      machine_(std::move(machine)),
      clock_(deps.clock != nullptr ? deps.clock : &monotonic_),
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
  if (tracers_) tracers_->Reap();
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

// ---- creation ----

absl::Status SessionManager::CheckTargetLocked(const Peer& peer,
                                               const TypedSpec& spec,
                                               UniqueFd* pidfd) {
  if (spec.filter != TraceFilter::kUser) {
    if (absl::Status s = MayTracePrivileged(peer, "kernel-mode tracing"); !s.ok())
      return s;
  }
  if (!spec.task()) {
    if (spec.cpu >= machine_.cpus)
      return absl::InvalidArgumentError(absl::StrCat(
          "--cpu ", spec.cpu, ": this machine has cpus 0..", machine_.cpus - 1));
    return MayTracePrivileged(peer, "a CPU-wide session");
  }
  if (sim_) {
    // Simulated tasks have no owner on the host (docs/pfmd.md).
    SimMachine& sim = sim_->machine();
    if (!sim.HasTask(spec.pid)) {
      std::vector<int32_t> pids = sim.Pids();
      return absl::NotFoundError(absl::StrCat(
          "no simulated task ", spec.pid,
          pids.empty() ? std::string(" (no tasks left)")
                       : absl::StrCat(" (tasks are ", pids.front(), "..",
                                      pids.back(), ")")));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<UniqueFd> fd = OpenTraceTarget(peer, spec.pid);
  if (!fd.ok()) return fd.status();
  // The kernel's own answer, with the client's credentials: what a tracer
  // of this client would get (a tracer shared with other sessions was
  // attached with someone else's).
  ErrorDetail d;
  if (int err = RunWithCredentials(
          peer.TracerCredentials(), [&] { return ProbePtraceAccess(spec.pid, &d); }, &d);
      err < 0)
    return ErrnoToStatus(err, d);
  *pidfd = std::move(*fd);
  return absl::OkStatus();
}

absl::Status SessionManager::CheckCapsLocked(const Peer& peer, int perf_fds) {
  if (peer.privileged()) return absl::OkStatus();
  int sessions = 0, fds = 0;
  for (const auto& [id, o] : sessions_) {
    if (o->uid != peer.uid) continue;
    ++sessions;
    fds += static_cast<int>(o->perf.size());
  }
  if (sessions >= config_.max_sessions_per_uid)
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", peer.uid, " has ", sessions, " sessions (limit ",
        config_.max_sessions_per_uid, ", --max-sessions-per-uid)"));
  if (fds + perf_fds > config_.max_perf_fds_per_uid)
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", peer.uid, " holds ", fds, " perf events and asks for ", perf_fds,
        " more (limit ", config_.max_perf_fds_per_uid, ", --max-perf-fds-per-uid)"));
  return absl::OkStatus();
}

// Memory first: the ring (with the session's own overhead) and the share of
// the context's DS buffers are checked together, in one step.
absl::Status SessionManager::ChargeLocked(const Peer& peer, const TypedSpec& spec,
                                          Session* s) {
  const int perf_fds = sim_ ? 0 : static_cast<int>(spec.counters.size() +
                                                   spec.breakpoints.size());
  const uint64_t overhead = kSessionOverheadBytes + uint64_t(perf_fds) * kPerfEventBytes;
  if (!spec.consumer()) {
    if (absl::Status st = accountant_.Attach(
            peer.uid, overhead, 0, 0, 0,
            absl::StrCat("session ", s->id, "'s bookkeeping and perf events"));
        !st.ok())
      return st;
    s->overhead_bytes = overhead;
    s->charged = true;
    return absl::OkStatus();
  }
  ConsumerParams cp;
  cp.req.ctx_kind = spec.task() ? PFM_CTX_TASK : PFM_CTX_CPU;
  cp.req.pid = spec.pid;
  cp.req.cpu = spec.cpu;
  cp.req.bts = ToUapi(spec.bts);
  const uint64_t history_records =
      spec.bts == BtsMode::kHistory
          ? std::max<uint64_t>(1, (spec.buffer_bytes ? spec.buffer_bytes
                                                     : kDefaultHistoryRingBytes) /
                                      PFM_RECORD_FIXED_SIZE)
          : 0;
  cp.req.ring_bytes = spec.bts == BtsMode::kHistory
                          ? 0
                          : (spec.buffer_bytes ? spec.buffer_bytes : kDefaultLosslessRingBytes);
  cp.history_records = history_records;
  s->ring_bytes = PFM_RING_HEADER_BYTES + DsAllocator::RingDataBytes(cp);
  s->buffer_bytes = spec.bts == BtsMode::kHistory ? history_records * PFM_RECORD_FIXED_SIZE
                                                  : s->ring_bytes - PFM_RING_HEADER_BYTES;
  const DsLimits& lim = kernel_->ds_limits();
  uint64_t pool_bytes, pool_min;
  if (spec.task()) {
    s->pool = TaskPool(spec.pid);
    pool_bytes = AreaBytes(lim.task_bts_records, lim.task_pebs_records);
    pool_min = AreaBytes(lim.min_bts_records, lim.task_pebs_records);
    // On the host, the task's tracer process is part of what its tracers
    // share (it lives exactly as long as a branch consumer of the task).
    if (!sim_) {
      pool_bytes += kTracerProcessBytes;
      pool_min += kTracerProcessBytes;
    }
  } else {
    s->pool = CpuPool(spec.cpu);
    pool_bytes = AreaBytes(lim.cpu_bts_records, lim.cpu_pebs_records);
    pool_min = pool_bytes;
  }
  if (absl::Status st = accountant_.Attach(
          peer.uid, s->ring_bytes + overhead, s->pool, pool_bytes, pool_min,
          absl::StrCat("session ", s->id, "'s ring and bookkeeping"));
      !st.ok())
    return st;
  s->overhead_bytes = overhead;
  s->charged = true;
  return absl::OkStatus();
}

// Counters, PEBS and breakpoints: admission by the arbiter; on the host the
// kernel's perf events, opened with the client's credentials.
absl::Status SessionManager::AdmitRequestsLocked(const Peer& peer,
                                                 const TypedSpec& spec, Session* s) {
  const MachineInfo& m = machine_;
  std::vector<EncodedEvent> counters;
  for (const std::string& name : spec.counters) {
    absl::StatusOr<EncodedEvent> e = EncodeEvent(name);
    if (!e.ok()) return e.status();
    if (e->hardware && m.gp_counters == 0)
      return absl::UnimplementedError(absl::StrCat(
          "counter '", name, "' needs a hardware PMU: not supported on this "
          "machine (", m.pmu_desc, ")"));
    if (!e->hardware && sim_)
      return absl::UnimplementedError(absl::StrCat(
          "counter '", name, "' is a kernel software event: the simulated PMU "
          "models hardware events only (use --driver host)"));
    counters.push_back(*e);
  }
  const uint64_t now = NowLocked();
  pfm_pmu_req base{};
  base.ctx_kind = spec.task() ? PFM_CTX_TASK : PFM_CTX_CPU;
  base.pid = spec.pid;
  base.cpu = spec.cpu;
  if (spec.filter != TraceFilter::kUser) base.flags |= PFM_REQ_KERNEL;
  ErrorDetail d;
  if (!spec.pebs_event.empty()) {
    absl::StatusOr<EncodedEvent> e = EncodeEvent(spec.pebs_event);
    if (!e.ok()) return e.status();
    pfm_pmu_req r = base;
    r.kind = PFM_REQ_COUNTER;
    r.flags |= PFM_REQ_PEBS | (spec.pinned ? PFM_REQ_PINNED : 0);
    r.type = e->type;
    r.config = e->config;
    const int id = kernel_->AddRequest(r, s->id, spec.pebs_event.c_str(), now, &d);
    if (id < 0) return ErrnoToStatus(id, d);
    s->pebs_request = static_cast<uint32_t>(id);
  }
  const PerfTarget target = spec.task() ? PerfTarget::Task(spec.pid) : PerfTarget::Cpu(spec.cpu);
  const std::optional<Credentials> creds = peer.TracerCredentials();
  for (size_t i = 0; i < counters.size(); ++i) {
    pfm_pmu_req r = base;
    r.kind = PFM_REQ_COUNTER;
    r.flags |= spec.pinned ? PFM_REQ_PINNED : 0;
    r.type = counters[i].type;
    r.config = counters[i].config;
    Session::Req q{0, spec.counters[i], r.type, r.config, false, spec.pinned};
    // Kernel software events are not scarce hardware: no arbitration, the
    // host kernel counts them (perf_event_open).
    if (counters[i].hardware) {
      const int id = kernel_->AddRequest(r, s->id, spec.counters[i].c_str(), now, &d);
      if (id < 0) return ErrnoToStatus(id, d);
      q.id = static_cast<RequestId>(id);
    }
    if (!sim_) {
      auto pe = std::make_unique<PerfEvent>();
      // Opened with the client's credentials: the kernel's perf access
      // rules for that task apply (auth.h). An unprivileged client counts
      // user mode only, as the kernel allows at perf_event_paranoid >= 2.
      const int err = RunWithCredentials(
          creds,
          [&] {
            return counters[i].hardware
                       ? OpenHardwareCounter(perf_caps_, target, r.type, r.config,
                                             pe.get(), &d, creds.has_value())
                       : OpenSoftwareCounter(target, r.config, pe.get(), &d,
                                             creds.has_value());
          },
          &d);
      if (err < 0) {
        if (q.id) kernel_->RemoveRequest(q.id, now);
        return ErrnoToStatus(err, d);
      }
      q.perf = static_cast<int>(s->perf.size());
      s->perf.push_back(std::move(pe));
    }
    s->reqs.push_back(std::move(q));
  }
  for (const BreakpointSpec& bp : spec.breakpoints) {
    pfm_pmu_req r = base;
    r.kind = PFM_REQ_BREAKPOINT;
    // A debugger's breakpoints are never multiplexed (DESIGN §4).
    const bool pinned = spec.pinned || spec.role == Role::kDebugger;
    r.flags |= pinned ? PFM_REQ_PINNED : 0;
    r.bp_addr = bp.addr;
    r.bp_len = bp.len;
    r.bp_kind = bp.access == "r"    ? PFM_BP_R
                : bp.access == "w"  ? PFM_BP_W
                : bp.access == "rw" ? PFM_BP_RW
                                    : PFM_BP_X;
    const std::string label = bp.ToString();
    const int id = kernel_->AddRequest(r, s->id, label.c_str(), now, &d);
    if (id < 0) return ErrnoToStatus(id, d);
    Session::Req q{static_cast<RequestId>(id), label, 0, 0, true, pinned};
    if (!sim_) {
      // The host kernel holds the debug register (PERF_TYPE_BREAKPOINT); its
      // own refusal (ENOSPC) is passed on. bp_kind values are the kernel's
      // HW_BREAKPOINT_R/W/RW/X. An execute breakpoint is 1 byte in DR7 (the
      // spec's length), but perf's ABI wants bp_len = sizeof(long).
      auto pe = std::make_unique<PerfEvent>();
      const uint32_t len = r.bp_kind == PFM_BP_X ? sizeof(long) : bp.len;
      const int err = RunWithCredentials(
          creds,
          [&] {
            return OpenBreakpoint(perf_caps_, target, bp.addr, len, r.bp_kind,
                                  pe.get(), &d);
          },
          &d);
      if (err < 0) {
        kernel_->RemoveRequest(q.id, now);
        return ErrnoToStatus(err, d);
      }
      q.perf = static_cast<int>(s->perf.size());
      s->perf.push_back(std::move(pe));
    }
    s->reqs.push_back(std::move(q));
  }
  return absl::OkStatus();
}

// The consumer of the context's Debug Store stream.
absl::Status SessionManager::AttachConsumerLocked(const TypedSpec& spec, Session* s) {
  if (!spec.consumer()) return absl::OkStatus();
  ConsumerParams p;
  p.req.ctx_kind = spec.task() ? PFM_CTX_TASK : PFM_CTX_CPU;
  p.req.pid = spec.pid;
  p.req.cpu = spec.cpu;
  p.req.bts = ToUapi(spec.bts);
  p.req.filter = ToUapi(spec.filter);
  p.req.format = ToUapi(spec.format);
  // Profilers and catch-alls want to see switches; a debugger's small
  // history keeps branches only.
  if (spec.role == Role::kProfiler || !spec.task()) p.req.flags |= PFM_CONSUMER_SWITCHES;
  if (spec.block) p.req.flags |= PFM_CONSUMER_BLOCK;
  p.req.ring_bytes = s->ring_bytes - PFM_RING_HEADER_BYTES;
  p.history_records = spec.bts == BtsMode::kHistory
                          ? s->buffer_bytes / PFM_RECORD_FIXED_SIZE
                          : 0;
  p.session = s->id;
  p.pebs_request = s->pebs_request;
  p.pebs_period = spec.pebs_period;
  ErrorDetail d;
  const int id = kernel_->AttachConsumer(p, NowLocked(), &d);
  if (id < 0) return ErrnoToStatus(id, d);
  s->consumer = static_cast<ConsumerId>(id);
  return absl::OkStatus();
}

absl::StatusOr<SessionId> SessionManager::Create(const Peer& peer,
                                                 ConnectionId conn,
                                                 const TypedSpec& spec) {
  const MachineInfo& m = machine_;
  // What the machine cannot do is refused before anything is allocated.
  if (spec.bts != BtsMode::kOff && !m.bts && !m.soft_bts)
    return absl::UnimplementedError(absl::StrCat(
        "BTS is not supported on this machine (", m.pmu, ": ",
        m.pmu_desc.empty() ? "no Debug Store" : m.pmu_desc, ")"));
  if (spec.bts != BtsMode::kOff && !m.bts && spec.filter != TraceFilter::kUser)
    return absl::UnimplementedError(
        "kernel-mode branch tracing is not supported on this machine (soft "
        "BTS over ptrace sees user mode only)");
  if (!spec.pebs_event.empty() && !m.pebs)
    return absl::UnimplementedError(absl::StrCat(
        "PEBS is not supported on this machine (", m.pmu,
        m.pmu == "none" ? ": no 'cpu' PMU in /sys/bus/event_source/devices"
                        : ": no Debug Store",
        ")"));
  const bool need_tracer = !sim_ && spec.bts != BtsMode::kOff;
  SessionId created = 0;
  {
    KernelLockGuard l(&kernel_->lock());
    auto s = std::make_unique<Session>();
    s->uid = peer.uid;
    s->conn = conn;
    s->spec = spec;
    s->target = spec.task() ? absl::StrCat("pid ", spec.pid) : absl::StrCat("cpu ", spec.cpu);
    if (absl::Status st = CheckTargetLocked(peer, spec, &s->pidfd); !st.ok()) return st;
    const int perf_fds = sim_ ? 0 : static_cast<int>(spec.counters.size() +
                                                     spec.breakpoints.size());
    if (absl::Status st = CheckCapsLocked(peer, perf_fds); !st.ok()) return st;
    s->id = next_session_;
    // Memory, then the arbiter's admission, then the consumer: a refusal at
    // any step undoes the ones before (ReleaseLocked).
    if (absl::Status st = ChargeLocked(peer, spec, s.get()); !st.ok()) return st;
    if (absl::Status st = AdmitRequestsLocked(peer, spec, s.get()); !st.ok()) {
      ReleaseLocked(*s);
      return st;
    }
    if (absl::Status st = AttachConsumerLocked(spec, s.get()); !st.ok()) {
      ReleaseLocked(*s);
      return st;
    }
    s->host_bts = need_tracer;
    ++next_session_;
    created = s->id;
    sessions_[created] = std::move(s);
  }
  // The soft-BTS tracer of the target (one per pid, shared by its
  // sessions), started without the kernel lock: it reports into the kernel.
  if (need_tracer) {
    if (absl::Status st = tracers_->Start(spec.pid, peer, config_.max_tracers_per_uid);
        !st.ok()) {
      {
        KernelLockGuard l(&kernel_->lock());
        auto it = sessions_.find(created);
        if (it != sessions_.end()) {
          ReleaseLocked(*it->second);
          sessions_.erase(it);
        }
      }
      ReapTracers();
      return absl::Status(st.code(), absl::StrCat("soft BTS on pid ", spec.pid, ": ",
                                                  st.message()));
    }
  }
  return created;
}

void SessionManager::ReleaseLocked(Session& s) {
  const uint64_t now = NowLocked();
  for (const Session::Req& r : s.reqs)
    if (r.id) kernel_->RemoveRequest(r.id, now);
  s.reqs.clear();
  s.perf.clear();  // closes the host's perf events
  if (s.host_bts) {
    bool shared = false;
    for (const auto& [id, o] : sessions_)
      shared |= o.get() != &s && o->host_bts && o->spec.pid == s.spec.pid;
    if (!shared) tracers_->RetireLocked(s.spec.pid);
  }
  s.host_bts = false;
  if (s.pebs_request) kernel_->RemoveRequest(s.pebs_request, now);
  s.pebs_request = 0;
  if (s.consumer) kernel_->DetachConsumer(s.consumer, now);
  s.consumer = 0;
  if (s.charged) {
    const uint64_t shrunk =
        accountant_.Detach(s.uid, s.ring_bytes + s.overhead_bytes, s.pool);
    if (shrunk != 0 && s.spec.task()) {
      const DsLimits& lim = kernel_->ds_limits();
      const uint64_t fixed = AreaBytes(0, lim.task_pebs_records) +
                             (sim_ ? 0 : kTracerProcessBytes);
      const uint32_t bts = static_cast<uint32_t>(
          shrunk > fixed ? (shrunk - fixed) / sizeof(pfm_bts_raw) : 0);
      // The buffer holds whole records: charge what it really is.
      const int64_t real = kernel_->ResizeTaskBuffer(s.spec.pid, bts, now, nullptr);
      if (real > 0)
        accountant_.ShrinkPool(s.pool, uint64_t(real) + (sim_ ? 0 : kTracerProcessBytes));
    }
    s.charged = false;
  }
  s.overhead_bytes = 0;
  s.pidfd.reset();
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

SessionInfo SessionManager::InfoLocked(const Session& s, bool detail) const {
  SessionInfo o;
  o.id = s.id;
  o.uid = s.uid;
  o.role = s.spec.role;
  o.target = s.target;
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
    bool exited = false;
    if (sim_) {
      exited = !sim_->machine().HasTask(s.spec.pid);
    } else if (s.exited) {
      exited = true;
      o.exit_status = s.exit_status;
    } else if (s.pidfd.valid()) {
      exited = !PidfdAlive(s.pidfd.get());
    }
    o.state = exited ? TaskState::kExited : TaskState::kRunning;
    o.fatal_signal = s.fatal_signal;
  }
  if (!detail) return o;
  const uint64_t now = NowLocked();
  auto reading = [&](const Session::Req& q, RequestInfo* out)
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock()) {
    PmuArbiter::Reading& r = out->reading;
    if (q.perf >= 0) {
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
    c.label = r.label;
    c.pinned = r.pinned;
    reading(r, &c);
    (r.breakpoint ? o.breakpoints : o.counters).push_back(std::move(c));
  }
  if (s.host_bts) {
    if (const TracerProcess* t = tracers_->FindLocked(s.spec.pid)) {
      o.soft_bts = t->stats();
      o.maps = t->maps();
    }
  }
  return o;
}

absl::StatusOr<SessionInfo> SessionManager::Show(const Peer& peer, SessionId id) {
  KernelLockGuard l(&kernel_->lock());
  absl::StatusOr<Session*> s = FindLocked(peer, id);
  if (!s.ok()) return s.status();
  return InfoLocked(**s, true);
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

absl::Status SessionManager::Kill(const Peer& peer, SessionId id) {
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

absl::StatusOr<RingHandle> SessionManager::Ring(const Peer& peer, SessionId id,
                                                bool drain) {
  if (drain) {
    // A soft-BTS tracer holds up to a DS area of branches in its process:
    // ask it to drain, and wait (on a condition its reader signals) without
    // the kernel lock, which its drain takes. Tracers are only stopped by
    // ReapTracers, on a request thread after the request.
    TracerProcess* tracer = nullptr;
    {
      KernelLockGuard l(&kernel_->lock());
      absl::StatusOr<Session*> s = FindLocked(peer, id);
      if (s.ok() && (*s)->host_bts) {
        TracerProcess* t = tracers_->FindLocked((*s)->spec.pid);
        if (t != nullptr && !t->done()) tracer = t;
      }
    }
    if (tracer != nullptr) tracer->WaitDrain(tracer->RequestDrain(), kSnapshotDrainWait);
  }
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
    o.what = visible(h.session) ? std::string(h.label) : "(other uid)";
    o.kind = h.breakpoint ? "debug register" : "counter";
    o.session = h.session;
    o.mode = h.pinned ? "pinned" : "flexible";
    o.state = h.on_hw ? "on hw" : "waiting";
    if (h.ratio >= 0) o.ratio = h.ratio;
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
