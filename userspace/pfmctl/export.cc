#include "userspace/pfmctl/export.h"

#include <sys/stat.h>

#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "libpfm-bts/perf_data.h"
#include "pfm/trace_file.h"
#include "userspace/pfmctl/report.h"
#include "userspace/pfmctl/timeline.h"

namespace pfm {
namespace {

namespace json = boost::json;

// A format written from the whole trace in memory.
using ExportFn = absl::StatusOr<json::object> (*)(const Trace& trace,
                                                  const ExportRequest& request);
// A format that streams the trace file itself: sets *records, and *cut to
// Trace::cut_reason when the trace had no trailer (left alone otherwise).
using StreamExportFn = absl::StatusOr<json::object> (*)(const ExportRequest& request,
                                                        uint64_t* records,
                                                        std::optional<std::string>* cut);

struct ExportFormat {
  const char* name;
  ExportFn write;           // one of these
  StreamExportFn stream;
};

// perf.data, symbolized with every process's mappings as the trace's MAPS
// blocks give them over time (children, execs), as `report` names records.
absl::StatusOr<json::object> ExportPerf(const Trace& trace, const ExportRequest& request) {
  PerfDataOptions options;
  options.maps = SymbolMaps(trace);
  for (const ProcessMaps& pm : trace.maps) options.all_maps.push_back(&pm);
  options.cmdline = request.cmdline;
  absl::StatusOr<PerfDataSummary> s = WritePerfData(trace, options, request.out_path);
  if (!s.ok()) return s.status();
  json::object skipped;
  for (const auto& [type, count] : s->skipped) skipped[type] = count;
  json::array events;
  for (const std::string& e : s->events) events.push_back(json::value(e));
  json::object detail{{"events", std::move(events)},
                      {"samples", s->samples},
                      {"side_records", s->side_records},
                      {"counter_reads", s->reads},
                      {"data_bytes", s->data_bytes},
                      {"build_ids", s->build_ids},
                      {"skipped", std::move(skipped)}};
  // Binaries changed since the recording (recorded build-id != the file's).
  if (!s->warnings.empty()) {
    json::array warnings;
    for (const std::string& w : s->warnings) warnings.push_back(json::value(w));
    detail["warnings"] = std::move(warnings);
  }
  return detail;
}

// The Trace Event Format, for Perfetto and chrome://tracing
// (userspace/pfmctl/timeline.h, docs/timeline.md).
// Streams the file (BuildTimelineFromFile): the branches are counted per
// bucket, never held.
absl::StatusOr<json::object> ExportChromeJson(const ExportRequest& request,
                                              uint64_t* records,
                                              std::optional<std::string>* cut) {
  absl::StatusOr<Timeline> built = BuildTimelineFromFile(request.trace_path);
  if (!built.ok()) return built.status();
  const Timeline& t = *built;
  *records = t.records;
  if (!t.complete) *cut = t.cut_reason;
  std::ofstream out(request.out_path, std::ios::binary | std::ios::trunc);
  out << ChromeTraceJson(t);
  out.close();
  if (!out)
    return absl::UnavailableError(absl::StrCat(request.out_path, ": cannot write"));
  uint64_t slices = 0;
  for (const ThreadTrack& th : t.threads) slices += th.runs.size();
  uint64_t on = 0;
  for (const RequestTrack& r : t.requests) on += r.on.size();
  return json::object{{"threads", t.threads.size()},
                      {"running_slices", slices},
                      {"requests", t.requests.size()},
                      {"on_hardware_slices", on}};
}

// The one table of formats.
constexpr ExportFormat kExportFormats[] = {
    {"perf", ExportPerf, nullptr},
    {"chrome-json", nullptr, ExportChromeJson},
};

const ExportFormat* FindFormat(const std::string& name) {
  for (const ExportFormat& f : kExportFormats)
    if (name == f.name) return &f;
  return nullptr;
}

}  // namespace

std::string ExportFormatList(const char* separator) {
  std::string list;
  for (const ExportFormat& f : kExportFormats)
    absl::StrAppend(&list, list.empty() ? "" : separator, f.name);
  return list;
}

absl::Status CheckExportFormat(const std::string& format) {
  if (FindFormat(format) != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("unknown export format '", format,
                                                 "' (formats: ", ExportFormatList(), ")"));
}

absl::StatusOr<ExportResult> ExportTrace(const ExportRequest& request) {
  if (absl::Status s = CheckExportFormat(request.format); !s.ok()) return s;
  const ExportFormat& format = *FindFormat(request.format);
  // Opened first, so that a file that is no trace is refused as such.
  if (absl::Status s = TraceReader::Open(request.trace_path).status(); !s.ok()) return s;
  // Writing would truncate the trace it was read from.
  struct stat in {}, out {};
  if (::stat(request.trace_path.c_str(), &in) == 0 &&
      ::stat(request.out_path.c_str(), &out) == 0 && in.st_dev == out.st_dev &&
      in.st_ino == out.st_ino)
    return absl::InvalidArgumentError(absl::StrCat(
        "export: the output ", request.out_path, " is the trace itself"));
  ExportResult result;
  std::optional<std::string> cut;
  if (format.stream != nullptr) {
    absl::StatusOr<json::object> detail = format.stream(request, &result.records, &cut);
    if (!detail.ok()) return detail.status();
    result.detail = std::move(*detail);
  } else {
    absl::StatusOr<Trace> trace = ReadTrace(request.trace_path);
    if (!trace.ok()) return trace.status();
    absl::StatusOr<json::object> detail = format.write(*trace, request);
    if (!detail.ok()) return detail.status();
    result.records = trace->records.size();
    result.detail = std::move(*detail);
    if (!trace->complete) cut = trace->cut_reason;
  }
  if (cut)
    return absl::DataLossError(absl::StrCat(request.trace_path, ": trace cut short: ", *cut,
                                            "; exported ", result.records,
                                            " records to ", request.out_path));
  return result;
}

}  // namespace pfm
