// When things happened in a trace: the model behind `pfmctl export --format
// chrome-json` (Trace Event Format, for Perfetto and chrome://tracing) and
// `pfmctl report --timeline FILE.svg`. docs/export.md says what maps to what.
//
//   - a track per thread: its running slices, from SWITCH_IN to SWITCH_OUT
//     (voluntary or preempted), and its branches and PEBS samples counted
//     per time bucket;
//   - a track per counter or breakpoint of the session: the slices when it
//     was on hardware, from SCHEDULE records (the arbiter's schedule; only
//     where the arbiter drives the hardware, see docs/ds.md), so a reader
//     sees why a counter was scaled; with the time_running the trailer
//     reports, to compare.
//
// A slice still open at the end of the trace ends at the trace's last
// record. Records need not be in time order (a drain stamps branches after
// the switch that ended them); slices are built from the records sorted by
// time. Thread-compatible.
#ifndef PFM_USERSPACE_PFMCTL_TIMELINE_H_
#define PFM_USERSPACE_PFMCTL_TIMELINE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pfm/trace_file.h"

namespace pfm {

struct RunSlice {
  uint64_t start = 0, end = 0;
  uint16_t cpu = 0;
  // How it ended: "preempted", "voluntary", "exit", "trace end", or "trace
  // gap" (a second SWITCH_IN without a SWITCH_OUT between).
  std::string ended_by;
};

struct ThreadTrack {
  uint32_t pid = 0, tid = 0;
  std::vector<RunSlice> runs;
  // Timeline::bucket_ns wide; empty for none, and for every thread past
  // kMaxBucketedThreads (branches and samples still count them).
  std::vector<uint64_t> branches_per_bucket;
  uint64_t branches = 0;
  std::vector<uint64_t> samples_per_bucket;   // PEBS samples, the same way
  uint64_t samples = 0;
};

struct OnSlice {
  uint64_t start = 0, end = 0;
  uint16_t cpu = 0;
  uint32_t slot = 0;
};

struct RequestTrack {
  uint32_t request = 0;
  std::string name;        // the event or breakpoint; "request N" if unknown
  bool breakpoint = false;
  std::vector<OnSlice> on;
  uint64_t on_ns = 0;      // sum of the slices
  std::optional<uint64_t> time_running;  // as the trailer reports it
  std::optional<uint64_t> time_enabled;
};

struct Timeline {
  uint64_t start = 0, end = 0;  // first and last record's time
  uint64_t bucket_ns = 1;       // width of a branch-count bucket
  uint64_t session = 0;
  std::string title;            // "pid 1234 (ls -la)", "session 3", ...
  std::vector<ThreadTrack> threads;    // by (pid, tid)
  std::vector<RequestTrack> requests;  // by request id
  uint64_t lost = 0;
  uint64_t schedule_records = 0;
  uint64_t records = 0;        // records it was built from
  uint64_t slice_records = 0;  // of them, held to build slices
  // Threads with branches or samples but no per-bucket counts (past
  // kMaxBucketedThreads).
  uint64_t unbucketed_threads = 0;
  bool complete = true;       // the trace had its trailer (Trace::complete)
  std::string cut_reason;     // Trace::cut_reason when not
};

// At most this many branch-count buckets per thread (the bucket width is
// chosen from the trace's span, at least 1 us).
inline constexpr size_t kMaxTimelineBuckets = 1000;
// At most this many threads get per-bucket counts: the first to have a
// branch or sample in the trace's order. Each array is up to 8 KB, made by
// one 64-byte record; this bounds them at 16 MiB whatever the file holds.
// docs/timeline.md, "Limits".
inline constexpr size_t kMaxBucketedThreads = 1024;

// Of `trace`'s records, copies only those slices are made of (switches,
// exits, schedules: Timeline::slice_records), never branches, samples, gaps
// or anything else.
Timeline BuildTimeline(const Trace& trace);
// The same from a trace file, read twice with TraceReader (the records'
// span, then the branch and sample counts), holding what BuildTimeline
// holds. TraceReader's errors; a cut file gives the timeline of what was
// readable.
absl::StatusOr<Timeline> BuildTimelineFromFile(const std::string& path);

// The Trace Event Format (JSON object form, "traceEvents" plus
// "displayTimeUnit"): "X" slices, "C" counters, "M" names, "i" instants.
// Times in microseconds with ns precision, to 2^43 us (docs/timeline.md).
std::string ChromeTraceJson(const Timeline& t);

// A self-contained SVG: one row per thread (running slices) and one per
// request (on-hardware slices), a time axis, and each request's measured
// share against the trailer's time_running.
std::string TimelineSvg(const Timeline& t);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_TIMELINE_H_
