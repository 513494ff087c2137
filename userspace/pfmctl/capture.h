// Capturing a session's records into a trace file (pfm/trace_file.h): the
// ring pfmd passes, the one loop that copies a lossless ring into a file
// (used by `stream` and by `record`), and the session summary a trace
// carries for `report` (trailer fields and a MAPS block).
#ifndef PFM_USERSPACE_PFMCTL_CAPTURE_H_
#define PFM_USERSPACE_PFMCTL_CAPTURE_H_

#include <csignal>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pfm/client.h"
#include "pfm/ring_reader.h"
#include "kernel/uapi/proc_maps.h"
#include "pfm/trace_file.h"
#include "userspace/pfmctl/reply.h"

namespace pfm {

// Maps session `id`'s ring from the memfd pfmd passes with its session_ring
// reply; *info (if given) gets the reply's result (id, mode, format, ...),
// which trace headers keep. `drain` asks pfmd to bring the ring up to date
// first (snapshots). A reply that is not an object, does not carry exactly
// one fd, or whose fd is not a ring is INTERNAL "pfmd reply: session_ring:
// ...".
absl::StatusOr<RingReader> MapRing(Client& c, uint64_t id, bool drain,
                                   boost::json::object* info);

// What `report` needs from the daemon to symbolize and summarise a trace:
// from session_show, the session's counters and breakpoints, its state and
// the tracer's step count, copied into *trailer; from session_maps
// (ReadMapsLists), every mapping list of every process the tracer followed
// (soft BTS on the host), then the target's current one, written to `w` as
// MAPS blocks. Adds nothing and returns OK when the session or pfmd is gone
// (NOT_FOUND, UNAVAILABLE, a failed session_show); INTERNAL when a reply is
// malformed (ReadMaps' checks included) and pfmd's error for any other
// refusal, after adding nothing; TraceWriter's error when a block cannot be
// written.
// A pfmd older than session_maps: the lists its session_show carries
// ("process_maps", "maps") are taken instead; a soft-BTS session without
// them gets the trailer's "maps_missing" (kNoSessionMapsWarning), which the
// commands print as a warning.
absl::Status AddSessionSummary(Client& c, uint64_t id, TraceWriter& w,
                               boost::json::object* trailer);
inline constexpr char kNoSessionMapsWarning[] =
    "pfmd does not serve session_maps (it is older than this pfmctl): the trace has no "
    "mapping lists, so report and export cannot name its addresses";
// "pfmctl: warning: ..." on `err` when AddSessionSummary left the mapping
// lists out.
void WarnMissingMaps(const boost::json::object& trailer, std::ostream& err);

// What a stream's file starts with, from session_show: the target task's
// pid and name (for the header: perf's COMM in an export), and from
// session_maps its current mappings (soft BTS on the host; written as a
// MAPS block at the start, so a file whose session is killed before the
// end, and so has no summary, can still name its addresses). Empty when
// the session is gone; INTERNAL for a malformed reply.
struct SessionStart {
  int32_t pid = 0;   // 0: a CPU session
  std::string comm;  // "" when pfmd does not know it (the sim)
  std::optional<ProcessMaps> maps;
};
absl::StatusOr<SessionStart> ReadSessionStart(Client& c, uint64_t id);

// The mapping lists of session `id`, paged through session_maps (docs/pfmd.md,
// "Mapping lists"): every list the tracer keeps, oldest first, up to the
// newest there was at the first page; with `current`, the target's own
// newest list (none before the tracer sent one; at most one, following at
// most 8 versions of it that came while it was paged). A list the tracer dropped
// while it was being paged is left out. Each mapped file's build-id is read
// now (AddBuildIds). pfmd's error as it came (NOT_FOUND: the session is
// gone); INTERNAL "pfmd reply: session_maps: ..." for a malformed page,
// one that continues no list, or one that does not move forward.
absl::StatusOr<std::vector<ProcessMaps>> ReadMapsLists(Client& c, uint64_t id,
                                                       bool current);

// One mapping list of a session_maps reply, read through `maps`' reader:
//   {"pid": int32, "time_ns": uint, "cut": bool,
//    "mappings": [{"start": uint, "end": uint, "offset": uint, "path": string,
//                  "writable": bool, "shared": bool}, ...]}
// Every field is required but "cut" (ProcessMaps::cut; absent from a pfmd
// before it: false). What a MAPS block could not carry is the
// reader's error too: a mapping that ends before it starts or whose path is
// over kMaxMappingPath bytes, more than kMaxMappings mappings, a pid outside
// int32.
ProcessMaps ReadMaps(const ReplyNode& maps);

struct StreamResult;

// When StreamToFile stops, besides the ring's end flag.
struct StreamOptions {
  // The connection to pfmd, watched for a hang-up while the ring is idle
  // (pfmd sends nothing unsolicited, so any event on it is the hang-up), or
  // -1. A ring whose writer died never ends: without this, the loop would
  // poll it forever.
  int daemon_conn = -1;
  // A pidfd of that pfmd, or -1. After a hang-up the loop waits (up to 10 s)
  // for the daemon to exit and drains once more: a SIGTERMed pfmd closes
  // connections first and ends its rings afterwards.
  int daemon_pidfd = -1;
  // Set (by a signal handler) to stop at the next idle moment.
  const volatile std::sig_atomic_t* stop = nullptr;
  // Asked at every idle moment; true stops the loop (`record`: the command
  // exited and the ring did not end soon after).
  std::function<bool()> give_up;
  // Called after every batch written and at every idle moment with the
  // counts so far (the progress line: progress.h).
  std::function<void(const StreamResult&)> progress;
};

struct StreamResult {
  bool ended = false;         // the ring ended and everything in it is written
  bool hung_up = false;       // pfmd hung up (its last records drained)
  bool stopped = false;       // *stop was set
  bool gave_up = false;       // give_up() said so
  uint64_t lost_records = 0;  // sum of the LOST records written
  uint64_t branches = 0;      // branch records written
};

// Copies the records of a lossless ring into `w` as they come, until the
// ring ends or an option above stops it. Idle moments wait 2 ms (on the
// connection, if watched). A write error is returned as is; a ring whose
// data is malformed is DATA_LOSS naming `path` and what was written (no
// trailer: the file says it was cut short).
absl::StatusOr<StreamResult> StreamToFile(RingReader& ring, TraceWriter& w,
                                          const std::string& path,
                                          const StreamOptions& options);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_CAPTURE_H_
