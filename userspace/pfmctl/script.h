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

#include <boost/json.hpp>

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

// One JSON document whose "records" array is streamed:
//   {HEAD MEMBERS, "records": [RecordJson, ...], TAIL MEMBERS}
// written to `out` in pieces of about 64 KiB as the records come (`script
// --json`, `report --json --records`), so memory does not grow with the
// trace. The contract is one JSON document on stdout, or nothing on error:
// an error before the first record (a file that is not a trace, an output
// that cannot be written) leaves stdout empty (Fail writes nothing); an
// error once records were handed out (a read error mid-file: pieces may be
// out already, and holding them all back would hold the whole trace) ends
// the document with an "error" member, {"code", "message"}, the error that
// pfmctl also prints on stderr, in place of the tail. A JSON reader then
// gets one parseable document that says it stopped short, as `perf script`
// prints what it read before an error. Not thread-safe.
class JsonRecordStream {
 public:
  JsonRecordStream(std::ostream& out, const boost::json::object& head);

  // FlushOutput's errors.
  absl::Status Add(const ReportRecord& record);
  // Closes the array, adds `tail`'s members, ends the document and writes
  // it out (FlushOutput's errors).
  absl::Status Finish(const boost::json::object& tail);
  // After `error` stopped the reading: nothing if no record came, else the
  // document closed with {"error": {"code", "message"}}. A failed output
  // takes no more bytes; that is not reported again.
  void Fail(const absl::Status& error);

  uint64_t records() const { return records_; }

 private:
  std::ostream& out_;
  std::string buf_;
  uint64_t records_ = 0;
};

// `script TRACE`: the lines on stdout; with --json one document
// {"trace", "records": [RecordJson...], "complete", "cut_reason",
// "warnings"}, the records streamed as they are read (JsonRecordStream: a
// read error after the first record ends it with "error" in place of the
// last three; the text keeps the lines printed, as perf script does).
absl::StatusOr<int> ScriptCommand(const CliContext& ctx, const CommandArgs& args);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_SCRIPT_H_
