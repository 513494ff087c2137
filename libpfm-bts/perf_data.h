// A pfm trace (pfm/trace_file.h) as a perf.data file that the perf tool
// reads: `perf script`, `perf report`, `perf report -D`. What maps to what,
// and what perf shows of it: docs/export.md.
//
// Sources of the facts below (layouts and constants only; no perf code is
// used): tools/perf/Documentation/perf.data-file-format.txt and
// tools/perf/util/header.c of Linux (perf 6.1), the uapi <linux/perf_event.h>
// for the records and perf_event_attr; checked against /usr/bin/perf 6.1.
//
// File layout (native = little-endian, every offset a multiple of 8):
//
//   0    file header, kPerfHeaderBytes:
//          u64 magic "PERFILE2" | u64 size (104) | u64 attr_size (144)
//          | {u64 offset, u64 size} attrs | ... data | ... event_types {0,0}
//          | 256-bit feature bitmap (4 x u64)
//   104  attrs: per event a perf_event_attr of kPerfAttrBytes (attr.size =
//        128, PERF_ATTR_SIZE_VER7: perf 6.1 refuses a larger attr as an
//        "incompatible file format") then {u64 offset, u64 size} of its ids
//        ...  the ids, one u64 per event (event i has id i + 1)
//        ...  data: the records (perf_event_header first, each a multiple of
//             8 bytes), never empty (perf refuses a data size of 0)
//   data.offset + data.size: the feature index, one {offset, size} per set
//        feature bit in bit order, then the features' contents:
//          BUILD_ID    per mapped file with a GNU build-id: a build-id
//                      record (pid -1, the id, the path)
//          NRCPUS      u32 available, u32 online (from the exported
//                      records' cpus and the READs')
//          CMDLINE     u32 n, n strings (when options.cmdline is given)
//          EVENT_DESC  u32 n, u32 attr size, per event: attr, u32 ids,
//                      string (the event's name), the ids
//          SAMPLE_TIME u64 first, u64 last exported record's time (when any)
//        A string is u32 len, then len bytes: NUL-terminated, zero-padded
//        to a multiple of 64.
//
// The events (perf_event_attr), in this order, those that apply:
//   "branches[:u|:k]"  BRANCH records: PERF_TYPE_HARDWARE
//        PERF_COUNT_HW_BRANCH_INSTRUCTIONS, sample_period 1, which perf
//        treats as BTS (`perf script` prints "from => to").
//   PEBS, one per arbiter request seen: precise_ip 2, named after the
//        trailer's counter of that request (or the spec's pebs_event);
//        samples carry the data address and the latency as weight.
//   counters, one per trailer counter (and per request of COUNTER records
//        that is not one): their values as PERF_RECORD_READ. The trailer's
//        final values are the traced process's (pid/tid) in a task's trace;
//        in a CPU's trace (spec cpu, ring target "cpu N") they are that
//        cpu's, of no task: pid/tid -1, as perf's CPU-wide events.
// At most 256 events: the records of requests past that (a damaged trace)
// are skipped and counted in PerfDataSummary::skipped.
// Every event has sample_id_all; with more than one, PERF_SAMPLE_IDENTIFIER
// too (perf needs it to tell them apart).
//
// Thread-compatible; no globals.
#ifndef PFM_LIBPFM_BTS_PERF_DATA_H_
#define PFM_LIBPFM_BTS_PERF_DATA_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernel/uapi/proc_maps.h"
#include "pfm/trace_file.h"

namespace pfm {

// Sizes of the file's fixed parts (see the layout above).
inline constexpr size_t kPerfHeaderBytes = 104;
inline constexpr size_t kPerfAttrBytes = 128;
inline constexpr size_t kPerfFileAttrBytes = kPerfAttrBytes + 16;  // + ids section
inline constexpr char kPerfMagic[8] = {'P', 'E', 'R', 'F', 'I', 'L', 'E', '2'};

// Feature bits (tools/perf/util/header.h, enum of HEADER_*).
inline constexpr int kPerfFeatBuildId = 2;
inline constexpr int kPerfFeatNrCpus = 7;
inline constexpr int kPerfFeatCmdline = 11;
inline constexpr int kPerfFeatEventDesc = 12;
inline constexpr int kPerfFeatSampleTime = 21;

// perf's own record type, not the kernel's (tools/perf/util/event.h,
// PERF_RECORD_FINISHED_ROUND): a header alone; perf sorts the records
// before it by time and delivers them.
inline constexpr uint32_t kPerfRecordFinishedRound = 68;

// Records between two FINISHED_ROUND records (and one after the last).
inline constexpr size_t kPerfRoundRecords = 1 << 16;

// The trace's records in file order, each handed to the visitor; the
// writer asks for two such passes (one to plan the events and learn where
// time goes backwards, one to write), so a trace file can be read twice
// instead of held. A visitor's error ends the pass with it.
using PerfRecordVisitor = std::function<absl::Status(const pfm_record&)>;
using PerfRecordPass = std::function<absl::Status(const PerfRecordVisitor&)>;

struct PerfDataOptions {
  // The mappings perf symbolizes with: one PERF_RECORD_MMAP2 each, at the
  // start (stamped with the first record's time, so they govern every
  // sample). pid 0 takes the trace header's pid. Null: none.
  const ProcessMaps* maps = nullptr;
  // Every process's mappings over time (a trace's MAPS blocks, in the
  // trace's order: children, execs, dlopen). When not empty it replaces
  // `maps`: each block becomes MMAP2 records of its pid, the first of a pid
  // stamped at the first record's time (before every record), later ones
  // (an exec, a dlopen) at their own time, written among the records where
  // that time falls. A pid other than the traced command's, and a pid whose
  // program changed (an exec), gets a COMM with its block, named after its
  // first file mapping, so perf shows which program it ran; the process's
  // other threads get the same name.
  std::vector<const ProcessMaps*> all_maps;
  // HEADER_CMDLINE (`perf report --header`: "# cmdline : ..."); empty: no
  // such feature.
  std::vector<std::string> cmdline;
  // HEADER_BUILD_ID: the GNU build-id of each mapped file that has one: the
  // one recorded in the trace's MAPS block (Mapping::build_id), else read
  // from the file now (as `perf record` reads them when it finishes), so
  // perf can tell a rebuilt binary from the one traced (`perf buildid-list`).
  bool build_ids = true;
  // Putting the records in time order, in bounded memory (docs/export.md):
  // the records are taken in chunks of `reorder_chunk`; those that must wait
  // for later chunks are held, up to `reorder_held`; past that, the held
  // ones and every later chunk become sorted runs in an unlinked file in
  // `temp_dir` (empty: $TMPDIR, else /tmp), merged at the end.
  size_t reorder_chunk = size_t{1} << 16;
  size_t reorder_held = size_t{1} << 18;
  std::string temp_dir;
};

struct PerfDataSummary {
  uint64_t samples = 0;       // PERF_RECORD_SAMPLE (branches, PEBS)
  uint64_t side_records = 0;  // COMM, MMAP2, SWITCH, EXIT, LOST, THROTTLE
  uint64_t reads = 0;         // PERF_RECORD_READ (counters)
  uint64_t data_bytes = 0;    // the data section's size
  // pfm records with no perf counterpart (resized, schedule, gap, exec,
  // unknown types), or whose request got no event, by RecordTypeName.
  // Only the records exported say the times (SAMPLE_TIME, the side
  // records'), the cpus (NRCPUS) and the threads (COMMs).
  std::map<std::string, uint64_t> skipped;
  std::vector<std::string> events;  // the events' names, in attr order
  uint64_t build_ids = 0;           // files with a build-id in HEADER_BUILD_ID
  // One line per file whose build-id now is not the recorded one ("PATH:
  // build-id X when recorded, Y now (...)"); the recorded id is written.
  std::vector<std::string> warnings;
  // The time ordering: the most records held at once waiting for later
  // ones, and the sorted runs spilled to a temporary file (0: none).
  uint64_t peak_held = 0;
  uint64_t sort_runs = 0;
};

// Writes `trace` to `path` (created or truncated, mode 0644, owned by the
// caller: perf refuses another user's file). Records are written in time
// order (records of equal time keep the trace's order; side records go
// before the records of their time), as perf would deliver them anyway.
// The trace's header and trailer are input: fields of the wrong type are
// ignored, never asserted. Errors: the file cannot be created
// (INVALID_ARGUMENT, naming it and why) or written (UNAVAILABLE, leaving a
// partial file behind).
absl::StatusOr<PerfDataSummary> WritePerfData(const Trace& trace,
                                              const PerfDataOptions& options,
                                              const std::string& path);

// The same from the trace's header and trailer and two passes over its
// records (a trace file read twice: `pfmctl export` of a big trace). The
// same bytes as from the Trace holding those records. The second pass must
// hand out as many records as the first, and no branch when the first had
// none (DATA_LOSS otherwise: the trace changed underneath); a temporary
// file that cannot be written is UNAVAILABLE.
absl::StatusOr<PerfDataSummary> WritePerfData(const boost::json::object& header,
                                              const boost::json::object& trailer,
                                              const PerfRecordPass& records,
                                              const PerfDataOptions& options,
                                              const std::string& path);

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_PERF_DATA_H_
