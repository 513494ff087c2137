// The wire protocol between pfmd (TracerProcess) and a tracer process
// (tracer_helper.cc): messages on a SOCK_STREAM socket pair, each a header
// {type, len} and `len` bytes of payload, host-endian (both ends are the
// same binary on the same machine). Internal to kernel/drivers/ptrace.
#ifndef PFM_KERNEL_DRIVERS_PTRACE_TRACER_PROTOCOL_H_
#define PFM_KERNEL_DRIVERS_PTRACE_TRACER_PROTOCOL_H_

#include <sched.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernel/drivers/ptrace/soft_bts.h"
#include "kernel/uapi/proc_maps.h"

namespace pfm::tracer_protocol {


// The helper's protocol: on a SOCK_STREAM socket pair, each message is a
// header {type, len} followed by `len` bytes of payload. Fixed-size fields
// are host-endian (both ends are the same binary on the same machine).
enum MsgType : uint32_t {
  // helper -> pfmd. A task is {i32 pid, i32 tid}; every task but the root
  // thread is announced by kTaskCreated before anything else names it.
  kStarted = 1,       // i32 rc, char detail[256]
  kDrain = 2,         // WireStats, task, i32 cpu, u32 n, pfm_bts_raw[n]; reply kHeld
  kHeldQuery = 3,     // task; reply kHeld
  kSwitch = 4,        // i32 cpu, task, u8 in, u8 preempt, u16 pad
  kExited = 5,        // task, i64 wait status (one per task)
  kSignaled = 6,      // task, i32 signo
  kMaps = 7,          // i32 pid, u32 flags (kMapsMore, kMapsCut),
                      // mappings in address order
                      // (kernel/uapi/proc_maps.h's encoding): one part of
                      // the process's list, the last without kMapsMore
                      // (MapsPayloads)
  kStats = 8,         // WireStats
  kDrainServed = 9,   // u64 ticket, WireStats
  kTaskCreated = 10,  // parent task, child task
  kTaskExec = 11,     // task
  kDebugEnded = 12,   // (empty): the debug channel served ended (its client
                      // closed it, or kDebugClose)
  kBound = 13,        // WireBound: the task runs on one CPU for the tracer
                      // (SoftBtsOptions::bind_cpu) and is to get `own` back;
                      // pfmd gives it back should the helper die without
                      // detaching (SIGKILL)
  // pfmd -> helper
  kHeld = 100,        // u8 held
  kRequestDrain = 101,  // u64 ticket
  kStop = 102,        // (empty)
  kDebugOpen = 103,   // u8 0; carries one fd (SCM_RIGHTS): a debug channel
                      // (debug_channel.h) to serve; refused (closed) while
                      // one is served
  kDebugClose = 104,  // (empty): end the channel being served
};

struct WireTask {
  int32_t pid;
  int32_t tid;
};

struct WireBound {
  WireTask task;
  int32_t cpu;       // the one CPU
  uint32_t n;        // bytes of `own` that count (a cpu_set_t's, at most)
  uint8_t own[128];  // the task's own affinity mask
};
static_assert(sizeof(cpu_set_t) == 128, "WireBound::own holds a cpu_set_t");

struct MsgHeader {
  uint32_t type;
  uint32_t len;
};

struct WireStats {
  uint64_t steps, branches, singleblock, reg_reads, computed, mispredictions,
      resyncs, tasks, tasks_seen, processes_seen, switches, switch_artifacts;
  int64_t switch_errno;
  uint64_t branch_stops, emulated, planted, gaps, children_first, stale_stops;
  int64_t bound_cpu;
};

// Bytes of a kDrain before its records.
inline constexpr size_t kDrainHead = sizeof(WireStats) + sizeof(WireTask) + 8;

// The DS area of a helper's tracer, in records (SoftBtsOptions' default),
// and the largest message either side accepts.
inline constexpr uint32_t kHelperDsRecords = kSoftBtsDsRecords;
inline constexpr uint32_t kMaxMsgBytes =
    kDrainHead + kHelperDsRecords * sizeof(pfm_bts_raw);
// kMaps: more parts of this list follow (a list whose encoding is over
// one message), and the most bytes of mappings, in all its parts, one list
// may have (the helper cuts a longer list, pfmd refuses it): 65536
// mappings (kMaxMappings) with 200-byte paths.
inline constexpr uint32_t kMapsMore = 1;
inline constexpr size_t kMaxMapsListBytes = 16 << 20;
// kMaps: the list is cut, its highest mappings left out (over
// kMaxMapsListBytes, or over kMaxMappings when the tracer read it). Set on
// any part, kept for the whole list (ProcessMaps::cut).
inline constexpr uint32_t kMapsCut = 2;

// The payloads of the kMaps messages that send `maps` (one process's list,
// in address order; `cut`: it was cut before, ParseProcMaps') for `pid`,
// each given to `send` as it is made (one part in memory at a time): parts
// of at most `part_bytes` of mappings each, kMapsMore on all but the last,
// up to `list_bytes` of mappings in all (a list is cut up to one part
// short of that); kMapsCut on the last part when mappings were left out,
// here or before. At least one payload; a mapping that cannot be encoded
// (none from ParseProcMaps) or fit a part ends the list there, cut.
void MapsPayloads(int32_t pid, const std::vector<Mapping>& maps, bool cut,
                  const std::function<void(const std::string&)>& send,
                  size_t part_bytes = kMaxMsgBytes - 8,
                  size_t list_bytes = kMaxMapsListBytes);
// A helper that has not attached within this long is given up on.
inline constexpr int kStartTimeoutMs = 15000;

// Writes all of it; `wait` false: gives up instead of blocking.
bool WriteAll(int fd, const void* p, size_t n, bool wait);
bool ReadAll(int fd, void* p, size_t n);
// One message; false on EOF, error or a length over kMaxMsgBytes.
bool ReadMsg(int fd, MsgHeader* h, std::string* payload);
// The same, also taking an fd passed with the message (SCM_RIGHTS, made
// close-on-exec; -1 when none came).
bool ReadMsgFd(int fd, MsgHeader* h, std::string* payload, int* passed);
// Sends a whole frame with `pass` attached (SCM_RIGHTS).
bool SendWithFd(int fd, const std::string& frame, int pass);
std::string Frame(uint32_t type, const void* payload, uint32_t len);
WireStats ToWire(const SoftBtsTracer::Stats& s);
SoftBtsTracer::Stats FromWire(const WireStats& w);
// Waits for a helper told to leave (kStop, or its socket closed) to exit;
// kills it only after `timeout`: a helper killed while attached can leave
// its tracee with the trap flag set.
void ReapHelper(pid_t helper, std::chrono::milliseconds timeout);

}  // namespace pfm::tracer_protocol

#endif  // PFM_KERNEL_DRIVERS_PTRACE_TRACER_PROTOCOL_H_
