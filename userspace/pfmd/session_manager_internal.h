// Private to the session manager's .cc files (session_manager.cc: lifetime
// and queries; session_create.cc: creation and release): the session record
// and the sizes its charges use.
#ifndef PFM_USERSPACE_PFMD_SESSION_MANAGER_INTERNAL_H_
#define PFM_USERSPACE_PFMD_SESSION_MANAGER_INTERNAL_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kernel/drivers/ptrace/tracer_process.h"
#include "userspace/pfmd/session_manager.h"

namespace pfm {
namespace session_internal {

// Pools of shared DS buffers in the accountant: a task context's buffers by
// pid, a CPU catch-all's above 2^32.
inline PoolId TaskPool(int pid) { return static_cast<PoolId>(pid); }
inline PoolId CpuPool(int cpu) { return (1ull << 32) + static_cast<PoolId>(cpu); }

inline uint64_t AreaBytes(uint32_t bts, uint32_t pebs) {
  return uint64_t{bts} * sizeof(pfm_bts_raw) + uint64_t{pebs} * sizeof(pfm_pebs_raw);
}

// How long a snapshot waits for a soft-BTS tracer to hand over what it
// holds (a tracee stopped in a blocking syscall answers at once; the bound
// covers a tracer that does not answer).
inline constexpr std::chrono::milliseconds kSnapshotDrainWait{500};

// What pfmd itself holds for a session besides its ring and DS buffers: the
// session record, its requests and replies (an estimate, charged so a uid
// cannot grow pfmd without limit through sessions that have no ring); and
// per host perf_event fd, the kernel's perf_event and pfmd's PerfEvent.
inline constexpr uint64_t kSessionOverheadBytes = 4096;
inline constexpr uint64_t kPerfEventBytes = 4096;
// A soft-BTS tracer process: its private memory (decode cache, DS area,
// stacks), measured at 3.4 MiB private dirty (PSS 5.0 MiB, 1.7 of it the
// binary's pages shared with pfmd) on this machine, rounded up
// (docs/security.md). Part of the traced task's shared pool, split among
// the uids tracing it.
inline constexpr uint64_t kTracerProcessBytes = 4ull << 20;
// `sim run` advances at most this much virtual time per request, so one
// request holds the daemon for about a second at most.
inline constexpr uint64_t kMaxSimRunNs = 10'000'000'000ull;

}  // namespace session_internal

struct SessionManager::Session {
  struct Req {
    RequestId id = 0;   // arbiter request (0: not arbitrated, a software event)
    std::string label;  // event name or breakpoint spec
    uint32_t type = 0;
    uint64_t config = 0;
    bool breakpoint = false;
    bool pinned = false;
    int perf = -1;  // host: index into `perf` (the kernel's counter)
    // A debugger's hardware point (session_breakpoint): its debug register
    // is held by the pid's tracer, not by a perf event of pfmd's.
    bool tracer_held = false;
    // Host, a flexible breakpoint on a task: multiplexed by pfmd
    // (host_breakpoints.cc), which opens and closes its perf event.
    bool muxed = false;
    uint64_t bp_addr = 0;
    uint32_t bp_len = 0;   // perf's (sizeof(long) for execute)
    uint32_t bp_type = 0;  // HW_BREAKPOINT_*
    bool on = false;       // its perf event is open (holds a register)
    uint64_t added_at = 0, on_since = 0;
    uint64_t run_ns = 0;   // time open, before on_since
    uint64_t value = 0;    // hits counted by events since closed
  };
  SessionId id = 0;
  uid_t uid = 0;
  ConnectionId conn = 0;
  TypedSpec spec;
  std::string target;
  std::string comm;  // see SessionInfo::comm
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
  // That tracer, the one started for (or shared with) this session's
  // process: never another process's at a recycled pid. Its stats, maps and
  // debug channel are this session's; kept (stopped) after the process.
  std::shared_ptr<TracerProcess> tracer;
  std::optional<Credentials> creds;  // host: perf events open as these
  bool debug_channel = false;  // handed out a debug channel to that tracer
  UniqueFd pidfd;
  // The traced process's end, as its tracer saw it (host); kept per
  // session, so a new process at a recycled pid never inherits it.
  bool exited = false;
  int64_t exit_status = -1;
  int fatal_signal = 0;
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_SESSION_MANAGER_INTERNAL_H_
