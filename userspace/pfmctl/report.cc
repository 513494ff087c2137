#include "userspace/pfmctl/report.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pfm/record_json.h"
#include "userspace/pfmctl/reply.h"

namespace pfm {

namespace json = boost::json;

namespace {

// Functions listed in the JSON and in the text form.
constexpr size_t kHotJson = 20;
constexpr size_t kHotText = 15;
// Record types counted in an array (the known ones and some room); others
// in a map.
constexpr size_t kTypeSlots = 32;

// "87.5%"; "not counted" when absent or null; a non-number as it is.
std::string RatioText(const json::value* v) {
  if (v == nullptr || v->is_null()) return "not counted";
  if (!v->is_number()) return JsonText(v);
  const double ratio = v->is_double()  ? v->get_double()
                       : v->is_int64() ? static_cast<double>(v->get_int64())
                                       : static_cast<double>(v->get_uint64());
  return absl::StrFormat("%.1f%%", 100.0 * ratio);
}

// The function of a symbol: "fn+0x1c" -> "fn"; "[/usr/bin/ls+0x7f0]" (no
// symbol covers it) -> "[/usr/bin/ls]". Only a trailing "+0x<hex>" is an
// offset: C++ names may hold a '+' of their own ("operator+(...)").
std::string FunctionOf(const std::string& s) {
  const bool bracketed = s.size() >= 2 && s.front() == '[' && s.back() == ']';
  const size_t end = bracketed ? s.size() - 1 : s.size();
  const size_t plus = s.rfind("+0x", end);
  if (plus == std::string::npos || plus + 3 >= end) return s;
  for (size_t i = plus + 3; i < end; ++i)
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(s[i]))) return s;
  return bracketed ? s.substr(0, plus) + "]" : s.substr(0, plus);
}

// The newest `limit` records, in a ring that grows only as records come
// (a large --limit costs nothing on a short trace).
class LastRecords {
 public:
  explicit LastRecords(size_t limit) : limit_(limit) {}
  void Push(const pfm_record& r) {
    if (limit_ == 0) return;
    if (buf_.size() < limit_) {
      buf_.push_back(r);
      return;
    }
    buf_[next_] = r;
    if (++next_ == limit_) next_ = 0;
  }
  // Oldest first.
  std::vector<pfm_record> InOrder() const {
    std::vector<pfm_record> out(buf_.begin() + static_cast<ptrdiff_t>(next_), buf_.end());
    out.insert(out.end(), buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(next_));
    return out;
  }

 private:
  size_t limit_;
  size_t next_ = 0;
  std::vector<pfm_record> buf_;
};

}  // namespace

std::vector<std::string> CutMapsWarnings(const std::vector<ProcessMaps>& maps) {
  std::vector<std::string> out;
  std::set<int32_t> said;
  for (const ProcessMaps& m : maps)
    if (m.cut && !m.mappings.empty() && said.insert(m.pid).second)
      out.push_back(absl::StrCat(
          "pid ", m.pid, " had more executable mappings than a mapping list carries: only its ",
          m.mappings.size(), " lowest (up to 0x", absl::Hex(m.mappings.back().end),
          ") were recorded, addresses above are not named"));
  return out;
}

TraceSymbols::TraceSymbols(const std::vector<ProcessMaps>& maps)
    : files_(std::make_shared<SymbolFiles>()) {
  cut_warnings_ = CutMapsWarnings(maps);
  for (const ProcessMaps& m : maps) {
    if (m.mappings.empty()) continue;
    const int index = static_cast<int>(spaces_.size());
    spaces_.push_back(std::make_unique<Symbolizer>(m.mappings, files_));
    times_.push_back(m.time_ns);
    by_time_.push_back(index);
    by_pid_[static_cast<uint32_t>(m.pid)].push_back(index);
  }
  auto earlier = [this](int a, int b) {
    const size_t i = static_cast<size_t>(a), j = static_cast<size_t>(b);
    return times_[i] != times_[j] ? times_[i] < times_[j] : a < b;
  };
  std::sort(by_time_.begin(), by_time_.end(), earlier);
  for (auto& [pid, blocks] : by_pid_) std::sort(blocks.begin(), blocks.end(), earlier);
}

TraceSymbols::~TraceSymbols() = default;

std::vector<std::string> TraceSymbols::warnings() const {
  std::vector<std::string> out = cut_warnings_;
  for (const auto& s : spaces_)
    for (const std::string& w : s->warnings())
      if (std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
  return out;
}

int TraceSymbols::MapsAt(uint64_t time, uint32_t pid) const {
  if (spaces_.size() <= 1) return spaces_.empty() ? -1 : 0;
  auto time_of = [this](int i) { return times_[static_cast<size_t>(i)]; };
  if (pid != 0) {
    if (auto it = by_pid_.find(pid); it != by_pid_.end()) {
      const std::vector<int>& blocks = it->second;
      // The first taken after `time`: the one before it is the last at or
      // before.
      auto after = std::upper_bound(blocks.begin(), blocks.end(), time,
                                    [&](uint64_t t, int i) { return t < time_of(i); });
      return after == blocks.begin() ? blocks.front() : *std::prev(after);
    }
  }
  // The first block taken at or after `time`; after them all, the last.
  auto at = std::lower_bound(by_time_.begin(), by_time_.end(), time,
                             [&](int i, uint64_t t) { return time_of(i) < t; });
  return at != by_time_.end() ? *at : by_time_.back();
}

const TraceSymbols::Symbol& TraceSymbols::Lookup(int maps, uint64_t addr) {
  if (maps < 0 || static_cast<size_t>(maps) >= spaces_.size()) return none_;
  const std::pair<int, uint64_t> key(maps, addr);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  if (cache_.size() >= kMaxCached) cache_.clear();
  Symbolizer& s = *spaces_[static_cast<size_t>(maps)];
  Symbol sym{s.Symbolize(addr), s.ModuleOf(addr)};
  return cache_.emplace(key, std::move(sym)).first->second;
}

std::string TraceSymbols::UnnamedFunction(int maps, uint64_t addr) {
  if (maps < 0 || static_cast<size_t>(maps) >= spaces_.size()) return "";
  return spaces_[static_cast<size_t>(maps)]->UnnamedFunction(addr);
}

ReportRecord Symbolized(const pfm_record& r, TraceSymbols& symbols) {
  ReportRecord out{r, "", "", ""};
  // Each name is copied before the next Lookup (which may empty the cache).
  if (r.type == PFM_REC_BRANCH || r.type == PFM_REC_GAP) {  // gap: the same layout
    const int maps = symbols.MapsAt(r.time, r.pid);
    out.from_sym = symbols.Lookup(maps, r.u.branch.from).name;
    out.to_sym = symbols.Lookup(maps, r.u.branch.to).name;
  } else if (r.type == PFM_REC_PEBS) {
    out.ip_sym = symbols.At(r.time, r.u.pebs.ip, r.pid).name;
  }
  return out;
}

const ProcessMaps* SymbolMaps(const std::vector<ProcessMaps>& maps) {
  for (auto it = maps.rbegin(); it != maps.rend(); ++it)
    if (!it->mappings.empty()) return &*it;
  return nullptr;
}

const ProcessMaps* SymbolMaps(const Trace& trace) { return SymbolMaps(trace.maps); }

absl::StatusOr<std::vector<ProcessMaps>> ReadTraceMaps(const std::string& file) {
  TraceReader::Options o;
  o.skip_records = true;
  // Only the MAPS blocks: compact records are not decoded twice (the
  // report's own pass finds any damage).
  o.unchecked_compact = true;
  absl::StatusOr<Trace> t = ReadTrace(file, o);
  if (!t.ok()) return t.status();
  return std::move(t->maps);
}

namespace {

// A count in the trailer (input: read without throwing): a non-negative
// integer, else 0.
uint64_t TrailerCount(const json::object& trailer, const char* key) {
  const json::value* v = trailer.if_contains(key);
  if (v == nullptr) return 0;
  if (v->is_uint64()) return v->get_uint64();
  if (v->is_int64() && v->get_int64() >= 0) return static_cast<uint64_t>(v->get_int64());
  return 0;
}

}  // namespace

std::string CounterUnit(const std::string& event) {
  return event == "task-clock" || event == "cpu-clock" ? "ns" : "events";
}

absl::StatusOr<TraceReport> BuildReport(const std::string& file,
                                        const ReportOptions& options) {
  absl::StatusOr<std::vector<ProcessMaps>> maps = ReadTraceMaps(file);
  if (!maps.ok()) return maps.status();
  TraceSymbols symbols(*maps);
  maps->clear();
  absl::StatusOr<TraceReader> reader = TraceReader::Open(file);
  if (!reader.ok()) return reader.status();

  TraceReport rep;
  rep.file = file;
  rep.header = reader->header();
  std::array<uint64_t, kTypeSlots> types{};
  std::map<uint16_t, uint64_t> other_types;
  // Branches per source address, per maps block (index 0: no maps).
  std::vector<absl::flat_hash_map<uint64_t, uint64_t>> counts(symbols.spaces() + 1);
  size_t distinct = 0;
  LastRecords last(options.limit), last_branches(options.limit);

  for (bool more = true; more;) {
    absl::StatusOr<TraceReader::Event> e = reader->Next();
    if (!e.ok()) return e.status();
    switch (*e) {
      case TraceReader::Event::kRecords:
        for (const pfm_record& r : reader->records()) {
          if (r.type < kTypeSlots) {
            ++types[r.type];
          } else {
            ++other_types[r.type];
          }
          if (r.type == PFM_REC_LOST) rep.lost_in_records += r.u.lost.count;
          if (r.type == PFM_REC_BRANCH) {
            auto& by_addr = counts[static_cast<size_t>(symbols.MapsAt(r.time, r.pid) + 1)];
            auto it = by_addr.find(r.u.branch.from);
            if (it != by_addr.end()) {
              ++it->second;
            } else if (distinct < kMaxHotAddresses) {
              by_addr.emplace(r.u.branch.from, 1);
              ++distinct;
            } else {
              ++rep.hot_uncounted;
            }
            last_branches.Push(r);
          }
          last.Push(r);
          if (options.each_record)
            if (absl::Status s = options.each_record(Symbolized(r, symbols)); !s.ok()) return s;
        }
        rep.records += reader->records().size();
        break;
      case TraceReader::Event::kMaps:
        if (!reader->maps().mappings.empty()) rep.maps = reader->maps();
        break;
      case TraceReader::Event::kTrailer:
        rep.trailer = reader->trailer();
        rep.complete = true;
        break;
      case TraceReader::Event::kEnd:
        rep.cut_reason = reader->cut_reason();
        more = false;
        break;
    }
  }

  for (size_t t = 0; t < kTypeSlots; ++t)
    if (types[t] != 0) rep.by_type[RecordTypeName(static_cast<uint16_t>(t))] = types[t];
  for (const auto& [t, n] : other_types) rep.by_type[RecordTypeName(t)] = n;
  rep.branches = types[PFM_REC_BRANCH];
  // The trailer's count is the ring's total; the LOST records are parts of
  // it (report.h).
  rep.lost = std::max(rep.lost_in_records, TrailerCount(rep.trailer, "lost"));
  rep.overwritten = TrailerCount(rep.trailer, "overwritten");

  // Each distinct address symbolized once, summed by (function, library).
  std::map<std::pair<std::string, std::string>, uint64_t> functions;
  for (size_t space = 0; space < counts.size(); ++space) {
    for (const auto& [addr, n] : counts[space]) {
      const TraceSymbols::Symbol& s = symbols.Lookup(static_cast<int>(space) - 1, addr);
      std::string fn = FunctionOf(s.name);
      std::string dso = s.dso;
      // No symbol: the function the unwind table says holds it (a stripped
      // program's code is then told apart by function, not one line).
      if (!fn.empty() && fn.front() == '[' && dso != "[kernel]") {
        std::string u = symbols.UnnamedFunction(static_cast<int>(space) - 1, addr);
        if (!u.empty()) fn = std::move(u);
      }
      functions[{fn.empty() ? Hex(addr) : std::move(fn), std::move(dso)}] += n;
    }
    counts[space] = {};
  }
  for (auto& [key, n] : functions)
    rep.hot.push_back(ReportFunction{key.first, key.second, n,
                                     rep.branches ? 100.0 * static_cast<double>(n) /
                                                        static_cast<double>(rep.branches)
                                                  : 0.0});
  std::sort(rep.hot.begin(), rep.hot.end(),
            [](const ReportFunction& a, const ReportFunction& b) {
              if (a.branches != b.branches) return a.branches > b.branches;
              if (a.function != b.function) return a.function > b.function;
              return a.dso > b.dso;
            });

  const json::value* counters = rep.trailer.if_contains("counters");
  rep.counters = counters != nullptr ? *counters : json::array{};

  for (const pfm_record& r : last.InOrder()) rep.last_records.push_back(Symbolized(r, symbols));
  for (const pfm_record& r : last_branches.InOrder())
    rep.last_branches.push_back(Symbolized(r, symbols));
  rep.warnings = symbols.warnings();
  return rep;
}

void RenderReportText(const TraceReport& rep, std::ostream& out) {
  out << rep.file << ": " << rep.records << " records";
  for (const auto& [k, v] : rep.by_type) out << ", " << v << " " << k;
  out << "\n";
  if (!rep.complete) out << "warning: trace cut short: " << rep.cut_reason << "\n";
  for (const std::string& w : rep.warnings) out << "warning: " << w << "\n";
  if (const json::value* c = rep.header.if_contains("command"))
    out << "command: " << JsonText(c) << "\n";
  if (const json::value* s = rep.trailer.if_contains("exit"))
    out << "exit: " << JsonText(s) << "\n";
  if (const json::value* s = rep.trailer.if_contains("steps"))
    out << "soft-BTS steps: " << JsonText(s) << "\n";
  // Branch stepping's stops (docs/host_drivers.md), when the tracer did so.
  if (const json::value* sb = rep.trailer.if_contains("soft_bts"); sb != nullptr && sb->is_object())
    if (const json::value* i = sb->as_object().if_contains("int3_stops"); i != nullptr && i->is_number())
      out << "soft-BTS int3 stops (branch stepping): " << JsonText(i) << "\n";
  if (rep.lost) {
    out << "lost: " << rep.lost << " records";
    if (rep.lost > rep.lost_in_records)
      out << " (" << rep.lost - rep.lost_in_records
          << " not marked by a LOST record: the ring's count in the trailer)";
    out << "\n";
  }
  if (rep.overwritten)
    out << "overwritten: " << rep.overwritten
        << " records (history ring: the oldest, replaced by newer ones)\n";
  if (!rep.hot.empty()) {
    out << "\nbranches by source function:\n";
    for (size_t i = 0; i < rep.hot.size() && i < kHotText; ++i)
      out << absl::StrFormat("  %10u %6.2f%%  ", rep.hot[i].branches, rep.hot[i].percent)
          << (rep.hot[i].dso.empty()
                  ? rep.hot[i].function
                  : absl::StrFormat("%-40s %s", rep.hot[i].function, rep.hot[i].dso))
          << "\n";
    if (rep.hot.size() > kHotText)
      out << "  (" << rep.hot.size() - kHotText << " more functions)\n";
    if (rep.hot_uncounted)
      out << "  (" << rep.hot_uncounted << " branches from addresses beyond the "
          << kMaxHotAddresses << " tracked)\n";
  }
  if (rep.counters.is_array() && !rep.counters.get_array().empty()) {
    out << "\ncounters:\n";
    for (const json::value& cv : rep.counters.get_array()) {
      if (!cv.is_object()) continue;
      const json::object& co = cv.get_object();
      const json::value* event = co.if_contains("event");
      const json::value* value = co.if_contains("value");
      // The clocks in msec, as perf stat shows them; counts as they are.
      std::string shown = JsonText(value), unit;
      if (event != nullptr && event->is_string() &&
          CounterUnit(std::string(event->get_string())) == "ns" && value != nullptr &&
          (value->is_uint64() || value->is_int64())) {
        const double ns = value->is_uint64() ? static_cast<double>(value->get_uint64())
                                             : static_cast<double>(value->get_int64());
        shown = absl::StrFormat("%.2f", ns / 1e6);
        unit = "msec";
      }
      out << absl::StrFormat("  %-24s %16s %-4s  running %s\n", JsonText(event), shown, unit,
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

json::object RecordJson(const ReportRecord& rr) {
  json::object o = RecordToJson(rr.record);
  if (rr.record.type == PFM_REC_BRANCH || rr.record.type == PFM_REC_GAP) {
    o["from_sym"] = rr.from_sym;
    o["to_sym"] = rr.to_sym;
  } else if (rr.record.type == PFM_REC_PEBS) {
    o["ip_sym"] = rr.ip_sym;
  }
  return o;
}

json::object RenderReportJson(const TraceReport& rep) {
  json::array recs, branches;
  for (const ReportRecord& rr : rep.last_records) recs.push_back(RecordJson(rr));
  for (const ReportRecord& rr : rep.last_branches) branches.push_back(RecordJson(rr));
  json::object types;
  for (const auto& [k, v] : rep.by_type) types[k] = v;
  json::array warnings(rep.warnings.begin(), rep.warnings.end());
  json::array hot;
  for (size_t i = 0; i < rep.hot.size() && i < kHotJson; ++i)
    hot.push_back(json::object{{"function", rep.hot[i].function},
                               {"dso", rep.hot[i].dso},
                               {"branches", rep.hot[i].branches},
                               {"percent", rep.hot[i].percent}});
  // The counters as written, each object with its unit.
  json::value counters = rep.counters;
  if (counters.is_array()) {
    for (json::value& cv : counters.get_array()) {
      if (!cv.is_object()) continue;
      const json::value* event = cv.get_object().if_contains("event");
      if (event != nullptr && event->is_string())
        cv.get_object()["unit"] = CounterUnit(std::string(event->get_string()));
    }
  }
  // The mappings the report names addresses with (the last block), addresses
  // as hex like the records'.
  json::value maps = nullptr;
  if (rep.maps) {
    json::array mappings;
    for (const Mapping& e : rep.maps->mappings)
      mappings.push_back(json::object{{"start", Hex(e.start)},
                                      {"end", Hex(e.end)},
                                      {"offset", Hex(e.offset)},
                                      {"path", e.path},
                                      {"writable", e.writable},
                                      {"shared", e.shared}});
    maps = json::object{{"pid", rep.maps->pid},
                        {"time_ns", rep.maps->time_ns},
                        {"cut", rep.maps->cut},
                        {"mappings", std::move(mappings)}};
  }
  return json::object{{"complete", rep.complete},
                      {"cut_reason", rep.cut_reason},
                      {"header", rep.header},
                      {"trailer", rep.trailer},
                      {"maps", std::move(maps)},
                      {"summary", json::object{{"records", rep.records},
                                               {"by_type", std::move(types)},
                                               {"lost", rep.lost},
                                               {"lost_in_records", rep.lost_in_records},
                                               {"overwritten", rep.overwritten},
                                               {"branches", rep.branches},
                                               {"hot_uncounted", rep.hot_uncounted}}},
                      {"hot_functions", std::move(hot)},
                      {"counters", std::move(counters)},
                      {"last_branches", std::move(branches)},
                      {"records", std::move(recs)},
                      {"warnings", std::move(warnings)}};
}

}  // namespace pfm
