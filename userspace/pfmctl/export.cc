#include "userspace/pfmctl/export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "libpfm-bts/perf_data.h"
#include "pfm/trace_file.h"
#include "userspace/pfmctl/report.h"
#include "userspace/pfmctl/timeline.h"

namespace pfm {
namespace {

namespace json = boost::json;

// A format writes from the trace file itself (never the whole trace in
// memory): sets *records, *cut to the reader's cut reason when the trace
// had no trailer (left alone otherwise), and adds to *warnings what the
// user should hear of.
using ExportFn = absl::StatusOr<json::object> (*)(const ExportRequest& request,
                                                  uint64_t* records,
                                                  std::optional<std::string>* cut,
                                                  std::vector<std::string>* warnings);

struct ExportFormat {
  const char* name;
  ExportFn write;
};

// perf.data, symbolized with every process's mappings as the trace's MAPS
// blocks give them over time (children, execs), as `report` names records.
// Streams the file: WritePerfData reads the records twice and puts them in
// time order in bounded memory (docs/export.md).
absl::StatusOr<json::object> ExportPerf(const ExportRequest& request, uint64_t* records,
                                        std::optional<std::string>* cut,
                                        std::vector<std::string>* warnings) {
  // The header, MAPS blocks and trailer, the records skipped.
  TraceReader::Options skip;
  skip.skip_records = true;
  absl::StatusOr<Trace> meta = ReadTrace(request.trace_path, skip);
  if (!meta.ok()) return meta.status();
  PerfDataOptions options;
  options.maps = SymbolMaps(meta->maps);
  for (const ProcessMaps& pm : meta->maps) options.all_maps.push_back(&pm);
  options.cmdline = request.cmdline;
  // Each pass hands out the records the first reading counted (a file still
  // being written may have more by now).
  const uint64_t n = meta->records_in_file;
  auto pass = [&](const PerfRecordVisitor& visit) {
    return ForFirstRecords(request.trace_path, n, visit);
  };
  absl::StatusOr<PerfDataSummary> s =
      WritePerfData(meta->header, meta->trailer, pass, options, request.out_path);
  if (!s.ok()) return s.status();
  *records = n;
  if (!meta->complete) *cut = meta->cut_reason;
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
                      {"skipped", std::move(skipped)},
                      {"peak_held_records", s->peak_held},
                      {"sort_runs", s->sort_runs}};
  // Processes whose mapping lists were cut (their higher mappings have no
  // MMAP event), and binaries changed since the recording (recorded
  // build-id != the file's).
  std::vector<std::string> said = CutMapsWarnings(meta->maps);
  said.insert(said.end(), s->warnings.begin(), s->warnings.end());
  if (!said.empty()) {
    json::array lines;
    for (const std::string& w : said) lines.push_back(json::value(w));
    detail["warnings"] = std::move(lines);
  }
  warnings->insert(warnings->end(), said.begin(), said.end());
  return detail;
}

// Writes `text` to `path` (created or truncated, mode 0644), with the
// errors perf's writer gives: INVALID_ARGUMENT "cannot write PATH: <why>"
// when it cannot be created (a directory, no such directory), UNAVAILABLE
// when it cannot be written (a disk full: a partial file is left).
absl::Status WriteOutput(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  size_t done = 0;
  int error = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      error = w < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(w);
  }
  if (::close(fd) != 0 && error == 0 && errno != EINTR) error = errno;
  if (error != 0)
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", strerror(error)));
  return absl::OkStatus();
}

// The Trace Event Format, for Perfetto and chrome://tracing
// (userspace/pfmctl/timeline.h, docs/timeline.md).
// Streams the file (BuildTimelineFromFile): the branches are counted per
// bucket, never held.
absl::StatusOr<json::object> ExportChromeJson(const ExportRequest& request,
                                              uint64_t* records,
                                              std::optional<std::string>* cut,
                                              std::vector<std::string>* /*warnings*/) {
  absl::StatusOr<Timeline> built = BuildTimelineFromFile(request.trace_path);
  if (!built.ok()) return built.status();
  const Timeline& t = *built;
  *records = t.records;
  if (!t.complete) *cut = t.cut_reason;
  if (absl::Status s = WriteOutput(request.out_path, ChromeTraceJson(t)); !s.ok()) return s;
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
    {"perf", ExportPerf},
    {"chrome-json", ExportChromeJson},
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
  absl::StatusOr<json::object> detail =
      format.write(request, &result.records, &cut, &result.warnings);
  if (!detail.ok()) return detail.status();
  result.detail = std::move(*detail);
  if (cut)
    return absl::DataLossError(absl::StrCat(request.trace_path, ": trace cut short: ", *cut,
                                            "; exported ", result.records,
                                            " records to ", request.out_path));
  return result;
}

}  // namespace pfm
