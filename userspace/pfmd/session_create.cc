// Session creation (check the target and the caps, charge, admit into the
// arbiter and the host's perf events, attach the consumer) and release,
// which undoes any prefix of it. Queries are in session_manager.cc.
#include "userspace/pfmd/session_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
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

using session_internal::TaskPool;
using session_internal::CpuPool;
using session_internal::AreaBytes;
using session_internal::kSessionOverheadBytes;
using session_internal::kPerfEventBytes;
using session_internal::kTracerProcessBytes;

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
    if (spec.tid > 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "tid ", spec.tid, ": the sim driver's tasks have no threads (use --pid alone)"));
    return absl::OkStatus();
  }
  absl::StatusOr<UniqueFd> fd = OpenTraceTarget(peer, spec.pid);
  if (!fd.ok()) return fd.status();
  if (spec.tid > 0) {
    // One thread of the process (perf's -t): it must be one of its threads
    // now; authorization is the process's.
    struct stat st;
    if (::stat(absl::StrCat("/proc/", spec.pid, "/task/", spec.tid).c_str(), &st) != 0)
      return absl::NotFoundError(
          absl::StrCat("tid ", spec.tid, " is not a thread of pid ", spec.pid));
  }
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

int SessionManager::PerfFdsFor(const TypedSpec& spec) const {
  if (sim_) return 0;
  const size_t per_counter =
      spec.task() && spec.tid == 0 ? std::max<size_t>(1, ProcessThreadCount(spec.pid)) : 1;
  return static_cast<int>(spec.counters.size() * per_counter + spec.breakpoints.size());
}

absl::Status SessionManager::CheckCapsLocked(const Peer& peer, const TypedSpec& spec) {
  if (peer.privileged()) return absl::OkStatus();
  const int perf_fds = PerfFdsFor(spec);
  // The task context a new consumer joins (a process's threads, and on the
  // host the children an inherited trace follows, share one), and the
  // uid's consumers attached to it while it lives. CPU contexts are for
  // privileged clients only (CheckTargetLocked), which are not capped.
  const int32_t joins =
      spec.consumer() && spec.task() ? kernel_->TaskContextOf(spec.pid) : 0;
  int sessions = 0, fds = 0, consumers = 0;
  for (const auto& [id, o] : sessions_) {
    if (o->uid != peer.uid) continue;
    ++sessions;
    for (const auto& pe : o->perf) fds += static_cast<int>(pe->threads());
    if (joins != 0 && o->consumer != 0 &&
        kernel_->LiveTaskContextOfConsumer(o->consumer) == joins)
      ++consumers;
  }
  if (sessions >= config_.max_sessions_per_uid)
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", peer.uid, " has ", sessions, " sessions (limit ",
        config_.max_sessions_per_uid, ", --max-sessions-per-uid)"));
  if (fds + perf_fds > config_.max_perf_fds_per_uid)
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", peer.uid, " holds ", fds, " perf events and asks for ", perf_fds,
        " more (limit ", config_.max_perf_fds_per_uid, ", --max-perf-fds-per-uid)"));
  if (joins != 0 && consumers >= config_.max_consumers_per_uid)
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", peer.uid, " has ", consumers, " Debug Store consumers on pid ", joins,
        " (limit ", config_.max_consumers_per_uid, " per task, --max-consumers-per-uid)"));
  return absl::OkStatus();
}

// Memory first: the ring (with the session's own overhead) and the share of
// the context's DS buffers are checked together, in one step.
absl::Status SessionManager::ChargeLocked(const Peer& peer, const TypedSpec& spec,
                                          Session* s) {
  const int perf_fds = PerfFdsFor(spec);
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
  cp.req.tid = spec.tid;
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
  // Counters on a pid count the whole process as perf stat -p does: every
  // thread, the threads they create, and with --inherit the processes they
  // fork (PerfTarget::Process); a --tid session's counters its one thread.
  // Breakpoints are per thread: the pid's main thread, or the --tid thread.
  const PerfTarget target = spec.task() ? PerfTarget::Task(spec.tid > 0 ? spec.tid : spec.pid)
                                        : PerfTarget::Cpu(spec.cpu);
  const PerfTarget counter_target =
      spec.task() && spec.tid == 0 ? PerfTarget::Process(spec.pid, spec.inherit) : target;
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
                       ? OpenHardwareCounter(perf_caps_, counter_target, r.type, r.config,
                                             pe.get(), &d, creds.has_value())
                       : OpenSoftwareCounter(counter_target, r.config, pe.get(), &d,
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
  int pinned_opened = 0;  // this session's pinned host breakpoints so far
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
    Session::Req q;
    q.id = static_cast<RequestId>(id);
    q.label = label;
    q.breakpoint = true;
    q.pinned = pinned;
    if (!sim_ && !pinned && spec.task()) {
      // Flexible on a task: multiplexed by pfmd (host_breakpoints.cc). Its
      // event is opened now to check it (the kernel's refusals are the
      // client's errors), except that no free register only means waiting.
      auto pe = std::make_unique<PerfEvent>();
      q.muxed = true;
      q.bp_addr = bp.addr;
      q.bp_len = r.bp_kind == PFM_BP_X ? sizeof(long) : bp.len;
      q.bp_type = r.bp_kind;
      q.added_at = now;
      const int err = RunWithCredentials(
          creds,
          [&] {
            return OpenBreakpoint(perf_caps_, target, bp.addr, q.bp_len, q.bp_type, pe.get(),
                                  &d);
          },
          &d);
      if (err < 0 && err != -ENOSPC) {
        kernel_->RemoveRequest(q.id, now);
        return ErrnoToStatus(err, d);
      }
      q.on = err == 0;
      q.on_since = now;
      q.perf = static_cast<int>(s->perf.size());
      s->perf.push_back(std::move(pe));
    } else if (!sim_) {
      // The flexible breakpoints of the task give up a register first.
      if (spec.task()) RebalanceBreakpointsLocked(spec.pid, now, ++pinned_opened);
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
  p.req.tid = spec.tid;
  p.req.cpu = spec.cpu;
  p.req.bts = ToUapi(spec.bts);
  p.req.filter = ToUapi(spec.filter);
  p.req.format = ToUapi(spec.format);
  // Profilers and catch-alls want to see switches; a debugger's small
  // history keeps branches only.
  if (spec.role == Role::kProfiler || !spec.task()) p.req.flags |= PFM_CONSUMER_SWITCHES;
  if (spec.block) p.req.flags |= PFM_CONSUMER_BLOCK;
  // Where the arbiter drives the hardware (the sim), its schedule of the
  // session's counters and breakpoints goes into a lossless stream, so a
  // reader sees when each counted (docs/timeline.md). Not into a history
  // ring: its few slots are for the newest branches. On the host, Linux
  // multiplexes perf events itself and does not say when.
  if (sim_ && spec.bts != BtsMode::kHistory &&
      (!spec.counters.empty() || !spec.breakpoints.empty()))
    p.req.flags |= PFM_CONSUMER_SCHEDULE;
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

namespace {
// Whether the task `spec` names is the one its pidfd was checked on, still:
// the process alive (a pid is not reused before its process is reaped) and,
// for a --tid session, the thread still one of its (a thread's id is free
// as soon as it exits). perf_event_open and PTRACE_SEIZE take the ids by
// number after the check; a target that fails this afterwards may have had
// them land on another task.
bool StillTheTarget(const TypedSpec& spec, int pidfd) {
  if (!PidfdAlive(pidfd)) return false;
  if (spec.tid <= 0) return true;
  struct stat st;
  return ::stat(absl::StrCat("/proc/", spec.pid, "/task/", spec.tid).c_str(), &st) == 0;
}

absl::Status TargetGone(const TypedSpec& spec) {
  return absl::NotFoundError(absl::StrCat(
      spec.tid > 0 ? absl::StrCat("thread ", spec.tid, " of process ", spec.pid)
                   : absl::StrCat("process ", spec.pid),
      " exited while its session was set up (nothing was attached)"));
}
}  // namespace

absl::StatusOr<SessionId> SessionManager::Create(const Peer& peer,
                                                 ConnectionId conn,
                                                 const TypedSpec& spec) {
  const MachineInfo& m = machine_;
  // What the machine cannot do is refused before anything is allocated.
  if (spec.bts != BtsMode::kOff && !m.bts && !m.soft_bts)
    return absl::UnimplementedError(absl::StrCat(
        "BTS is not supported on this machine (", m.pmu, ": ",
        m.pmu_desc.empty() ? "no Debug Store" : m.pmu_desc, ")"));
  if (spec.bts != BtsMode::kOff && !m.bts && !spec.task())
    return absl::UnimplementedError(absl::StrCat(
        "BTS of a whole CPU (--cpu ", spec.cpu,
        ") needs hardware BTS, which this machine does not have; soft BTS "
        "traces one task: use --pid"));
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
  if (spec.debug && sim_)
    return absl::UnimplementedError(
        "debug: run control needs the host driver (the sim's tasks are not processes)");
  const bool need_tracer = !sim_ && (spec.bts != BtsMode::kOff || spec.debug);
  if (spec.address_filtered()) {
    if (!need_tracer || spec.bts == BtsMode::kOff || !spec.task())
      return absl::InvalidArgumentError(
          "address filters (--filter FUNCTION|'range LO-HI'|'@ FILE', --start) are a property "
          "of host branch tracing by soft BTS: --bts on a pid, with the host driver");
    if (config_.soft_bts_stepping != "branch")
      return absl::FailedPreconditionError(
          "address filters need branch stepping: this pfmd runs --soft-bts-stepping single");
  }
  // Host counters on a pid follow children too (perf stat's inherit).
  const bool host_counters = !sim_ && spec.task() && !spec.counters.empty();
  if (spec.inherit && !need_tracer && !host_counters)
    return absl::InvalidArgumentError(
        sim_ ? "inherit: the sim driver's tasks have no children to follow"
             : "inherit: following children is a property of host branch tracing "
               "and counting (--bts or --counter on a pid)");
  SessionId created = 0;
  {
    KernelLockGuard l(&kernel_->lock());
    auto s = std::make_unique<Session>();
    s->uid = peer.uid;
    s->conn = conn;
    s->spec = spec;
    s->target = spec.task() ? absl::StrCat("pid ", spec.pid,
                                           spec.tid > 0 ? absl::StrCat(" tid ", spec.tid) : "")
                            : absl::StrCat("cpu ", spec.cpu);
    // The task's name, for traces and their exports (perf's COMM). Read once
    // here: it is gone when the task has exited. World-readable, so this
    // reveals nothing the client could not read itself.
    if (!sim_ && spec.task()) {
      std::ifstream comm(absl::StrCat("/proc/", spec.pid, "/comm"));
      std::getline(comm, s->comm);
    }
    if (absl::Status st = CheckTargetLocked(peer, spec, &s->pidfd); !st.ok()) return st;
    if (after_target_checked_ && spec.task()) after_target_checked_(spec.pid);
    // A process that an inherited trace follows is traced by that trace's
    // tracer (one tracer a task: ptrace), and its records go to the sessions
    // of the process the trace started on; a tracer of its own could not
    // seize it.
    if (need_tracer) {
      const int32_t root = kernel_->TaskContextOf(spec.pid);
      if (root != spec.pid)
        return absl::FailedPreconditionError(absl::StrCat(
            "pid ", spec.pid, " is followed by the inherited trace of pid ", root,
            " (its tracer traces it, and its records, with their own pid, go to pid ",
            root, "'s sessions): create the session on pid ", root));
    }
    // A process at the pid of one that exited while an inherited trace of
    // it goes on (its children are traced under that pid: their context and
    // tracer are the pid's) is another process: it must neither join that
    // context nor share that tracer, which would hand it, and whoever traces
    // it, the first process's children's records. Its stream waits until
    // they have ended.
    if (!sim_ && spec.task() && (spec.consumer() || need_tracer)) {
      for (const auto& [oid, o] : sessions_)
        if (o->spec.pid == spec.pid && TargetExitedLocked(*o) &&
            ((o->consumer != 0 &&
              kernel_->LiveTaskContextOfConsumer(o->consumer) == spec.pid) ||
             (o->tracer && !o->tracer->done())))
          return absl::UnavailableError(absl::StrCat(
              "pid ", spec.pid, " is a new process: the trace of the process that had "
              "that pid has not ended (session ", oid,
              ": its tracer, or children it follows, still run); try again when it has"));
    }
    if (absl::Status st = CheckCapsLocked(peer, spec); !st.ok()) return st;
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
    // The pid was used by number (perf_event_open) after the pidfd was
    // checked: it named that process only if the process is still there now
    // (a pid is not reused before its process is reaped). Else the events
    // may be on a new process at the same pid: undone.
    if (s->pidfd.valid() && !StillTheTarget(spec, s->pidfd.get())) {
      ReleaseLocked(*s);
      return TargetGone(spec);
    }
    s->host_bts = need_tracer;
    s->creds = peer.TracerCredentials();
    ++next_session_;
    created = s->id;
    sessions_[created] = std::move(s);
    // Its flexible breakpoints join the task's rotation.
    if (!sim_ && spec.task() && !spec.breakpoints.empty())
      RebalanceBreakpointsLocked(spec.pid, NowLocked(), 0);
  }
  // The soft-BTS tracer of the target (one per pid, shared by its
  // sessions), started without the kernel lock: it reports into the kernel.
  if (need_tracer) {
    // A debugger's session (run control, a history for GDB) takes the
    // pid's tracer as it is: the children a profiler asked to follow do
    // not concern it (its reader picks its threads by tid).
    TracerProcess::Options options;
    options.inherit = spec.inherit;
    options.branch_step = config_.soft_bts_stepping == "branch";
    options.bind_cpu = config_.soft_bts_cpu == "bind";
    for (const auto& [lo, hi] : spec.filter_ranges) options.filter_ranges.push_back({lo, hi});
    options.filter_files = spec.filter_files;
    options.start_at = spec.start_at;
    bool as_is = false;  // take the pid's tracer with the options it has
    if (spec.role == Role::kDebugger && !spec.inherit && !spec.address_filtered()) {
      KernelLockGuard l(&kernel_->lock());
      if (TracerProcess* live = tracers_->FindLocked(spec.pid); live != nullptr && !live->done())
        as_is = true;
    }
    if (before_tracer_start_) before_tracer_start_(spec.pid);
    std::shared_ptr<TracerProcess> tracer;
    if (absl::Status st = tracers_->Start(spec.pid, peer, config_.max_tracers_per_uid,
                                             options, as_is, &tracer);
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
    // The same for the tracer, which seized the pid by number.
    bool gone = false;
    {
      KernelLockGuard l(&kernel_->lock());
      auto it = sessions_.find(created);
      if (it != sessions_.end()) it->second->tracer = tracer;  // this process's
      if (it != sessions_.end() && it->second->pidfd.valid() &&
          !StillTheTarget(spec, it->second->pidfd.get())) {
        gone = true;
        ReleaseLocked(*it->second);
        sessions_.erase(it);
      }
    }
    if (gone) {
      ReapTracers();
      return TargetGone(spec);
    }
  }
  return created;
}

void SessionManager::ReleaseLocked(Session& s) {
  const uint64_t now = NowLocked();
  for (const Session::Req& r : s.reqs)
    if (r.id) kernel_->RemoveRequest(r.id, now);
  bool had_breakpoints = false;
  for (const Session::Req& r : s.reqs) had_breakpoints |= r.breakpoint;
  s.reqs.clear();
  s.perf.clear();  // closes the host's perf events
  // Its registers go to the task's flexible breakpoints.
  if (had_breakpoints && s.spec.task()) RebalanceBreakpointsLocked(s.spec.pid, now, 0);
  if (s.debug_channel) {
    // The tracer's debugger is gone with its session: the helper ends
    // debug control (lets the process run, or kills what it launched).
    if (s.tracer) s.tracer->CloseDebugChannel();
    s.debug_channel = false;
  }
  if (s.host_bts && s.tracer) {
    bool shared = false;
    // Sharing it: a session with it, or one on the pid whose Start has not
    // handed it the tracer yet (it would get a stopped one).
    for (const auto& [id, o] : sessions_)
      shared |= o.get() != &s && (o->tracer == s.tracer ||
                                  (o->host_bts && !o->tracer && o->spec.pid == s.spec.pid));
    if (!shared) tracers_->RetireLocked(s.tracer.get());
  }
  s.tracer.reset();
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

}  // namespace pfm
