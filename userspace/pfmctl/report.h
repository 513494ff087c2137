// `pfmctl report` and `pfmctl script`: what a trace file shows, read as a
// stream (TraceReader), so memory stays bounded however long the trace is.
//
// The report keeps aggregates only: records by type, loss, branches per
// source address (symbolized once per address at the end, then summed by
// function and its library), the trailer's counters, and the newest
// `limit` records and branches. A caller that wants every record (`report
// --records`, `script`) is handed each one, symbolized, as it is read; the
// report does not keep them.
//
// Names: a trace's MAPS blocks are read first by a pass that seeks over the
// records (the blocks usually come at the end, with the session summary).
// A record is symbolized with the maps in effect at its time in its
// process: of the MAPS blocks with mappings of the record's pid, the last
// whose time_ns is at or before the record's time (a program before its
// exec, a child after its fork), else that pid's first. A record whose pid
// has no block of its own (a file from before blocks were taken per
// process) gets the first block of any pid taken at or after its time,
// else the last. A block without mappings (a target that had not reported
// them yet) hides nothing. With one MAPS block, as most files have, that
// is the one block. TraceSymbols::MapsAt has the details.
//
// A trace file is input too (it may be cut short, or written by another
// version): its header and trailer are read without accessors that throw,
// and what does not have the expected shape is left out (a counter) rather
// than failing the report, as TraceReader keeps what was readable of a
// damaged file.
#ifndef PFM_USERSPACE_PFMCTL_REPORT_H_
#define PFM_USERSPACE_PFMCTL_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernel/uapi/pfm_uapi.h"
#include "kernel/uapi/proc_maps.h"
#include "pfm/symbolizer.h"
#include "pfm/trace_file.h"

namespace pfm {

// Symbols of a trace's addresses, cached per address: a hot loop has few
// distinct addresses, so each is looked up in the ELF files once. The maps
// blocks share their files (SymbolFiles): a file mapped in every block (a
// trace of 300 processes, each with libc) is read and held open once, not
// once per block. Not thread-safe.
// One warning per process whose list in `maps` is cut (ProcessMaps::cut,
// the first such list of the pid): how many of its mappings were kept, up
// to which address.
std::vector<std::string> CutMapsWarnings(const std::vector<ProcessMaps>& maps);

class TraceSymbols {
 public:
  // At most this many (block, address) names are cached, all blocks
  // together; a miss when full empties the cache first (memory stays
  // bounded on a trace of random addresses, however many blocks it has).
  static constexpr size_t kMaxCached = 1 << 16;

  struct Symbol {
    std::string name;  // Symbolizer::Symbolize: "fn+0x1c", "[path+0xoff]", "" unmapped
    std::string dso;   // Symbolizer::ModuleOf: "libc.so.6", "[kernel]", ""
  };

  // The trace's MAPS blocks, in file order.
  explicit TraceSymbols(const std::vector<ProcessMaps>& maps);
  ~TraceSymbols();
  TraceSymbols(const TraceSymbols&) = delete;
  TraceSymbols& operator=(const TraceSymbols&) = delete;

  // Which maps block names a record of process `pid` at `time`: of that
  // pid's blocks, the last taken at or before `time` (the maps in effect:
  // a program before its exec, a child after its fork; of blocks taken at
  // the same time, the later in the file), else its first; for a pid
  // without blocks (pid 0, or a file from before pids were recorded per
  // process), the first block of any pid taken at or after `time`, else
  // the last. The blocks are indexed per pid by time: O(log blocks) per
  // call. An index for Lookup, or -1 when the trace has no mappings at all.
  int MapsAt(uint64_t time, uint32_t pid = 0) const;
  // `addr` in maps block `maps` (MapsAt's answer; -1 gives an empty
  // Symbol). The reference is valid until the next Lookup.
  const Symbol& Lookup(int maps, uint64_t addr);
  // For an address no symbol names, in maps block `maps`: the function
  // .eh_frame says holds it ("func@0x2f0a0", Symbolizer::UnnamedFunction),
  // or "". Not cached (report asks once per distinct address).
  std::string UnnamedFunction(int maps, uint64_t addr);
  // Both at once.
  const Symbol& At(uint64_t time, uint64_t addr, uint32_t pid = 0) {
    return Lookup(MapsAt(time, pid), addr);
  }
  // The maps blocks with mappings: MapsAt answers below this.
  size_t spaces() const { return spaces_.size(); }
  // The processes whose mapping lists were cut (ProcessMaps::cut), then
  // the symbolizers' warnings so far (a file whose build-id is not the
  // recorded one: its addresses stay unnamed), each once, in the order
  // they came.
  std::vector<std::string> warnings() const;

 private:
  std::shared_ptr<SymbolFiles> files_;               // shared by the blocks
  std::vector<std::string> cut_warnings_;            // one per process with a cut list
  std::vector<std::unique_ptr<Symbolizer>> spaces_;  // the blocks with mappings
  std::vector<uint64_t> times_;                      // their time_ns, in file order
  // Block indices by (time, file order): all of them, and per pid.
  std::vector<int> by_time_;
  absl::flat_hash_map<uint32_t, std::vector<int>> by_pid_;
  absl::flat_hash_map<std::pair<int, uint64_t>, Symbol> cache_;
  Symbol none_;
};

// A record as the report shows it, with its addresses symbolized
// ("function+0xoff", "" when unmapped).
struct ReportRecord {
  pfm_record record;
  std::string from_sym, to_sym;  // branches and gaps
  std::string ip_sym;            // PEBS samples
};

ReportRecord Symbolized(const pfm_record& r, TraceSymbols& symbols);

struct ReportFunction {
  std::string function;  // or the hex address when no symbol covers it
  std::string dso;       // the library or executable ("libc.so.6"), "" unmapped
  uint64_t branches = 0;
  double percent = 0;    // of all branches
};

struct ReportOptions {
  // The newest records and branches kept (last_records, last_branches).
  size_t limit = 20;
  // When set, called with every record in file order, symbolized
  // (`report --records`, `script`); the report keeps none of them. An
  // error stops the reading and is BuildReport's (e.g. the output closed).
  std::function<absl::Status(const ReportRecord&)> each_record;
};

struct TraceReport {
  std::string file;
  boost::json::object header;
  boost::json::object trailer;
  bool complete = false;   // a TRAILER was found
  std::string cut_reason;  // TraceReader::cut_reason when !complete
  // The maps `--json` shows: the last MAPS block with mappings (SymbolMaps).
  std::optional<ProcessMaps> maps;
  uint64_t records = 0;
  std::map<std::string, uint64_t> by_type;  // records per type name
  // Records a full lossless ring could not keep: the larger of the LOST
  // records' sum and the trailer's "lost". The ring counts every loss in
  // its header (what the trailer's "lost" holds: the ring's total) but
  // writes a LOST record {count} only before the next record it stores
  // (kernel/ds/ring.h), so the LOST records are parts of that total, and a
  // loss after the last stored record (the end of a session) is in the
  // trailer alone. Not the sum of both: the marked losses would count
  // twice. A trace without a trailer (cut short) has the records' sum.
  uint64_t lost = 0;
  uint64_t lost_in_records = 0;  // the LOST records' counts, summed
  // A history ring's records overwritten by newer ones before they were
  // read (the trailer's "overwritten", 0 without one): the ring keeps the
  // newest by design, so they are not in `lost`.
  uint64_t overwritten = 0;
  uint64_t branches = 0;
  // Branches by source function and its library, most first (ties: the
  // greater name first, then the greater library: one order every run). Distinct source addresses are counted up to
  // kMaxHotAddresses; branches from addresses beyond that are in
  // `hot_uncounted`, not in any function.
  std::vector<ReportFunction> hot;
  uint64_t hot_uncounted = 0;
  // The trailer's "counters" as written (an array from pfmctl), [] when it
  // has none.
  boost::json::value counters;
  // The newest `limit` records of any type and the newest `limit`
  // branches, oldest first.
  std::vector<ReportRecord> last_records;
  std::vector<ReportRecord> last_branches;
  // TraceSymbols::warnings once every name was looked up: files replaced
  // since the recording, whose addresses are left unnamed.
  std::vector<std::string> warnings;
};

// Distinct branch source addresses the hot-function count tracks (about
// 17 MiB at most).
inline constexpr size_t kMaxHotAddresses = 1 << 19;

// The mappings a report shows in --json: those of the last MAPS block that
// has any; none without.
const ProcessMaps* SymbolMaps(const std::vector<ProcessMaps>& maps);
const ProcessMaps* SymbolMaps(const Trace& trace);

// The MAPS blocks of `file`, by a pass that skips the records
// (TraceReader's errors; a cut file gives the blocks before the cut).
absl::StatusOr<std::vector<ProcessMaps>> ReadTraceMaps(const std::string& file);

// Streams `file` (TraceReader's errors) into its report.
absl::StatusOr<TraceReport> BuildReport(const std::string& file,
                                        const ReportOptions& options);

// A counter's unit by its event name: "ns" for the clocks (task-clock,
// cpu-clock), "hits" for a breakpoint, else "events".
std::string CounterUnit(const std::string& event);

void RenderReportText(const TraceReport& report, std::ostream& out);
// The summary: {"complete", "cut_reason", "header", "trailer", "maps" (the
// SymbolMaps mappings, addresses as hex strings, or null), "summary":
// {"records", "by_type", "lost", "lost_in_records", "overwritten",
// "branches", "hot_uncounted"}, "hot_functions": [{"function",
// "dso", "branches", "percent"}], "counters" (as written, each object with a
// "unit" added), "last_branches" and "records" (the newest `limit`
// records), "warnings" (strings: files whose build-id changed since the
// recording)}. `report --json --records` streams every record as "records"
// instead, and leaves this object's "records" out (RecordJson).
boost::json::object RenderReportJson(const TraceReport& report);
// One record as the JSON forms show it: RecordToJson plus the symbols.
boost::json::object RecordJson(const ReportRecord& record);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_REPORT_H_
