// pfmd's service logic, typed: sessions, their admission into the kernel
// core (rings, DS buffers, counters, breakpoints), memory accounting,
// per-uid caps, authorization, and the drivers' glue (host tracers, the sim
// runner). No JSON and no sockets here: the RPC layer (service.h) converts
// requests and replies, the transport (server.h) moves them.
//
// Contract of every method: the Peer is who asks (auth.h); a session of
// another uid is invisible to an unprivileged peer (NOT_FOUND, as for an id
// that does not exist). Creation is all-or-nothing: a refusal leaves nothing
// allocated, charged or admitted. Release never fails.
//
// Thread safety: every method may be called from any thread; the kernel
// lock (kernel/kernel_lock.h, owned by the Kernel) guards all state. Methods
// that wait for processes (tracers) do so without it.
#ifndef PFM_USERSPACE_PFMD_SESSION_MANAGER_H_
#define PFM_USERSPACE_PFMD_SESSION_MANAGER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernel/drivers/driver.h"
#include "kernel/drivers/perf/perf_events.h"
#include "kernel/drivers/ptrace/soft_bts.h"
#include "kernel/drivers/sim/sim_machine.h"
#include "kernel/pfm_kernel.h"
#include "kernel/uapi/proc_maps.h"
#include "pfm/unique_fd.h"
#include "userspace/pfmd/accounting.h"
#include "userspace/pfmd/auth.h"
#include "userspace/pfmd/clock.h"
#include "userspace/pfmd/config.h"
#include "userspace/pfmd/typed_spec.h"

namespace pfm {

using SessionId = uint64_t;
using ConnectionId = uint64_t;

class HostTracers;
class SimRunner;

// A counter's or breakpoint's count, as `session show` reports it.
struct RequestInfo {
  RequestId request = 0;  // the arbiter's id (SCHEDULE records name it); 0: none
  std::string label;  // event name or breakpoint spec ("0x401000:1:x")
  bool pinned = false;
  bool pebs = false;
  uint64_t pebs_period = 0;
  bool readable = false;  // false: no reading (the request is gone)
  PmuArbiter::Reading reading;
};

enum class TaskState { kNotATask, kRunning, kExited };

struct SessionInfo {
  SessionId id = 0;
  uid_t uid = 0;
  Role role = Role::kProfiler;
  std::string target;  // "pid N" or "cpu N"
  std::string comm;    // a host task's name (/proc/PID/comm) at creation, or ""
  BtsMode bts = BtsMode::kOff;
  TraceFilter filter = TraceFilter::kUser;
  RecordFormat format = RecordFormat::kFixed;
  bool detached = false;
  uint64_t buffer_bytes = 0;   // what the ring holds for the user
  uint64_t charged_bytes = 0;  // its ring, bookkeeping and share of pools
  bool has_stream = false;     // a ring exists: the three below are valid
  uint64_t records = 0, lost = 0, overwritten = 0;
  TaskState state = TaskState::kNotATask;
  std::optional<int64_t> exit_status;  // wait status, when the tracer saw it
  int fatal_signal = 0;
  // With detail only (Show):
  std::vector<RequestInfo> counters;
  std::vector<RequestInfo> breakpoints;
  std::optional<SoftBtsTracer::Stats> soft_bts;
  // The mapping lists are not here (they can be megabytes): Maps pages
  // through them.
};

// Mapping lists of a soft-BTS session's tracer (SessionManager::Maps), each
// with its number in the tracer's history (TracerProcess::NumberedMaps).
struct MapsLists {
  struct List {
    uint64_t seq = 0;
    std::shared_ptr<const ProcessMaps> maps;  // never null
  };
  std::vector<List> lists;
  uint64_t newest = 0;  // the newest list's number; 0: none yet
};

struct StatusInfo {
  std::string driver;
  MachineInfo machine;
  size_t sessions = 0;
  uint64_t limit_per_uid = 0, limit_total = 0;
  uint64_t allocated = 0;  // what the accountant charges, all uids
  // What is held: the core's rings and DS buffers (measured), plus the
  // sessions' bookkeeping and the tracer processes (the charged estimates).
  // Equal to `allocated` whenever no request is in flight.
  uint64_t held = 0;
  std::vector<std::pair<uid_t, uint64_t>> charged;
};

struct HolderInfo {
  std::string slot;  // "gp3", "dr1", "bts", "pebs", "-" while waiting
  std::string what;  // label, or "(other uid)"
  std::string kind;  // "counter", "debug register", "debug store"
  SessionId session = 0;
  std::string mode;   // "pinned", "flexible", "shared"
  std::string state;  // "on hw", "waiting", "attached"
  std::optional<double> ratio;  // running ratio, once counted
};

struct ResourcesInfo {
  struct Cpu {
    int cpu = 0;
    int32_t running_pid = 0;
    std::vector<HolderInfo> holders;
  };
  struct Task {
    int32_t pid = 0;
    std::vector<HolderInfo> holders;
  };
  std::vector<Cpu> cpus;
  std::vector<Task> tasks;
  int debug_registers = 0, gp_counters = 0, fixed_counters = 0;
};

// What /metrics reports (metrics.h), read in one pass under the kernel lock
// and turned into Prometheus families after it is released. Only live state:
// an ended session's entries are gone from the next one.
struct MetricsInfo {
  struct Session {
    SessionId id = 0;
    uid_t uid = 0;
    Role role = Role::kProfiler;
    bool has_stream = false;  // a ring exists: the three below are valid
    uint64_t records = 0, lost = 0, overwritten = 0;
  };
  // An arbiter request (counter, PEBS event, breakpoint) that has been
  // counted at least once.
  struct Request {
    SessionId session = 0;
    RequestId request = 0;
    std::string event;  // event name or breakpoint spec
    double ratio = 0;   // time running / time enabled
  };
  // Hardware slots holding a request now, on one CPU: the arbiter's
  // (every request on the sim; on the host, none of the kernel's, below).
  struct CpuSlots {
    int gp = 0, fixed = 0, debug = 0;
  };
  std::vector<Session> sessions;
  std::vector<Request> requests;
  std::vector<CpuSlots> slots;  // [machine.cpus]
  // Host: breakpoints holding a debug register of their task now (the
  // kernel loads a task's registers on whichever CPU runs it: no CPU).
  int host_breakpoints_on = 0;
  int gp_counters = 0, fixed_counters = 0, debug_registers = 0;  // per CPU
  uint64_t limit_per_uid = 0, limit_total = 0;
  uint64_t allocated = 0, held = 0;  // as StatusInfo
  std::vector<std::pair<uid_t, uint64_t>> charged;
  uint64_t rotations = 0;
  // Soft-BTS tracers (host driver; zero on the sim).
  size_t tracers = 0;
  uint64_t tracer_steps = 0, tracer_branches = 0;
  // Live tracers whose tasks are bound to one CPU, by that CPU.
  std::map<int, size_t> tracers_bound;
};

// A session's ring, passed to its client (the fd is a dup).
struct RingHandle {
  SessionId id = 0;
  BtsMode mode = BtsMode::kOff;
  RecordFormat format = RecordFormat::kFixed;
  std::string target;
  uint64_t mapped_bytes = 0;
  UniqueFd fd;
};

// The sim command (--driver sim only).
struct SimRequest {
  enum class Action { kPause, kResume, kRun, kExit, kStats } action;
  int32_t pid = -1;     // kExit; kStats: one task (-1: all)
  uint64_t ns = 0;      // kRun
};
struct SimTaskStats {
  int32_t pid = 0;
  SimMachine::TaskStats stats;
  // The simulator's ground truth for each counter a visible session asks
  // of this task.
  std::vector<std::pair<std::string, uint64_t>> true_counts;
};
struct SimReport {
  uint64_t now = 0;
  bool paused = false;
  std::optional<int32_t> exited_pid;
  std::vector<SimTaskStats> tasks;  // kStats
};

struct SessionManagerDeps {
  const Clock* clock = nullptr;  // null: the monotonic clock (host driver)
  // Tests: runs in Create between the target's check (its pidfd opened and
  // its credentials read) and the first use of its pid, to put a recycled
  // pid there.
  std::function<void(int32_t pid)> after_target_checked;
  // Tests: runs in Create after the session's perf events and consumer are
  // in place and re-checked, just before the pid's soft-BTS tracer is
  // started (it seizes the pid by number).
  std::function<void(int32_t pid)> before_tracer_start;
};

class SessionManager {
 public:
  SessionManager(PfmdConfig config, MachineInfo machine,
                 SessionManagerDeps deps = {});
  ~SessionManager();
  SessionManager(const SessionManager&) = delete;
  SessionManager& operator=(const SessionManager&) = delete;

  const PfmdConfig& config() const { return config_; }
  const MachineInfo& machine() const { return machine_; }

  // Creates a session for `peer`, owned by connection `conn` (it ends with
  // the connection unless spec.detached).
  absl::StatusOr<SessionId> Create(const Peer& peer, ConnectionId conn,
                                   const TypedSpec& spec);
  absl::StatusOr<SessionInfo> Show(const Peer& peer, SessionId id);
  // The mapping lists of session `id`'s soft-BTS tracer (none for a session
  // without one), as session_show's authorization allows: the lists of
  // every traced process numbered `seq` or more, oldest first, at most
  // `max_lists`; with `current`, only the tracee's own newest list (when it
  // is numbered `seq` or more). Copied outside the kernel lock.
  absl::StatusOr<MapsLists> Maps(const Peer& peer, SessionId id, uint64_t seq,
                                 bool current, size_t max_lists);
  // Sessions visible to `peer` with ids above `after`, in id order, at most
  // `limit`.
  std::vector<SessionInfo> List(const Peer& peer, SessionId after, size_t limit);
  // Ends the session. A soft-BTS tracer first hands over the branches it
  // holds, so the ring is complete up to the kill.
  absl::Status Kill(const Peer& peer, SessionId id);
  // The session's ring; `drain` first brings it up to date (the soft-BTS
  // tracer hands over what it holds, the CPU areas are drained).
  absl::StatusOr<RingHandle> Ring(const Peer& peer, SessionId id, bool drain);
  // A debug channel (kernel/drivers/ptrace/debug_channel.h) to the tracer of
  // the session's pid, for a session created with `debug`: one debugger per
  // pid at a time (FAILED_PRECONDITION naming the session that has it). The
  // channel ends with the session.
  absl::StatusOr<UniqueFd> Debug(const Peer& peer, SessionId id);
  // A hardware breakpoint or watchpoint of a debugger (pfmctl gdbserver's
  // Z1/Z2/Z4) on a session holding a debug channel: a pinned debug-register
  // request of that session. Insert: the arbiter admits it (or refuses with
  // RESOURCE_EXHAUSTED naming the holders when the pinned ones fill the
  // registers) and the task's flexible breakpoints make room, so the tracer
  // finds a register free when it arms it. Remove: the request goes and the
  // flexible breakpoints get the register back; removing one that is not
  // there is NOT_FOUND. Returns the request id.
  absl::StatusOr<RequestId> DebugBreakpoint(const Peer& peer, SessionId id, bool insert,
                                            const BreakpointSpec& bp);
  // Host: rotates the flexible breakpoints of tasks whose breakpoints
  // outnumber the debug registers pinned ones leave (host_breakpoints.cc).
  // True while some task is oversubscribed: call again after the mux
  // interval; false: nothing to rotate until a request changes.
  bool RotateBreakpoints();
  StatusInfo Status();
  // Every session, request and charge, whoever owns them: for /metrics,
  // whose reader is trusted by where it listens (docs/pfmd.md, "Metrics").
  // Holds the kernel lock for O(sessions + requests).
  MetricsInfo Metrics();
  ResourcesInfo Resources(const Peer& peer);
  absl::StatusOr<SimReport> Sim(const Peer& peer, const SimRequest& req);

  // The connection closed: its non-detached sessions end.
  void Disconnected(ConnectionId conn);
  // No session exists (the embedded daemon's idle exit).
  bool Idle() const;
  // Stops tracers whose last session ended (waits for their processes):
  // call without holding anything, after each request.
  void ReapTracers();

  // Memory three ways, equal whenever no call is in flight: the sessions'
  // charged_bytes summed, the accountant's total, and what is held.
  struct MemoryTotals {
    uint64_t sessions = 0, allocated = 0, held = 0;
  };
  MemoryTotals Memory();

 private:
  // Asks the session's soft-BTS tracer (if any, still tracing) to hand over
  // what it holds, and waits for it (at most kSnapshotDrainWait), without
  // the kernel lock.
  void DrainTracerOf(const Peer& peer, SessionId id) ABSL_LOCKS_EXCLUDED(kernel_->lock());
  struct Session;

  uint64_t NowLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  absl::StatusOr<Session*> FindLocked(const Peer& peer, SessionId id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  absl::Status CheckTargetLocked(const Peer& peer, const TypedSpec& spec,
                                 UniqueFd* pidfd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // The per-uid caps (config_): sessions, perf fds, and Debug Store
  // consumers on the spec's context.
  absl::Status CheckCapsLocked(const Peer& peer, const TypedSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // Whether the session's task has exited (a CPU session's never does).
  bool TargetExitedLocked(const Session& s) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // The perf_event fds the spec will make pfmd hold: a breakpoint one, a
  // counter one per thread of its process (PerfTarget::Process) or one.
  int PerfFdsFor(const TypedSpec& spec) const;
  // Steps of Create, each undone by ReleaseLocked.
  absl::Status ChargeLocked(const Peer& peer, const TypedSpec& spec, Session* s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  absl::Status AdmitRequestsLocked(const Peer& peer, const TypedSpec& spec,
                                   Session* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  absl::Status AttachConsumerLocked(const TypedSpec& spec, Session* s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // Releases everything a session holds (consumer, requests, charges).
  // Never fails; safe on a half-built session.
  void ReleaseLocked(Session& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // Host breakpoints of task `pid` (host_breakpoints.cc): the flexible ones
  // take the debug registers the pinned ones leave, `extra_pinned` more
  // being about to be opened; a window of them rotates when they do not
  // all fit.
  void RebalanceBreakpointsLocked(int32_t pid, uint64_t now, int extra_pinned)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // The registers task `pid`'s pinned breakpoints (and `extra_pinned` more)
  // leave; its multiplexed ones go into `flex` (session, request index).
  size_t BreakpointRoomLocked(int32_t pid, int extra_pinned,
                              std::vector<std::pair<Session*, size_t>>* flex)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // Request `i` of `s` (a multiplexed breakpoint) off or on its register.
  void MuxOffLocked(Session& s, size_t i, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  bool MuxOnLocked(Session& s, size_t i, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // A host request of `session` the kernel holds (false: not one): a
  // breakpoint, or a counter pfmd opened a perf event for. Whether it holds
  // its hardware now (a counter always: the kernel multiplexes it), its
  // running ratio when it has been counted (pfmd's timing for a multiplexed
  // breakpoint, the kernel's for an event of pfmd's; none for a debugger's
  // breakpoint, whose event the tracer holds), and its full label (the
  // arbiter's holder label is cut at 47 bytes).
  bool HostRequestLocked(SessionId session, RequestId id, uint64_t now, bool* on,
                         std::optional<double>* ratio, std::string* label = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // The full label of request `id` of `session` (event name, breakpoint
  // spec, PEBS event), or `fallback` when there is none.
  std::string RequestLabelLocked(SessionId session, RequestId id, const char* fallback) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // Ends the debug channel of every session whose debugger is gone (its
  // tracer says the channel ended, or the tracer is gone): clears
  // debug_channel and removes the debugger's hardware points. Run before
  // debug requests and after every request (ReapTracers).
  void ExpireDebugChannelsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // A multiplexed breakpoint's reading, timed by pfmd.
  void MuxReadingLocked(const Session& s, size_t i, uint64_t now,
                        PmuArbiter::Reading* r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  SessionInfo InfoLocked(const Session& s, bool detail) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  // This session's part of its uid's share of its pool (the accountant's
  // split, divided among the uid's sessions there; exact in sum).
  uint64_t PoolShareLocked(const Session& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  uint64_t HeldLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  void OnTaskExitedLocked(TaskId task, int64_t status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());
  void OnTaskSignaledLocked(TaskId task, int signo) ABSL_EXCLUSIVE_LOCKS_REQUIRED(kernel_->lock());

  const PfmdConfig config_;
  const MachineInfo machine_;
  MonotonicClock monotonic_;
  const Clock* const clock_;
  const std::function<void(int32_t)> after_target_checked_;
  const std::function<void(int32_t)> before_tracer_start_;
  // The arbitration core; it owns the kernel lock, which guards everything
  // below.
  const std::unique_ptr<Kernel> kernel_;
  MemoryAccountant accountant_ ABSL_GUARDED_BY(kernel_->lock());
  SessionId next_session_ ABSL_GUARDED_BY(kernel_->lock()) = 1;
  std::map<SessionId, std::unique_ptr<Session>> sessions_ ABSL_GUARDED_BY(kernel_->lock());
  PerfCaps perf_caps_;  // host: what /sys/bus/event_source/devices offers
  std::unique_ptr<SimRunner> sim_;         // --driver sim
  std::unique_ptr<HostTracers> tracers_;   // --driver host
  // Host: per task with multiplexed breakpoints, where its rotating window
  // starts.
  std::map<int32_t, size_t> bp_rotation_ ABSL_GUARDED_BY(kernel_->lock());
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_SESSION_MANAGER_H_
