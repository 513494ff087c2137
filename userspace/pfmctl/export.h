// `pfmctl export` and `record --output-format`: a trace file (pfm/trace_file.h)
// in another tool's format. The formats are one table, kExportFormats in
// export.cc: a name and the function that writes the trace file in that
// format, reading it as it goes (no format holds the whole trace). Adding a
// format is one entry there (and its writer); the flag checks, the help
// text (PfmctlUsage) and the messages all read the table.
//
// Formats: "perf" (perf.data for perf script / perf report;
// libpfm-bts/perf_data.h, docs/export.md) and "chrome-json" (the Trace
// Event Format for Perfetto and chrome://tracing; timeline.h,
// docs/timeline.md).
#ifndef PFM_USERSPACE_PFMCTL_EXPORT_H_
#define PFM_USERSPACE_PFMCTL_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pfm {

inline constexpr char kDefaultExportFormat[] = "perf";

struct ExportRequest {
  std::string trace_path;  // the pfm trace to read
  std::string out_path;    // the file to write (created or truncated)
  std::string format;      // a name in the table
  // How pfmctl was invoked ("pfmctl", "export", ...), for formats that
  // record it (perf: HEADER_CMDLINE).
  std::vector<std::string> cmdline;
};

struct ExportResult {
  uint64_t records = 0;        // pfm records read from the trace
  boost::json::object detail;  // the format's own summary (perf: samples, events, ...)
  // What the user should be told, one line each, without a prefix (perf: a
  // binary whose build-id changed since the recording, "PATH: build-id X
  // when recorded, Y now (...)"; also in detail["warnings"]). In text mode
  // pfmctl prints each as "pfmctl: warning: LINE" on stderr, as perf does
  // its warnings; --json has them in the detail.
  std::vector<std::string> warnings;
};

// The format names joined by `separator` ("perf"; "a, b" or "a|b" with
// more), for refusals and the help.
std::string ExportFormatList(const char* separator = ", ");

// OK for a format in the table; else INVALID_ARGUMENT
// "unknown export format 'X' (formats: perf, chrome-json)".
absl::Status CheckExportFormat(const std::string& format);

// Reads the trace (TraceReader: NOT_FOUND for a missing file,
// INVALID_ARGUMENT for what is not a trace, a directory or another kind of
// file), writes it in `format`. The output may not be the trace itself
// (INVALID_ARGUMENT). A trace cut short or damaged is exported as far as
// it reads, and then DATA_LOSS "<trace>: <where the reading stopped>;
// exported N records to <out>". Every format's output that cannot be
// created is INVALID_ARGUMENT "cannot write <out>: <strerror>", one that
// cannot be written UNAVAILABLE; the writer's other errors as it returns
// them.
absl::StatusOr<ExportResult> ExportTrace(const ExportRequest& request);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_EXPORT_H_
