// `pfmctl script TRACE`: every record of a trace file on one line, with
// names, as `perf script` prints a perf.data file:
//
//   TIME [CPU] PID/TID TYPE: FIELDS
//   1234.567890123 [000] 4321/4321 branch: 7f3a1c0 _dl_start+0x10 => 7f3a200 _dl_start_user
//
// The file is streamed (BuildReport with each_record): memory does not grow
// with the trace. Names come from the trace's MAPS blocks, with the maps in
// effect at each record's time (report.h). A trace cut short is printed as
// far as it reads, then DATA_LOSS (exit status 1), as `export` does.
#ifndef PFM_USERSPACE_PFMCTL_SCRIPT_H_
#define PFM_USERSPACE_PFMCTL_SCRIPT_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "userspace/pfmctl/context.h"
#include "userspace/pfmctl/report.h"

namespace pfm {

// Appends `r`'s line, '\n' included, to *out. Times are the record's
// monotonic nanoseconds as seconds; addresses hex without 0x and their
// symbol ("[unknown]" where no mapping covers them), as perf script shows
// them; other types their fields ("-> 12/12 preempted", "7 records lost",
// "status 0 (exit 0)", ...).
void AppendScriptLine(const ReportRecord& r, std::string* out);

// Writes `buf` to `out` and empties it: OK, or once the stream failed (a
// closed pipe: pfmctl ignores SIGPIPE, so writes fail instead) CANCELLED
// when the reader went away (EPIPE: `script | head`; the command then exits
// 128 + SIGPIPE without a message, as a shell sees `perf script | head`
// end), else UNAVAILABLE naming the records written.
absl::Status FlushOutput(std::ostream& out, std::string* buf, uint64_t written);

// `script TRACE`: the lines on stdout; with --json one document
// {"trace", "records": [RecordJson...], "complete", "cut_reason"}, the
// records streamed as they are read.
absl::StatusOr<int> ScriptCommand(const CliContext& ctx, const CommandArgs& args);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_SCRIPT_H_
