#include "userspace/pfmctl/report.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_format.h"
#include "pfm/record_json.h"
#include "userspace/pfmctl/reply.h"

namespace pfm {
namespace {

namespace json = boost::json;

// Functions listed in the JSON and in the text form.
constexpr size_t kHotJson = 20;
constexpr size_t kHotText = 15;

// Symbolizes each address once: the hot-function count looks up every
// branch, and loops repeat the same few addresses.
class CachedSymbols {
 public:
  explicit CachedSymbols(std::vector<Mapping> maps) : sym_(std::move(maps)) {}
  const std::string& Symbolize(uint64_t addr) {
    auto it = cache_.find(addr);
    if (it == cache_.end()) it = cache_.emplace(addr, sym_.Symbolize(addr)).first;
    return it->second;
  }

 private:
  Symbolizer sym_;
  std::unordered_map<uint64_t, std::string> cache_;
};

ReportRecord Symbolized(const pfm_record& r, CachedSymbols& sym) {
  ReportRecord out{r, "", "", ""};
  if (r.type == PFM_REC_BRANCH) {
    out.from_sym = sym.Symbolize(r.u.branch.from);
    out.to_sym = sym.Symbolize(r.u.branch.to);
  } else if (r.type == PFM_REC_PEBS) {
    out.ip_sym = sym.Symbolize(r.u.pebs.ip);
  }
  return out;
}

// "87.5%"; "not counted" when absent or null; a non-number as it is.
std::string RatioText(const json::value* v) {
  if (v == nullptr || v->is_null()) return "not counted";
  if (!v->is_number()) return JsonText(v);
  const double ratio = v->is_double()  ? v->get_double()
                       : v->is_int64() ? static_cast<double>(v->get_int64())
                                       : static_cast<double>(v->get_uint64());
  return absl::StrFormat("%.1f%%", 100.0 * ratio);
}

}  // namespace

const ProcessMaps* SymbolMaps(const Trace& trace) {
  for (auto it = trace.maps.rbegin(); it != trace.maps.rend(); ++it)
    if (!it->mappings.empty()) return &*it;
  return nullptr;
}

absl::StatusOr<TraceReport> BuildReport(const std::string& file, size_t limit) {
  absl::StatusOr<Trace> t = ReadTrace(file);
  if (!t.ok()) return t.status();
  TraceReport rep;
  rep.file = file;
  rep.trace = std::move(*t);
  const std::vector<pfm_record>& records = rep.trace.records;
  const ProcessMaps* maps = SymbolMaps(rep.trace);
  CachedSymbols sym(maps != nullptr ? maps->mappings : std::vector<Mapping>{});

  std::vector<const pfm_record*> branches;
  for (const pfm_record& r : records) {
    ++rep.by_type[RecordTypeName(r.type)];
    if (r.type == PFM_REC_LOST) rep.lost += r.u.lost.count;
    if (r.type == PFM_REC_BRANCH) branches.push_back(&r);
  }
  std::map<std::string, uint64_t> hot;
  for (const pfm_record* b : branches) {
    const std::string& s = sym.Symbolize(b->u.branch.from);
    // "fn+0x1c" counts for fn; "[/usr/bin/ls+0x7f0]" (no symbol) for
    // "[/usr/bin/ls]".
    const size_t plus = s.rfind('+');
    std::string fn = plus == std::string::npos ? s : s.substr(0, plus);
    if (plus != std::string::npos && !s.empty() && s.front() == '[' && s.back() == ']')
      fn += ']';
    ++hot[fn.empty() ? Hex(b->u.branch.from) : fn];
  }
  std::vector<std::pair<uint64_t, std::string>> hot_sorted;
  for (const auto& [fn, n] : hot) hot_sorted.emplace_back(n, fn);
  std::sort(hot_sorted.rbegin(), hot_sorted.rend());
  for (auto& [n, fn] : hot_sorted) rep.hot.push_back({std::move(fn), n});

  const json::value* counters = rep.trace.trailer.if_contains("counters");
  rep.counters = counters != nullptr ? *counters : json::array{};

  for (size_t i = records.size() - std::min(limit, records.size()); i < records.size(); ++i)
    rep.last_records.push_back(Symbolized(records[i], sym));
  for (size_t i = branches.size() - std::min(limit, branches.size()); i < branches.size();
       ++i)
    rep.last_branches.push_back(Symbolized(*branches[i], sym));
  return rep;
}

void RenderReportText(const TraceReport& rep, std::ostream& out) {
  const Trace& t = rep.trace;
  out << rep.file << ": " << t.records.size() << " records";
  for (const auto& [k, v] : rep.by_type) out << ", " << v << " " << k;
  out << "\n";
  if (!t.complete) out << "warning: trace cut short: " << t.cut_reason << "\n";
  if (const json::value* c = t.header.if_contains("command"))
    out << "command: " << JsonText(c) << "\n";
  if (const json::value* s = t.trailer.if_contains("exit"))
    out << "exit: " << JsonText(s) << "\n";
  if (const json::value* s = t.trailer.if_contains("steps"))
    out << "soft-BTS steps: " << JsonText(s) << "\n";
  if (rep.lost) out << "lost: " << rep.lost << " records\n";
  if (!rep.hot.empty()) {
    out << "\nbranches by source function:\n";
    for (size_t i = 0; i < rep.hot.size() && i < kHotText; ++i)
      out << absl::StrFormat("  %10u  %s\n", rep.hot[i].branches, rep.hot[i].function);
  }
  if (rep.counters.is_array() && !rep.counters.get_array().empty()) {
    out << "\ncounters:\n";
    for (const json::value& cv : rep.counters.get_array()) {
      if (!cv.is_object()) continue;
      const json::object& co = cv.get_object();
      out << absl::StrFormat("  %-24s %16s  running %s\n",
                             JsonText(co.if_contains("event")),
                             JsonText(co.if_contains("value")),
                             RatioText(co.if_contains("ratio")));
    }
  }
  if (!rep.last_branches.empty()) {
    out << "\nlast " << rep.last_branches.size() << " branches:\n";
    for (const ReportRecord& b : rep.last_branches) {
      const pfm_record& r = b.record;
      out << absl::StrFormat("  %-18s %-40s -> %-18s %s\n", Hex(r.u.branch.from),
                             b.from_sym, Hex(r.u.branch.to), b.to_sym);
    }
  }
}

json::object RenderReportJson(const TraceReport& rep) {
  json::array recs;
  for (const ReportRecord& rr : rep.last_records) {
    json::object o = RecordToJson(rr.record);
    if (rr.record.type == PFM_REC_BRANCH) {
      o["from_sym"] = rr.from_sym;
      o["to_sym"] = rr.to_sym;
    } else if (rr.record.type == PFM_REC_PEBS) {
      o["ip_sym"] = rr.ip_sym;
    }
    recs.push_back(std::move(o));
  }
  json::object types;
  for (const auto& [k, v] : rep.by_type) types[k] = v;
  json::array hot;
  for (size_t i = 0; i < rep.hot.size() && i < kHotJson; ++i)
    hot.push_back(json::object{{"function", rep.hot[i].function},
                               {"branches", rep.hot[i].branches}});
  const Trace& t = rep.trace;
  // The mappings the report symbolized with (they were in the trailer's
  // JSON before trace version 2), addresses as hex like the records'.
  json::value maps = nullptr;
  if (const ProcessMaps* m = SymbolMaps(t)) {
    json::array mappings;
    for (const Mapping& e : m->mappings)
      mappings.push_back(json::object{{"start", Hex(e.start)},
                                      {"end", Hex(e.end)},
                                      {"offset", Hex(e.offset)},
                                      {"path", e.path},
                                      {"writable", e.writable},
                                      {"shared", e.shared}});
    maps = json::object{
        {"pid", m->pid}, {"time_ns", m->time_ns}, {"mappings", std::move(mappings)}};
  }
  return json::object{{"complete", t.complete},
                      {"cut_reason", t.cut_reason},
                      {"header", t.header},
                      {"trailer", t.trailer},
                      {"maps", std::move(maps)},
                      {"summary", json::object{{"records", t.records.size()},
                                               {"by_type", std::move(types)},
                                               {"lost", rep.lost}}},
                      {"hot_functions", std::move(hot)},
                      {"counters", rep.counters},
                      {"records", std::move(recs)}};
}

}  // namespace pfm
