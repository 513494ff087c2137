#include "userspace/pfmd/service.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernel/drivers/perf/perf_events.h"
#include "kernel/drivers/ptrace/soft_bts.h"
#include "kernel/drivers/credentials.h"
#include "kernel/drivers/ptrace/tracer_process.h"
#include "kernel/drivers/sim/sim_machine.h"
#include "kernel/pfm_kernel.h"
#include "pfm/events.h"
#include "pfm/record_json.h"
#include "userspace/pfmd/auth.h"
#include "userspace/pfmd/errno_status.h"

namespace pfm {
namespace {

namespace json = boost::json;

ServiceReply Ok(json::value result) {
  ServiceReply r;
  r.result = std::move(result);
  return r;
}

ServiceReply Error(absl::Status s) {
  ServiceReply r;
  r.status = std::move(s);
  return r;
}

// Pools of shared DS buffers in the accountant: a task context's buffers by
// pid, a CPU catch-all's above 2^32.
PoolId TaskPool(int pid) { return static_cast<PoolId>(pid); }
PoolId CpuPool(int cpu) { return (1ull << 32) + static_cast<PoolId>(cpu); }

uint64_t AreaBytes(uint32_t bts, uint32_t pebs) {
  return uint64_t{bts} * sizeof(pfm_bts_raw) +
         uint64_t{pebs} * sizeof(pfm_pebs_raw);
}

json::value RatioJson(const PmuArbiter::Reading& r) {
  if (!r.counted) return nullptr;
  return r.ratio;
}

// How long a snapshot waits for a soft-BTS tracer to hand over what it
// holds (a tracee stopped in a blocking syscall answers at once; the bound
// covers a helper that does not answer).
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
// Sessions per session_list reply (about 300 bytes each).
constexpr uint64_t kSessionListPage = 1000;

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace

struct Service::Session {
  struct Req {
    RequestId id = 0;
    std::string label;  // event name or breakpoint spec
    uint32_t type = 0;
    uint64_t config = 0;
    bool breakpoint = false;
    bool pinned = false;
    int perf = -1;  // host: index into `perf` (the kernel's counter)
  };
  uint64_t id = 0;
  uid_t uid = 0;
  ConnectionId conn = 0;
  SessionSpec spec;
  std::string target;
  int32_t pid = -1;
  int cpu = -1;
  ConsumerId consumer = 0;
  uint64_t ring_bytes = 0;
  uint64_t buffer_bytes = 0;  // what the ring holds for the user
  PoolId pool = 0;
  bool charged = false;
  uint32_t pebs_request = 0;
  std::vector<Req> reqs;
  std::vector<std::unique_ptr<PerfEvent>> perf;  // host counters/breakpoints
  bool host_bts = false;                         // uses the pid's tracer
  UniqueFd pidfd;
  // What the session itself costs pfmd besides rings and DS buffers (its
  // bookkeeping and its perf events), charged to its uid like a ring.
  uint64_t overhead_bytes = 0;
  // The traced process's end, as its tracer saw it (host); kept per
  // session, so a new process at a recycled pid never inherits it.
  bool exited = false;
  int64_t exit_status = -1;
  int fatal_signal = 0;
};

// The ptrace tracers' view of the core: every call takes the kernel lock.
class Service::HostSink : public SoftBtsSink {
 public:
  explicit HostSink(Service* s) : s_(s) {}
  void Drain(DsArea& area, TaskId task, int cpu, uint64_t now_ns) override {
    KernelLockGuard l(&s_->mu_);
    s_->kernel_->ds().DrainForeign(area, task, Cpu(cpu), now_ns);
  }
  bool Held(TaskId task) override {
    KernelLockGuard l(&s_->mu_);
    return s_->kernel_->ds().Held(task);
  }
  void Switch(int cpu, uint64_t now_ns, TaskId prev, TaskId next,
              bool preempt) override {
    KernelLockGuard l(&s_->mu_);
    s_->kernel_->ContextSwitch(Cpu(cpu), now_ns, prev, next, preempt);
  }
  void Exited(TaskId task, uint64_t now_ns, int64_t wait_status) override {
    KernelLockGuard l(&s_->mu_);
    s_->kernel_->TaskExit(task, now_ns, wait_status);
    for (auto& [id, s] : s_->sessions_)
      if (s->host_bts && s->pid == task.pid && !s->exited) {
        s->exited = true;
        s->exit_status = wait_status;
      }
  }
  void Signaled(TaskId task, uint64_t now_ns, int signo) override {
    KernelLockGuard l(&s_->mu_);
    s_->kernel_->ds().TaskCrashed(task, now_ns, signo);
    for (auto& [id, s] : s_->sessions_)
      if (s->host_bts && s->pid == task.pid && !s->exited) s->fatal_signal = signo;
  }

 private:
  int Cpu(int cpu) const {
    return cpu >= 0 && cpu < s_->machine_.cpus ? cpu : 0;
  }
  Service* s_;
};

Service::Service(PfmdConfig config, MachineInfo machine, AuthPolicy auth)
    : config_(std::move(config)),
      machine_(std::move(machine)),
      auth_policy_(std::move(auth)),
      accountant_(config_.mem_limit_per_uid, config_.mem_limit_total) {
  handlers_["status"] = &Service::Status;
  handlers_["ping"] = &Service::Ping;
  handlers_["shutdown"] = &Service::Shutdown;
  handlers_["session_create"] = &Service::SessionCreate;
  handlers_["session_list"] = &Service::SessionList;
  handlers_["session_show"] = &Service::SessionShow;
  handlers_["session_kill"] = &Service::SessionKill;
  handlers_["session_ring"] = &Service::SessionRing;
  handlers_["resources"] = &Service::Resources;
  handlers_["sim"] = &Service::Sim;
  KernelOptions ko;
  ko.mux_interval_ns = uint64_t(config_.mux_interval_ms) * 1000000ull;
  KernelLockGuard l(&mu_);
  kernel_ = std::make_unique<Kernel>(machine_, ko);
  if (config_.driver == "sim") {
    SimConfig sc;
    sc.machine = machine_;
    sc.tasks = config_.sim_tasks;
    sc.seed = config_.sim_seed;
    sim_ = std::make_unique<SimMachine>(sc, kernel_.get());
    sim_paused_ = config_.sim_paused;
    sim_thread_ = std::thread([this] { SimLoop(); });
  } else {
    sink_ = std::make_unique<HostSink>(this);
    ErrorDetail d;
    ProbePerfCaps("/sys/bus/event_source/devices", &perf_caps_, &d);
  }
}

Service::~Service() {
  {
    KernelLockGuard l(&mu_);
    stopping_ = true;
  }
  if (sim_thread_.joinable()) sim_thread_.join();
  // Tracers first: their threads call into the kernel.
  std::vector<std::unique_ptr<TracerProcess>> tracers;
  {
    KernelLockGuard l(&mu_);
    for (auto& [pid, t] : tracers_) tracers.push_back(std::move(t.process));
    tracers_.clear();
    for (auto& t : retired_) tracers.push_back(std::move(t));
    retired_.clear();
  }
  for (auto& t : tracers) t->Stop();
  tracers.clear();
  KernelLockGuard l(&mu_);
  for (auto& [id, s] : sessions_) ReleaseLocked(*s);
  sessions_.clear();
  sim_.reset();
  kernel_.reset();
}

// Runs the simulated machine in scaled real time: every 10 ms of wall time,
// sim_speed × 10 virtual µs... (sim_speed virtual ns per real ms).
void Service::SimLoop() {
  constexpr int kStepMs = 10;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kStepMs));
    KernelLockGuard l(&mu_);
    if (stopping_) return;
    if (!sim_paused_) sim_->Run(config_.sim_speed * kStepMs);
  }
}

uint64_t Service::NowLocked() const {
  return sim_ ? sim_->now() : MonotonicNs();
}

ServiceReply Service::Handle(ConnectionId conn, const Peer& peer,
                             const boost::json::object& request) {
  const boost::json::value* op = request.if_contains("op");
  if (op == nullptr || !op->is_string())
    return Error(absl::InvalidArgumentError(
        "request has no \"op\" string naming the command"));
  auto it = handlers_.find(std::string(op->as_string()));
  if (it == handlers_.end())
    return Error(absl::InvalidArgumentError(
        absl::StrCat("unknown command '", std::string(op->as_string()), "'")));
  ServiceReply reply = (this->*(it->second))(conn, peer, request);
  ReapTracers();
  return reply;
}

void Service::Disconnected(ConnectionId conn) {
  {
    KernelLockGuard l(&mu_);
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

absl::Status Service::StartTracer(int32_t pid, const Peer& peer) {
  {
    KernelLockGuard l(&mu_);
    auto it = tracers_.find(pid);
    if (it != tracers_.end()) {
      if (!it->second.process->done()) return absl::OkStatus();
      // The pid's earlier process is gone (pid reuse): a new tracer.
      retired_.push_back(std::move(it->second.process));
      tracers_.erase(it);
    }
    if (!peer.privileged()) {
      int mine = 0;
      for (const auto& [p, t] : tracers_) mine += t.uid == peer.uid;
      if (mine >= config_.max_tracers_per_uid)
        return absl::ResourceExhaustedError(absl::StrCat(
            "uid ", peer.uid, " has ", mine, " soft-BTS tracer processes (limit ",
            config_.max_tracers_per_uid, ", --max-tracers-per-uid)"));
    }
  }
  // The tracer is a helper process holding the client's credentials, so the
  // kernel decides whether it may attach (kernel/drivers/ptrace/tracer_process.h).
  std::unique_ptr<TracerProcess> t;
  ErrorDetail d;
  const int err =
      TracerProcess::Start(pid, peer.TracerCredentials(), sink_.get(), &t, &d);
  if (err < 0) return ErrnoToStatus(err, d);
  KernelLockGuard l(&mu_);
  tracers_[pid] = Tracer{std::move(t), peer.uid};
  return absl::OkStatus();
}

void Service::RetireTracerIfUnusedLocked(int32_t pid, const Session* leaving) {
  auto it = tracers_.find(pid);
  if (it == tracers_.end()) return;
  for (const auto& [id, s] : sessions_)
    if (s.get() != leaving && s->host_bts && s->pid == pid) return;
  retired_.push_back(std::move(it->second.process));
  tracers_.erase(it);
}

void Service::ReapTracers() {
  std::vector<std::unique_ptr<TracerProcess>> stop;
  {
    KernelLockGuard l(&mu_);
    stop.swap(retired_);
  }
  for (auto& t : stop) t->Stop();
}

bool Service::Idle() const {
  KernelLockGuard l(&mu_);
  return sessions_.empty();
}

ServiceReply Service::Ping(ConnectionId, const Peer& peer,
                           const boost::json::object&) {
  return Ok(boost::json::object{{"pid", ::getpid()},
                                {"peer_uid", peer.uid},
                                {"peer_pid", peer.pid}});
}

ServiceReply Service::Shutdown(ConnectionId, const Peer& peer,
                               const boost::json::object&) {
  if (peer.uid != ::geteuid() && !peer.privileged())
    return Error(absl::PermissionDeniedError(absl::StrCat(
        "uid ", peer.uid, " may not stop a pfmd run by uid ", ::geteuid())));
  if (shutdown_hook_) shutdown_hook_();
  return Ok(boost::json::object{{"stopping", true}});
}

ServiceReply Service::Status(ConnectionId, const Peer&,
                             const boost::json::object&) {
  const MachineInfo& m = machine_;
  boost::json::object machine{
      {"cpus", m.cpus},
      {"pmu", m.pmu},
      {"pmu_desc", m.pmu_desc},
      {"gp_counters", m.gp_counters},
      {"fixed_counters", m.fixed_counters},
      {"debug_registers", m.debug_registers},
      {"bts", m.bts},
      {"pebs", m.pebs},
      {"lbr", m.lbr},
      {"pt", m.pt},
      {"software_events", m.software_events},
      {"soft_bts", m.soft_bts},
      {"source", m.source},
  };
  KernelLockGuard l(&mu_);
  json::array charged;
  for (const auto& [uid, bytes] : accountant_.Charges())
    charged.push_back(json::object{{"uid", uid}, {"bytes", bytes}});
  boost::json::object memory{
      {"limit_per_uid", config_.mem_limit_per_uid},
      {"limit_total", config_.mem_limit_total},
      {"allocated", accountant_.Allocated()},
      {"charged", std::move(charged)},
  };
  return Ok(boost::json::object{{"driver", config_.driver},
                                {"machine", std::move(machine)},
                                {"sessions", sessions_.size()},
                                {"memory", std::move(memory)}});
}

absl::Status Service::CheckTargetLocked(const Peer& peer,
                                        const SessionSpec& spec,
                                        UniqueFd* pidfd) {
  if (spec.filter != "user") {
    if (absl::Status s = MayTracePrivileged(peer, "kernel-mode tracing");
        !s.ok())
      return s;
  }
  if (spec.cpu >= 0) {
    if (spec.cpu >= machine_.cpus)
      return absl::InvalidArgumentError(absl::StrCat(
          "--cpu ", spec.cpu, ": this machine has cpus 0..", machine_.cpus - 1));
    return MayTracePrivileged(peer, "a CPU-wide session");
  }
  if (sim_) {
    // Simulated tasks have no owner on the host (docs/pfmd.md).
    if (!sim_->HasTask(spec.pid)) {
      std::vector<int32_t> pids = sim_->Pids();
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
          peer.TracerCredentials(),
          [&] { return ProbePtraceAccess(spec.pid, &d); }, &d);
      err < 0)
    return ErrnoToStatus(err, d);
  *pidfd = std::move(*fd);
  return absl::OkStatus();
}

void Service::ReleaseLocked(Session& s) {
  const uint64_t now = NowLocked();
  for (const Session::Req& r : s.reqs)
    if (r.id) kernel_->arbiter().Remove(r.id, now);
  s.reqs.clear();
  s.perf.clear();  // closes the host's perf events
  if (s.host_bts) RetireTracerIfUnusedLocked(s.pid, &s);
  s.host_bts = false;
  if (s.pebs_request) kernel_->arbiter().Remove(s.pebs_request, now);
  s.pebs_request = 0;
  if (s.consumer) kernel_->ds().Detach(s.consumer, now);
  s.consumer = 0;
  if (s.charged) {
    const uint64_t shrunk = accountant_.Detach(s.uid, s.ring_bytes, s.pool);
    if (shrunk != 0 && s.pid > 0) {
      const DsLimits& lim = kernel_->ds().limits();
      const uint64_t pebs = AreaBytes(0, lim.task_pebs_records) +
                            (sim_ ? 0 : kTracerProcessBytes);
      const uint32_t bts = static_cast<uint32_t>(
          shrunk > pebs ? (shrunk - pebs) / sizeof(pfm_bts_raw) : 0);
      kernel_->ds().ResizeTaskContext(s.pid, bts, now, nullptr);
    }
    s.charged = false;
  }
  if (s.overhead_bytes) accountant_.Detach(s.uid, s.overhead_bytes, 0);
  s.overhead_bytes = 0;
  s.pidfd.reset();
}

ServiceReply Service::SessionCreate(ConnectionId conn, const Peer& peer,
                                    const boost::json::object& req) {
  const json::value* sv = req.if_contains("spec");
  if (sv == nullptr || !sv->is_object())
    return Error(absl::InvalidArgumentError(
        "session_create needs a \"spec\" object"));
  absl::StatusOr<SessionSpec> spec = SessionSpec::FromJson(sv->as_object());
  if (!spec.ok()) return Error(spec.status());
  const SessionSpec& sp = *spec;
  const MachineInfo& m = machine_;
  // What the machine cannot do is refused before anything is allocated.
  if (sp.bts != "off" && !m.bts && !m.soft_bts)
    return Error(absl::UnimplementedError(absl::StrCat(
        "BTS is not supported on this machine (", m.pmu, ": ",
        m.pmu_desc.empty() ? "no Debug Store" : m.pmu_desc, ")")));
  if (sp.bts != "off" && !m.bts && sp.filter != "user")
    return Error(absl::UnimplementedError(
        "kernel-mode branch tracing is not supported on this machine (soft "
        "BTS over ptrace sees user mode only)"));
  if (!sp.pebs_event.empty() && !m.pebs)
    return Error(absl::UnimplementedError(absl::StrCat(
        "PEBS is not supported on this machine (", m.pmu,
        m.pmu == "none" ? ": no 'cpu' PMU in /sys/bus/event_source/devices"
                        : ": no Debug Store",
        ")")));
  // Event names, encoded with libpfm4 (an unknown name is INVALID_ARGUMENT).
  std::vector<EncodedEvent> counters;
  for (const std::string& name : sp.counters) {
    absl::StatusOr<EncodedEvent> e = EncodeEvent(name);
    if (!e.ok()) return Error(e.status());
    if (e->hardware && m.gp_counters == 0)
      return Error(absl::UnimplementedError(absl::StrCat(
          "counter '", name, "' needs a hardware PMU: not supported on this "
          "machine (", m.pmu_desc, ")")));
    if (!e->hardware && config_.driver == "sim")
      return Error(absl::UnimplementedError(absl::StrCat(
          "counter '", name, "' is a kernel software event: the simulated PMU "
          "models hardware events only (use --driver host)")));
    counters.push_back(*e);
  }
  EncodedEvent pebs_event;
  if (!sp.pebs_event.empty()) {
    absl::StatusOr<EncodedEvent> e = EncodeEvent(sp.pebs_event);
    if (!e.ok()) return Error(e.status());
    pebs_event = *e;
  }

  uint64_t created = 0;
  const bool need_tracer = !sim_ && sp.bts != "off";
  {
  KernelLockGuard l(&mu_);
  auto s = std::make_unique<Session>();
  s->uid = peer.uid;
  s->conn = conn;
  s->spec = sp;
  s->pid = sp.pid;
  s->cpu = sp.cpu;
  s->target = sp.pid >= 0 ? absl::StrCat("pid ", sp.pid)
                          : absl::StrCat("cpu ", sp.cpu);
  if (absl::Status st = CheckTargetLocked(peer, sp, &s->pidfd); !st.ok())
    return Error(st);
  const uint64_t now = NowLocked();
  s->id = next_session_;

  // 0. Per-uid caps, then what the session costs pfmd besides rings
  // (charged like a ring, so it counts against --mem-limit-per-uid).
  const int perf_fds =
      sim_ ? 0 : static_cast<int>(sp.counters.size() + sp.breakpoints.size());
  if (!peer.privileged()) {
    int sessions = 0, fds = 0;
    for (const auto& [id, o] : sessions_) {
      if (o->uid != peer.uid) continue;
      ++sessions;
      fds += static_cast<int>(o->perf.size());
    }
    if (sessions >= config_.max_sessions_per_uid)
      return Error(absl::ResourceExhaustedError(absl::StrCat(
          "uid ", peer.uid, " has ", sessions, " sessions (limit ",
          config_.max_sessions_per_uid, ", --max-sessions-per-uid)")));
    if (fds + perf_fds > config_.max_perf_fds_per_uid)
      return Error(absl::ResourceExhaustedError(absl::StrCat(
          "uid ", peer.uid, " holds ", fds, " perf events and asks for ", perf_fds,
          " more (limit ", config_.max_perf_fds_per_uid, ", --max-perf-fds-per-uid)")));
  }
  const uint64_t overhead =
      kSessionOverheadBytes + uint64_t(perf_fds) * kPerfEventBytes;
  const bool consumer = sp.bts != "off" || !sp.pebs_event.empty();
  if (!consumer) {  // else charged with the ring, in one step
    if (absl::Status st = accountant_.Attach(
            peer.uid, overhead, 0, 0, 0,
            absl::StrCat("session ", s->id, "'s bookkeeping and perf events"));
        !st.ok())
      return Error(st);
    s->overhead_bytes = overhead;
  }

  // 1. Memory: ring (with the session's overhead) + share of the context's
  // DS buffers, checked together.
  const uint64_t history_records =
      sp.bts == "history"
          ? std::max<uint64_t>(1, (sp.buffer_bytes ? sp.buffer_bytes
                                                   : kDefaultHistoryRingBytes) /
                                      PFM_RECORD_FIXED_SIZE)
          : 0;
  ConsumerParams cp;
  if (consumer) {
    cp.req.ctx_kind = sp.pid >= 0 ? PFM_CTX_TASK : PFM_CTX_CPU;
    cp.req.pid = sp.pid;
    cp.req.cpu = sp.cpu;
    cp.req.bts = sp.bts == "history"    ? PFM_BTS_HISTORY
                 : sp.bts == "lossless" ? PFM_BTS_LOSSLESS
                                        : PFM_BTS_OFF;
    cp.req.ring_bytes = sp.bts == "history"
                            ? 0
                            : (sp.buffer_bytes ? sp.buffer_bytes
                                               : kDefaultLosslessRingBytes);
    cp.history_records = history_records;
    const DsLimits& lim = kernel_->ds().limits();
    s->ring_bytes = PFM_RING_HEADER_BYTES + DsAllocator::RingDataBytes(cp);
    s->buffer_bytes = sp.bts == "history"
                          ? history_records * PFM_RECORD_FIXED_SIZE
                          : s->ring_bytes - PFM_RING_HEADER_BYTES;
    uint64_t pool_bytes, pool_min;
    if (sp.pid >= 0) {
      s->pool = TaskPool(sp.pid);
      pool_bytes = AreaBytes(lim.task_bts_records, lim.task_pebs_records);
      pool_min = AreaBytes(lim.min_bts_records, lim.task_pebs_records);
      // On the host, the task's tracer process is part of what its tracers
      // share (it lives exactly as long as a branch consumer of the task).
      if (!sim_) {
        pool_bytes += kTracerProcessBytes;
        pool_min += kTracerProcessBytes;
      }
    } else {
      s->pool = CpuPool(sp.cpu);
      pool_bytes = AreaBytes(lim.cpu_bts_records, lim.cpu_pebs_records);
      pool_min = pool_bytes;
    }
    if (absl::Status st = accountant_.Attach(
            peer.uid, s->ring_bytes + overhead, s->pool, pool_bytes, pool_min,
            absl::StrCat("session ", s->id, "'s ring and bookkeeping"));
        !st.ok())
      return Error(st);
    s->charged = true;
    s->overhead_bytes = overhead;  // released with the ring, see ReleaseLocked
  }

  // 2. Counters, PEBS and breakpoints: admission by the arbiter.
  auto fail = [&](absl::Status st) {
    ReleaseLocked(*s);
    return Error(std::move(st));
  };
  const bool all_pinned = sp.pinned;
  pfm_pmu_req base{};
  base.ctx_kind = sp.pid >= 0 ? PFM_CTX_TASK : PFM_CTX_CPU;
  base.pid = sp.pid;
  base.cpu = sp.cpu;
  if (sp.filter != "user") base.flags |= PFM_REQ_KERNEL;
  ErrorDetail d;
  if (!sp.pebs_event.empty()) {
    pfm_pmu_req r = base;
    r.kind = PFM_REQ_COUNTER;
    r.flags |= PFM_REQ_PEBS | (all_pinned ? PFM_REQ_PINNED : 0);
    r.type = pebs_event.type;
    r.config = pebs_event.config;
    const int id = kernel_->arbiter().Add(r, s->id, sp.pebs_event.c_str(), now, &d);
    if (id < 0) return fail(ErrnoToStatus(id, d));
    s->pebs_request = static_cast<uint32_t>(id);
  }
  const PerfTarget target =
      sp.pid >= 0 ? PerfTarget::Task(sp.pid) : PerfTarget::Cpu(sp.cpu);
  const std::optional<Credentials> creds = peer.TracerCredentials();
  for (size_t i = 0; i < counters.size(); ++i) {
    pfm_pmu_req r = base;
    r.kind = PFM_REQ_COUNTER;
    r.flags |= all_pinned ? PFM_REQ_PINNED : 0;
    r.type = counters[i].type;
    r.config = counters[i].config;
    Session::Req q{0, sp.counters[i], r.type, r.config, false, all_pinned};
    // Kernel software events are not scarce hardware: no arbitration, the
    // host kernel counts them (perf_event_open).
    if (counters[i].hardware) {
      const int id = kernel_->arbiter().Add(r, s->id, sp.counters[i].c_str(), now, &d);
      if (id < 0) return fail(ErrnoToStatus(id, d));
      q.id = static_cast<RequestId>(id);
    }
    if (!sim_) {
      auto pe = std::make_unique<PerfEvent>();
      // Opened with the client's credentials: the kernel's perf access
      // rules for that task apply (userspace/pfmd/auth.h).
      const int err = RunWithCredentials(
          creds,
          [&] {
            // An unprivileged client counts user mode only, as the
            // kernel allows it at perf_event_paranoid >= 2.
            return counters[i].hardware
                       ? OpenHardwareCounter(perf_caps_, target, r.type, r.config,
                                             pe.get(), &d, creds.has_value())
                       : OpenSoftwareCounter(target, r.config, pe.get(), &d,
                                             creds.has_value());
          },
          &d);
      if (err < 0) {
        if (q.id) kernel_->arbiter().Remove(q.id, now);
        return fail(ErrnoToStatus(err, d));
      }
      q.perf = static_cast<int>(s->perf.size());
      s->perf.push_back(std::move(pe));
    }
    s->reqs.push_back(std::move(q));
  }
  for (const BreakpointSpec& bp : sp.breakpoints) {
    pfm_pmu_req r = base;
    r.kind = PFM_REQ_BREAKPOINT;
    // A debugger's breakpoints are never multiplexed (DESIGN §4).
    const bool pinned = all_pinned || sp.role == "debugger";
    r.flags |= pinned ? PFM_REQ_PINNED : 0;
    r.bp_addr = bp.addr;
    r.bp_len = bp.len;
    r.bp_kind = bp.access == "r"    ? PFM_BP_R
                : bp.access == "w"  ? PFM_BP_W
                : bp.access == "rw" ? PFM_BP_RW
                                    : PFM_BP_X;
    const std::string label = bp.ToString();
    const int id = kernel_->arbiter().Add(r, s->id, label.c_str(), now, &d);
    if (id < 0) return fail(ErrnoToStatus(id, d));
    Session::Req q{static_cast<RequestId>(id), label, 0, 0, true, pinned};
    if (!sim_) {
      // The host kernel holds the debug register (PERF_TYPE_BREAKPOINT);
      // its own refusal (ENOSPC) is passed on. bp_kind values are the
      // kernel's HW_BREAKPOINT_R/W/RW/X.
      auto pe = std::make_unique<PerfEvent>();
      // An execute breakpoint is 1 byte in DR7 (the spec's length), but
      // perf's ABI wants bp_len = sizeof(long) for HW_BREAKPOINT_X on x86.
      const uint32_t len = r.bp_kind == PFM_BP_X ? sizeof(long) : bp.len;
      const int err = RunWithCredentials(
          creds,
          [&] {
            return OpenBreakpoint(perf_caps_, target, bp.addr, len, r.bp_kind,
                                  pe.get(), &d);
          },
          &d);
      if (err < 0) {
        kernel_->arbiter().Remove(q.id, now);
        return fail(ErrnoToStatus(err, d));
      }
      q.perf = static_cast<int>(s->perf.size());
      s->perf.push_back(std::move(pe));
    }
    s->reqs.push_back(std::move(q));
  }

  // 3. The consumer of the context's Debug Store stream.
  if (consumer) {
    ConsumerParams& p = cp;
    p.req.filter = sp.filter == "user"     ? PFM_FILTER_USER
                   : sp.filter == "kernel" ? PFM_FILTER_KERNEL
                                           : PFM_FILTER_ALL;
    p.req.format = sp.format == "compact" ? PFM_FORMAT_COMPACT : PFM_FORMAT_FIXED;
    // Profilers and catch-alls want to see switches; a debugger's small
    // history keeps branches only.
    if (sp.role == "profiler" || sp.cpu >= 0) p.req.flags |= PFM_CONSUMER_SWITCHES;
    if (sp.block) p.req.flags |= PFM_CONSUMER_BLOCK;
    p.req.ring_bytes = s->ring_bytes - PFM_RING_HEADER_BYTES;
    p.session = s->id;
    p.pebs_request = s->pebs_request;
    p.pebs_period = sp.pebs_period;
    const int id = kernel_->ds().Attach(p, now, &d);
    if (id < 0) return fail(ErrnoToStatus(id, d));
    s->consumer = static_cast<ConsumerId>(id);
  }
  s->host_bts = need_tracer;
  ++next_session_;
  created = s->id;
  sessions_[created] = std::move(s);
  }
  // The soft-BTS tracer of the target (one per pid, shared by its sessions),
  // started without the kernel lock: its thread reports into the kernel.
  if (need_tracer) {
    if (absl::Status st = StartTracer(sp.pid, peer); !st.ok()) {
      KernelLockGuard l(&mu_);
      auto it = sessions_.find(created);
      if (it != sessions_.end()) {
        ReleaseLocked(*it->second);
        sessions_.erase(it);
      }
      return Error(absl::Status(st.code(), absl::StrCat("soft BTS on pid ", sp.pid,
                                                        ": ", st.message())));
    }
  }
  return Ok(json::object{{"id", created}});
}

absl::StatusOr<Service::Session*> Service::FindLocked(
    const Peer& peer, const boost::json::object& req) {
  const json::value* v = req.if_contains("id");
  if (v == nullptr || !(v->is_uint64() || v->is_int64()))
    return absl::InvalidArgumentError("the request needs a session \"id\"");
  const uint64_t id = v->is_uint64() ? v->as_uint64()
                                     : static_cast<uint64_t>(v->as_int64());
  auto it = sessions_.find(id);
  if (it == sessions_.end() ||
      (it->second->uid != peer.uid && !peer.privileged()))
    return absl::NotFoundError(absl::StrCat("no session ", id));
  return it->second.get();
}

json::object Service::SessionJsonLocked(const Session& s, bool detail) const {
  ConsumerStats st;
  const bool has = s.consumer && kernel_->ds().Stats(s.consumer, &st) == 0;
  // A session pays for its ring and for its uid's share of the shared DS
  // buffers, divided among that uid's sessions on the same context.
  uint64_t share = 0;
  if (s.charged && s.pool) {
    uint64_t n = 0;
    for (const auto& [id, o] : sessions_)
      if (o->uid == s.uid && o->pool == s.pool && o->charged) ++n;
    const uint64_t pool = accountant_.PoolBytes(s.pool);
    std::map<uid_t, int> uids;
    for (const auto& [id, o] : sessions_)
      if (o->pool == s.pool && o->charged) uids[o->uid] = 1;
    share = uids.empty() || n == 0 ? 0 : pool / uids.size() / n;
  }
  json::object o{{"id", s.id},
                 {"uid", s.uid},
                 {"role", s.spec.role},
                 {"target", s.target},
                 {"bts", s.spec.bts},
                 {"filter", s.spec.filter},
                 {"format", s.spec.format},
                 {"detached", s.spec.detached},
                 {"buffer_bytes", s.buffer_bytes},
                 {"charged_bytes",
                  (s.charged ? s.ring_bytes : 0) + s.overhead_bytes + share},
                 {"records", has ? st.records : 0},
                 {"lost", has ? st.lost : 0}};
  if (has) o["overwritten"] = st.overwritten;
  if (s.pid > 0) {
    bool exited = false;
    if (sim_) {
      exited = !sim_->HasTask(s.pid);
    } else if (s.exited) {
      exited = true;
      o["exit_status"] = s.exit_status;
    } else if (s.pidfd.valid()) {
      exited = !PidfdAlive(s.pidfd.get());
    }
    o["state"] = exited ? "exited" : "running";
    if (s.fatal_signal != 0) o["fatal_signal"] = s.fatal_signal;
  }
  if (!detail) return o;
  const uint64_t now = NowLocked();
  json::array counters, bps;
  auto reading = [&](const Session::Req& q, json::object* out) {
    PmuArbiter::Reading r;
    if (q.perf >= 0) {
      // The host kernel's own count, with its enabled/running times.
      PerfCount pc;
      ErrorDetail d;
      if (s.perf[q.perf]->Read(&pc, &d) != 0) return;
      r.value = pc.value;
      r.time_enabled = pc.time_enabled;
      r.time_running = pc.time_running;
      r.counted = pc.time_running > 0;
      r.ratio = r.counted ? double(pc.time_running) / double(pc.time_enabled) : 0;
      r.scaled = r.counted ? double(pc.value) / r.ratio : 0;
    } else if (kernel_->arbiter().Read(q.id, now, &r) != 0) {
      return;
    }
    (*out)["value"] = r.value;
    (*out)["time_enabled"] = r.time_enabled;
    (*out)["time_running"] = r.time_running;
    (*out)["counted"] = r.counted;
    (*out)["scaled"] = r.counted ? json::value(static_cast<uint64_t>(r.scaled + 0.5))
                                 : json::value(nullptr);
    (*out)["ratio"] = RatioJson(r);
  };
  if (s.pebs_request) {
    json::object c{{"event", s.spec.pebs_event}, {"pebs", true},
                   {"period", s.spec.pebs_period}};
    Session::Req pq;
    pq.id = s.pebs_request;
    reading(pq, &c);
    counters.push_back(std::move(c));
  }
  for (const Session::Req& r : s.reqs) {
    json::object c{{"event", r.label}, {"pinned", r.pinned}};
    reading(r, &c);
    if (r.breakpoint) {
      c.erase("event");
      c["spec"] = r.label;
      c["state"] = c.contains("ratio") && !c["ratio"].is_null() ? "counted" : "waiting";
      bps.push_back(std::move(c));
    } else {
      counters.push_back(std::move(c));
    }
  }
  o["counters"] = std::move(counters);
  o["breakpoints"] = std::move(bps);
  if (s.host_bts) {
    auto t = tracers_.find(s.pid);
    if (t != tracers_.end()) {
      SoftBtsTracer::Stats ts = t->second.process->stats();
      o["soft_bts"] = json::object{{"steps", ts.steps},
                                   {"branches", ts.branches},
                                   {"singleblock", ts.singleblock_honoured}};
      json::array maps;
      for (const TraceeMapping& me : t->second.process->maps())
        maps.push_back(json::object{{"start", Hex(me.start)},
                                    {"end", Hex(me.end)},
                                    {"offset", Hex(me.offset)},
                                    {"path", me.path}});
      o["maps"] = std::move(maps);
    }
  }
  return o;
}

// One page of sessions, in id order: those after "after" (default 0), at
// most "limit" (1..kSessionListPage, the default), so a reply stays far
// below the frame limit however many sessions exist; clients page on.
ServiceReply Service::SessionList(ConnectionId, const Peer& peer,
                                  const boost::json::object& req) {
  uint64_t after = 0, limit = kSessionListPage;
  if (const json::value* a = req.if_contains("after")) {
    if (!a->is_uint64() && !(a->is_int64() && a->as_int64() >= 0))
      return Error(absl::InvalidArgumentError("\"after\" must be a session id"));
    after = a->to_number<uint64_t>();
  }
  if (const json::value* n = req.if_contains("limit")) {
    if (!n->is_uint64() && !(n->is_int64() && n->as_int64() > 0))
      return Error(absl::InvalidArgumentError(absl::StrCat(
          "\"limit\" must be 1..", kSessionListPage)));
    limit = std::clamp<uint64_t>(n->to_number<uint64_t>(), 1, kSessionListPage);
  }
  KernelLockGuard l(&mu_);
  json::array out;
  for (auto it = sessions_.upper_bound(after);
       it != sessions_.end() && out.size() < limit; ++it) {
    const Session& s = *it->second;
    if (s.uid != peer.uid && !peer.privileged()) continue;
    out.push_back(SessionJsonLocked(s, false));
  }
  return Ok(std::move(out));
}

ServiceReply Service::SessionShow(ConnectionId, const Peer& peer,
                                  const boost::json::object& req) {
  KernelLockGuard l(&mu_);
  absl::StatusOr<Session*> s = FindLocked(peer, req);
  if (!s.ok()) return Error(s.status());
  return Ok(SessionJsonLocked(**s, true));
}

ServiceReply Service::SessionKill(ConnectionId, const Peer& peer,
                                  const boost::json::object& req) {
  KernelLockGuard l(&mu_);
  absl::StatusOr<Session*> s = FindLocked(peer, req);
  if (!s.ok()) return Error(s.status());
  const uint64_t id = (*s)->id;
  ReleaseLocked(**s);
  sessions_.erase(id);
  return Ok(json::object{{"id", id}, {"killed", true}});
}

ServiceReply Service::SessionRing(ConnectionId, const Peer& peer,
                                  const boost::json::object& req) {
  const json::value* drain_v = req.if_contains("drain");
  const bool drain = drain_v && drain_v->is_bool() && drain_v->as_bool();
  if (drain) {
    // A soft-BTS tracer holds up to a DS area of branches in its process:
    // ask it to drain, and wait (on a condition its reader signals) without
    // the kernel lock, which its drain takes. Tracers are only destroyed on
    // this thread.
    TracerProcess* tracer = nullptr;
    {
      KernelLockGuard l(&mu_);
      absl::StatusOr<Session*> s = FindLocked(peer, req);
      if (s.ok() && (*s)->host_bts) {
        auto it = tracers_.find((*s)->pid);
        if (it != tracers_.end() && !it->second.process->done())
          tracer = it->second.process.get();
      }
    }
    if (tracer != nullptr)
      tracer->WaitDrain(tracer->RequestDrain(), kSnapshotDrainWait);
  }
  KernelLockGuard l(&mu_);
  absl::StatusOr<Session*> s = FindLocked(peer, req);
  if (!s.ok()) return Error(s.status());
  Ring* ring = (*s)->consumer ? kernel_->ds().ring((*s)->consumer) : nullptr;
  if (ring == nullptr)
    return Error(absl::FailedPreconditionError(absl::StrCat(
        "session ", (*s)->id, " has no record stream (no --bts or --pebs)")));
  // Bring the ring up to date: drain the CPU the target runs on.
  if (drain) {
    for (int cpu = 0; cpu < machine_.cpus; ++cpu) {
      TaskId t = kernel_->Running(cpu);
      if ((*s)->cpu == cpu || ((*s)->pid > 0 && t.pid == (*s)->pid))
        kernel_->ds().Drain(cpu, NowLocked());
    }
  }
  ServiceReply r;
  const int fd = ::fcntl(ring->fd(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0)
    return Error(absl::ResourceExhaustedError(
        absl::StrCat("cannot pass the ring: ", strerror(errno))));
  r.fds.emplace_back(fd);
  r.result = json::object{{"id", (*s)->id},
                          {"mode", (*s)->spec.bts},
                          {"format", (*s)->spec.format},
                          {"target", (*s)->target},
                          {"mapped_bytes", ring->mapped_bytes()}};
  return r;
}

ServiceReply Service::Resources(ConnectionId, const Peer& peer,
                                const boost::json::object&) {
  KernelLockGuard l(&mu_);
  const uint64_t now = NowLocked();
  std::vector<PmuArbiter::Holder> holders;
  kernel_->arbiter().Describe(now, &holders);
  // Who may see whom: the unprivileged see their own sessions' holders and
  // anonymous "held" slots for others'.
  auto visible = [&](uint64_t session) {
    auto it = sessions_.find(session);
    return peer.privileged() ||
           (it != sessions_.end() && it->second->uid == peer.uid);
  };
  std::map<int, json::array> by_cpu;
  std::map<int32_t, json::array> by_task;
  for (const PmuArbiter::Holder& h : holders) {
    json::object o{{"slot", h.slot},
                   {"what", visible(h.session) ? std::string(h.label) : "(other uid)"},
                   {"kind", h.breakpoint ? "debug register" : "counter"},
                   {"session", h.session},
                   {"mode", h.pinned ? "pinned" : "flexible"},
                   {"state", h.on_hw ? "on hw" : "waiting"},
                   {"ratio", h.ratio < 0 ? json::value(nullptr) : json::value(h.ratio)}};
    if (h.cpu >= 0) by_cpu[h.cpu].push_back(std::move(o));
    else by_task[h.pid].push_back(std::move(o));
  }
  // BTS / PEBS holders: the consumers of each context.
  for (const auto& [id, s] : sessions_) {
    if (!s->consumer) continue;
    json::object o{{"slot", s->spec.bts != "off" ? "bts" : "pebs"},
                   {"what", visible(id) ? absl::StrCat(s->spec.role, " ", s->spec.bts,
                                                       s->spec.pebs_event.empty()
                                                           ? ""
                                                           : " +pebs " + s->spec.pebs_event)
                                        : "(other uid)"},
                   {"kind", "debug store"},
                   {"session", id},
                   {"mode", "shared"},
                   {"state", "attached"},
                   {"ratio", 1.0}};
    if (s->cpu >= 0) by_cpu[s->cpu].push_back(std::move(o));
    else by_task[s->pid].push_back(std::move(o));
  }
  json::array cpus, tasks;
  for (int c = 0; c < machine_.cpus; ++c) {
    json::object co{{"cpu", c}, {"running_pid", kernel_->Running(c).pid}};
    auto it = by_cpu.find(c);
    co["holders"] = it == by_cpu.end() ? json::array{} : it->second;
    cpus.push_back(std::move(co));
  }
  for (auto& [pid, arr] : by_task)
    tasks.push_back(json::object{{"pid", pid}, {"holders", std::move(arr)}});
  return Ok(json::object{{"cpus", std::move(cpus)},
                         {"tasks", std::move(tasks)},
                         {"debug_registers", machine_.debug_registers},
                         {"gp_counters", machine_.gp_counters},
                         {"fixed_counters", machine_.fixed_counters}});
}

ServiceReply Service::Sim(ConnectionId, const Peer& peer,
                          const boost::json::object& req) {
  KernelLockGuard l(&mu_);
  if (!sim_)
    return Error(absl::FailedPreconditionError(
        "the sim command needs pfmd --driver sim (this one runs the host)"));
  // The simulated machine is the daemon owner's test bench: its clock and
  // tasks are shared by every session on it.
  if (peer.uid != ::geteuid() && !peer.privileged())
    return Error(absl::PermissionDeniedError(absl::StrCat(
        "the sim command is for the daemon's owner (uid ", ::geteuid(),
        ") or a privileged client; uid ", peer.uid, " is neither")));
  const json::value* a = req.if_contains("action");
  const std::string action = a && a->is_string() ? std::string(a->as_string()) : "";
  // Exited tasks keep their stats; only `exit` needs a live one.
  auto pid_arg = [&](int32_t* pid, bool alive) -> absl::Status {
    const json::value* p = req.if_contains("pid");
    if (p == nullptr || !p->is_int64())
      return absl::InvalidArgumentError("this sim action needs a \"pid\"");
    *pid = static_cast<int32_t>(p->as_int64());
    SimMachine::TaskStats st{};
    if (alive ? !sim_->HasTask(*pid) : sim_->Stats(*pid, &st) != 0)
      return absl::NotFoundError(absl::StrCat("no simulated task ", *pid));
    return absl::OkStatus();
  };
  if (action == "pause" || action == "resume") {
    sim_paused_ = action == "pause";
    return Ok(json::object{{"paused", sim_paused_}, {"now", sim_->now()}});
  }
  if (action == "run") {
    const json::value* ns = req.if_contains("ns");
    if (ns == nullptr || !(ns->is_uint64() || ns->is_int64()) ||
        ns->to_number<int64_t>() <= 0 ||
        ns->to_number<uint64_t>() > kMaxSimRunNs)
      return Error(absl::InvalidArgumentError(absl::StrCat(
          "sim run needs \"ns\": 1..", kMaxSimRunNs,
          " virtual nanoseconds per request (it holds the daemon while it runs)")));
    sim_->Run(ns->to_number<uint64_t>());
    return Ok(json::object{{"now", sim_->now()}});
  }
  if (action == "exit") {
    int32_t pid;
    if (absl::Status st = pid_arg(&pid, true); !st.ok()) return Error(st);
    sim_->ExitTask(pid, 0);
    return Ok(json::object{{"pid", pid}, {"exited", true}});
  }
  if (action == "stats") {
    json::array tasks;
    std::vector<int32_t> pids;
    if (req.contains("pid")) {
      int32_t pid;
      if (absl::Status st = pid_arg(&pid, false); !st.ok()) return Error(st);
      pids.push_back(pid);
    } else {
      pids = sim_->Pids();
    }
    for (int32_t pid : pids) {
      SimMachine::TaskStats st{};
      if (sim_->Stats(pid, &st) != 0) continue;
      json::object t{{"pid", pid},
                     {"runtime_ns", st.runtime_ns},
                     {"switches_in", st.switches_in},
                     {"voluntary", st.voluntary},
                     {"involuntary", st.involuntary},
                     {"branches", st.branches},
                     {"bts_user", st.bts_user},
                     {"bts_kernel", st.bts_kernel},
                     {"bts_dropped", st.bts_dropped},
                     {"pebs", st.pebs},
                     {"held_ns", st.held_ns}};
      // The ground truth for every counter a visible session asks of it.
      json::object truth;
      for (const auto& [id, s] : sessions_) {
        if (s->pid != pid || (s->uid != peer.uid && !peer.privileged())) continue;
        for (const Session::Req& r : s->reqs)
          if (!r.breakpoint)
            truth[r.label] = sim_->TrueCount(pid, r.type, r.config);
      }
      t["true_counts"] = std::move(truth);
      tasks.push_back(std::move(t));
    }
    return Ok(json::object{{"now", sim_->now()}, {"paused", sim_paused_},
                           {"tasks", std::move(tasks)}});
  }
  return Error(absl::InvalidArgumentError(absl::StrCat(
      "sim action '", action, "': expected pause, resume, run, stats or exit")));
}

}  // namespace pfm
