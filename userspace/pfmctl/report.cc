#include "userspace/pfmctl/report.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
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

// A map entry's address: a hex string (as pfmd writes them) or a number.
std::optional<uint64_t> MapAddress(const json::object& o, const char* k) {
  const json::value* v = o.if_contains(k);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return std::strtoull(std::string(v->get_string()).c_str(), nullptr, 16);
  if (v->is_uint64()) return v->get_uint64();
  if (v->is_int64() && v->get_int64() >= 0) return static_cast<uint64_t>(v->get_int64());
  return std::nullopt;
}

// Symbolizes each address once: the hot-function count looks up every
// branch, and loops repeat the same few addresses.
class CachedSymbols {
 public:
  explicit CachedSymbols(std::vector<MapEntry> maps) : sym_(std::move(maps)) {}
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

std::vector<MapEntry> MapsFromTraceJson(const json::object& o) {
  std::vector<MapEntry> maps;
  const json::value* m = o.if_contains("maps");
  if (m == nullptr || !m->is_array()) return maps;
  for (const json::value& e : m->get_array()) {
    if (!e.is_object()) continue;
    const json::object& eo = e.get_object();
    std::optional<uint64_t> start = MapAddress(eo, "start");
    std::optional<uint64_t> end = MapAddress(eo, "end");
    std::optional<uint64_t> offset = MapAddress(eo, "offset");
    const json::value* path = eo.if_contains("path");
    if (!start || !end || !offset || path == nullptr || !path->is_string()) continue;
    MapEntry me;
    me.start = *start;
    me.end = *end;
    me.offset = *offset;
    me.path = std::string(path->get_string());
    if (me.end > me.start && !me.path.empty()) maps.push_back(std::move(me));
  }
  return maps;
}

absl::StatusOr<TraceReport> BuildReport(const std::string& file, size_t limit) {
  absl::StatusOr<Trace> t = ReadTrace(file);
  if (!t.ok()) return t.status();
  TraceReport rep;
  rep.file = file;
  rep.trace = std::move(*t);
  const std::vector<pfm_record>& records = rep.trace.records;
  std::vector<MapEntry> maps = MapsFromTraceJson(rep.trace.trailer);
  if (maps.empty()) maps = MapsFromTraceJson(rep.trace.header);
  CachedSymbols sym(std::move(maps));

  std::vector<const pfm_record*> branches;
  for (const pfm_record& r : records) {
    ++rep.by_type[RecordTypeName(r.type)];
    if (r.type == PFM_REC_LOST) rep.lost += r.u.lost.count;
    if (r.type == PFM_REC_BRANCH) branches.push_back(&r);
  }
  std::map<std::string, uint64_t> hot;
  for (const pfm_record* b : branches) {
    const std::string& s = sym.Symbolize(b->u.branch.from);
    const size_t plus = s.rfind('+');
    const std::string fn = plus == std::string::npos ? s : s.substr(0, plus);
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
  if (!t.complete) out << "warning: trace cut short (" << t.cut_reason << ")\n";
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
  return json::object{{"complete", t.complete},
                      {"cut_reason", t.cut_reason},
                      {"header", t.header},
                      {"trailer", t.trailer},
                      {"summary", json::object{{"records", t.records.size()},
                                               {"by_type", std::move(types)},
                                               {"lost", rep.lost}}},
                      {"hot_functions", std::move(hot)},
                      {"counters", rep.counters},
                      {"records", std::move(recs)}};
}

}  // namespace pfm
