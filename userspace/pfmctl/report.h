// `pfmctl report`: a model of what a trace file shows, built once from the
// file, and its two renderings (text and --json).
//
// A trace file is input too (it may be cut short, or written by another
// version): its header and trailer are read without accessors that throw,
// and what does not have the expected shape is left out (a counter) rather
// than failing the report, as ReadTrace keeps what was readable of a
// damaged file. The mappings come from the file's binary MAPS blocks, which
// ReadTrace checked.
#ifndef PFM_USERSPACE_PFMCTL_REPORT_H_
#define PFM_USERSPACE_PFMCTL_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/statusor.h"
#include "kernel/uapi/pfm_uapi.h"
#include "pfm/symbolizer.h"
#include "pfm/trace_file.h"

namespace pfm {

// A record as the report shows it, with its addresses symbolized
// ("function+0xoff", "" when unmapped).
struct ReportRecord {
  pfm_record record;
  std::string from_sym, to_sym;  // branches
  std::string ip_sym;            // PEBS samples
};

struct ReportFunction {
  std::string function;  // or the hex address when no symbol covers it
  uint64_t branches = 0;
};

struct TraceReport {
  std::string file;
  Trace trace;  // header, records, maps, trailer, complete, cut_reason
  std::map<std::string, uint64_t> by_type;  // records per type name
  uint64_t lost = 0;                         // sum of the LOST records' counts
  // Branches by source function, most first (ties: greater name first).
  std::vector<ReportFunction> hot;
  // The trailer's "counters" as written (an array from pfmctl), [] when it
  // has none.
  boost::json::value counters;
  // The newest `limit` records of any type (--json) and the newest `limit`
  // branches (text), oldest first.
  std::vector<ReportRecord> last_records;
  std::vector<ReportRecord> last_branches;
};

// The mappings a report symbolizes with: those of the trace's last MAPS
// block that has any (an empty list, as a target that had not reported its
// mappings yet leaves, does not hide an earlier one); none without.
const ProcessMaps* SymbolMaps(const Trace& trace);

// Reads `file` (ReadTrace's errors) and builds its report, symbolizing with
// SymbolMaps(trace).
absl::StatusOr<TraceReport> BuildReport(const std::string& file, size_t limit);

void RenderReportText(const TraceReport& report, std::ostream& out);
// With "maps": SymbolMaps' mappings (addresses as hex strings), or null.
boost::json::object RenderReportJson(const TraceReport& report);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_REPORT_H_
