// report: `pfmctl report`'s model (BuildReport, which streams the file) over
// a generated trace of 10 M records (1 M with --quick): records per second
// and peak RSS, against the raw read() speed of the same file in the same
// run (the floor: the report cannot read faster than the bytes come).
//
// The trace is what a soft-BTS recording of a hot program looks like:
// branches among 4096 addresses in this binary's own executable mappings
// (and the libraries it maps), weighted so a few hundred carry most of the
// branches, a switch pair every 100 000 records, a LOST record every 2 M,
// the EXIT record, the MAPS block and a trailer with counters at the end,
// as `record` writes them. Written in 64 Ki-record blocks (StreamToFile's
// batch), compact as `record` writes them since 2026-11-27, and once more
// fixed (trace version 2) for the report's speed over each. The file sits in the page cache for every repetition (written
// just before, then read whole by the first baseline).
//
// Peak RSS: /proc/self/status VmHWM after resetting it (echo 5 >
// /proc/self/clear_refs) before each report, minus VmRSS at the reset: what
// the report itself added; the largest over the repetitions is the figure. The target is well under 100 MB for 10 M records
// and at least 5 M records/s. ReadTrace (the whole file in memory, what
// report did before) is measured once the same way, for comparison, and so
// is BuildTimelineFromFile (`report --timeline`, the chrome-json export),
// and ExportTrace to perf.data (`export --format perf`).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernel/uapi/pfm_uapi.h"
#include "pfm/symbolizer.h"
#include "pfm/trace_file.h"
#include "userspace/pfmctl/export.h"
#include "userspace/pfmctl/report.h"
#include "userspace/pfmctl/timeline.h"

namespace pfm::bench {
namespace {

constexpr size_t kAddresses = 4096;
constexpr size_t kBlock = 1 << 16;
constexpr int32_t kPid = 4242;

// A field of /proc/self/status in bytes ("VmHWM:   1234 kB"), or 0.
uint64_t StatusBytes(const char* field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field, 0) == 0)
      return std::strtoull(line.c_str() + std::strlen(field), nullptr, 10) * 1024;
  return 0;
}

// Resets VmHWM to the current RSS (Linux 4.0+); false if refused.
bool ResetPeakRss() {
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

// One call's time and the peak RSS it added (VmHWM after a reset, minus
// VmRSS at the reset).
struct OnceCost {
  uint64_t ns = 0;
  uint64_t peak_delta = 0;
};
template <typename Fn>
OnceCost MeasureOnce(Fn fn) {
  ResetPeakRss();
  const uint64_t rss0 = StatusBytes("VmRSS:");
  const uint64_t t0 = MonotonicNs();
  fn();
  OnceCost c;
  c.ns = MonotonicNs() - t0;
  const uint64_t hwm = StatusBytes("VmHWM:");
  c.peak_delta = hwm > rss0 ? hwm - rss0 : 0;
  return c;
}

double Seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

struct Generated {
  uint64_t records = 0;
  uint64_t distinct_from = 0;  // branch sources actually drawn
};

// Writes the trace; the branch sources and targets are drawn from
// `distinct` addresses inside `maps`' executable mappings, the sources
// skewed to a hot few hundred (`hot`) or uniformly.
bool Generate(const std::string& path, uint64_t n, const std::vector<Mapping>& maps,
              size_t distinct, bool hot, Generated* out,
              TraceEncoding encoding = TraceEncoding::kCompact) {
  std::mt19937_64 rng(42);
  std::vector<uint64_t> addrs;
  uint64_t exec_bytes = 0;
  for (const Mapping& m : maps) exec_bytes += m.end - m.start;
  if (exec_bytes == 0) return false;
  for (size_t i = 0; i < distinct; ++i) {
    uint64_t at = rng() % exec_bytes;
    for (const Mapping& m : maps) {
      if (at < m.end - m.start) {
        addrs.push_back(m.start + at);
        break;
      }
      at -= m.end - m.start;
    }
  }
  absl::StatusOr<TraceWriter> w = TraceWriter::Create(
      path, {{"kind", "record"}, {"command", "bench-report"}, {"pid", kPid}}, encoding);
  if (!w.ok()) return false;
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<pfm_record> block;
  block.reserve(kBlock);
  uint64_t time = 1'000'000'000;
  auto push = [&](const pfm_record& r) {
    block.push_back(r);
    if (block.size() == kBlock) {
      if (!w->Append(block.data(), block.size()).ok()) return false;
      block.clear();
    }
    return true;
  };
  std::vector<bool> seen(distinct);
  for (uint64_t i = 0; i + 1 < n; ++i) {
    pfm_record r{};
    r.time = (time += 40);
    r.pid = r.tid = kPid;
    if (i % 100'000 == 99'998 || i % 100'000 == 99'999) {
      r.type = i % 2 ? PFM_REC_SWITCH_IN : PFM_REC_SWITCH_OUT;
      r.u.sw.other_pid = r.u.sw.other_tid = 1;
    } else if (i % 2'000'000 == 1'999'997) {
      r.type = PFM_REC_LOST;
      r.u.lost.count = 100;
    } else {
      // u^4: most branches among the first few hundred addresses, a hot loop.
      const double x = u(rng);
      const size_t from = static_cast<size_t>((hot ? x * x * x * x : x) * distinct);
      const size_t to = static_cast<size_t>(u(rng) * distinct);
      r.type = PFM_REC_BRANCH;
      r.u.branch.from = addrs[from];
      r.u.branch.to = addrs[to];
      if (!seen[from]) {
        seen[from] = true;
        ++out->distinct_from;
      }
    }
    if (!push(r)) return false;
  }
  pfm_record exit{};
  exit.type = PFM_REC_EXIT;
  exit.time = time + 40;
  exit.pid = exit.tid = kPid;
  if (!push(exit)) return false;
  if (!block.empty() && !w->Append(block.data(), block.size()).ok()) return false;
  if (!w->AppendMaps(ProcessMaps{time, kPid, maps}).ok()) return false;
  boost::json::array counters{
      boost::json::object{{"event", "task-clock"}, {"value", time - 1'000'000'000}, {"ratio", 1.0}},
      boost::json::object{{"event", "page-faults"}, {"value", 123}, {"ratio", 1.0}}};
  out->records = w->records();
  if (!w->Finish({{"exit", "exit 0"}, {"counters", counters}, {"records", n}}).ok()) return false;
  return true;
}

// The baseline: read() of the whole file, 1 MiB at a time.
uint64_t RawRead(const std::string& path, uint64_t* bytes) {
  std::vector<char> buf(1 << 20);
  const uint64_t t0 = MonotonicNs();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  *bytes = 0;
  for (ssize_t k; (k = ::read(fd, buf.data(), buf.size())) > 0;) {
    *bytes += static_cast<uint64_t>(k);
    DoNotOptimize(buf.data());
  }
  ::close(fd);
  return MonotonicNs() - t0;
}

}  // namespace
}  // namespace pfm::bench

int main(int argc, char** argv) {
  using namespace pfm;
  using namespace pfm::bench;
  const Options opt = ParseOptions(argc, argv, "pfmctl report over a generated trace");
  const uint64_t n = opt.quick ? 1'000'000 : 10'000'000;
  const int reps = 3;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/pfm-bench-report-" +
                           std::to_string(::getpid()) + ".pfmtrace";

  // This process's executable mappings: real ELF files to symbolize.
  absl::StatusOr<std::vector<Mapping>> self = ReadProcMaps(0);
  if (!self.ok()) {
    std::fprintf(stderr, "report: %s\n", std::string(self.status().message()).c_str());
    return 1;
  }
  std::vector<Mapping> exec;
  for (const Mapping& m : *self)
    if (!m.writable && !m.path.empty() && m.path[0] == '/') exec.push_back(m);
  Generated gen;
  const uint64_t g0 = MonotonicNs();
  if (!Generate(path, n, exec, kAddresses, /*hot=*/true, &gen)) {
    std::fprintf(stderr, "report: cannot write %s\n", path.c_str());
    return 1;
  }
  const uint64_t gen_ns = MonotonicNs() - g0;
  std::fprintf(stderr, "generated %llu records in %.1f s\n",
               static_cast<unsigned long long>(gen.records), Seconds(gen_ns));

  std::vector<double> raw_s, report_s, peak_delta, peak_abs;
  uint64_t file_bytes = 0;
  bool hwm_reset = true;
  boost::json::array hot;
  uint64_t report_records = 0;
  for (int r = 0; r < reps; ++r) {
    const uint64_t raw_ns = RawRead(path, &file_bytes);
    raw_s.push_back(Seconds(raw_ns));
    hwm_reset = ResetPeakRss() && hwm_reset;
    const uint64_t rss0 = StatusBytes("VmRSS:");
    ReportOptions ro;
    ro.limit = 20;
    const uint64_t t0 = MonotonicNs();
    absl::StatusOr<TraceReport> rep = BuildReport(path, ro);
    const uint64_t t1 = MonotonicNs();
    if (!rep.ok()) {
      std::fprintf(stderr, "report: %s\n", std::string(rep.status().message()).c_str());
      return 1;
    }
    const uint64_t hwm = StatusBytes("VmHWM:");
    report_s.push_back(Seconds(t1 - t0));
    peak_abs.push_back(static_cast<double>(hwm));
    peak_delta.push_back(static_cast<double>(hwm > rss0 ? hwm - rss0 : 0));
    report_records = rep->records;
    if (r == 0)
      for (size_t i = 0; i < rep->hot.size() && i < 3; ++i)
        hot.push_back(boost::json::object{{"function", rep->hot[i].function},
                                          {"dso", rep->hot[i].dso},
                                          {"percent", rep->hot[i].percent}});
    std::fprintf(stderr, "rep %d: raw read %.3f s, report %.3f s (%.1f M records/s), peak +%.1f MiB\n",
                 r, Seconds(raw_ns), Seconds(t1 - t0),
                 static_cast<double>(rep->records) / Seconds(t1 - t0) / 1e6,
                 peak_delta.back() / (1 << 20));
  }
  // The same records in a fixed file (trace version 2, what `record` wrote
  // before compact blocks): its size and the report's speed over it, to set
  // the compact file's against.
  const std::string fixed_path = path + ".fixed";
  Generated fixed_gen;
  if (!Generate(fixed_path, n, exec, kAddresses, /*hot=*/true, &fixed_gen,
                TraceEncoding::kFixed) ||
      fixed_gen.records != gen.records) {
    std::fprintf(stderr, "report: cannot write %s\n", fixed_path.c_str());
    return 1;
  }
  std::vector<double> fixed_s;
  uint64_t fixed_bytes = 0;
  for (int r = 0; r < reps; ++r) {
    RawRead(fixed_path, &fixed_bytes);
    ReportOptions ro;
    ro.limit = 20;
    const uint64_t t0 = MonotonicNs();
    absl::StatusOr<TraceReport> frep = BuildReport(fixed_path, ro);
    fixed_s.push_back(Seconds(MonotonicNs() - t0));
    if (!frep.ok() || frep->records != report_records) {
      std::fprintf(stderr, "report: fixed: %s\n",
                   frep.ok() ? "record count differs" : std::string(frep.status().message()).c_str());
      return 1;
    }
  }
  ::unlink(fixed_path.c_str());
  std::fprintf(stderr, "fixed file: %.1f MiB (compact %.1f MiB), report %.3f s\n",
               static_cast<double>(fixed_bytes) / (1 << 20),
               static_cast<double>(file_bytes) / (1 << 20), Median(fixed_s));
  // `report --timeline` and `export --format chrome-json`: the timeline
  // streamed from the file (two passes), once, the same way.
  absl::StatusOr<Timeline> tl;
  const OnceCost tl_cost = MeasureOnce([&] { tl = BuildTimelineFromFile(path); });
  if (!tl.ok() || tl->records != report_records) {
    std::fprintf(stderr, "report: timeline: %s\n",
                 tl.ok() ? "record count differs" : std::string(tl.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "timeline: %.3f s (%.1f M records/s), peak +%.1f MiB\n",
               Seconds(tl_cost.ns), static_cast<double>(tl->records) / Seconds(tl_cost.ns) / 1e6,
               static_cast<double>(tl_cost.peak_delta) / (1 << 20));
  // `export --format perf`: two passes over the file, records put in time
  // order in bounded memory, perf.data written next to the trace, once.
  const std::string perf_path = path + ".perf.data";
  absl::StatusOr<ExportResult> exported;
  const OnceCost export_cost =
      MeasureOnce([&] { exported = ExportTrace({path, perf_path, "perf", {}}); });
  struct stat perf_st {};
  const uint64_t perf_bytes =
      ::stat(perf_path.c_str(), &perf_st) == 0 ? static_cast<uint64_t>(perf_st.st_size) : 0;
  ::unlink(perf_path.c_str());
  if (!exported.ok() || exported->records != report_records) {
    std::fprintf(stderr, "report: export: %s\n",
                 exported.ok() ? "record count differs"
                               : std::string(exported.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "export perf: %.3f s (%.1f M records/s), peak +%.1f MiB, %.0f MiB written\n",
               Seconds(export_cost.ns),
               static_cast<double>(exported->records) / Seconds(export_cost.ns) / 1e6,
               static_cast<double>(export_cost.peak_delta) / (1 << 20),
               static_cast<double>(perf_bytes) / (1 << 20));
  // A wide trace: branches spread evenly over kWideAddresses addresses of
  // the same files (a large program's, as a Python recording's are over
  // libpython), where nearly every record names an address not named
  // before: what the symbolizer's lookups cost, against the raw read of
  // that file. Before its index (libpfm-bts/symbolizer.cc, SymbolIndex),
  // every new address was a linear search of a file's symbol table.
  constexpr size_t kWideAddresses = 200'000;
  const uint64_t wide_n = opt.quick ? 500'000 : 2'000'000;
  const std::string wide_path = path + ".wide";
  Generated wide_gen;
  if (!Generate(wide_path, wide_n, exec, kWideAddresses, /*hot=*/false, &wide_gen)) {
    std::fprintf(stderr, "report: cannot write %s\n", wide_path.c_str());
    return 1;
  }
  std::vector<double> wide_raw_s, wide_s;
  for (int r = 0; r < reps; ++r) {
    uint64_t bytes = 0;
    wide_raw_s.push_back(Seconds(RawRead(wide_path, &bytes)));
    ReportOptions ro;
    ro.limit = 20;
    const uint64_t t0 = MonotonicNs();
    absl::StatusOr<TraceReport> wrep = BuildReport(wide_path, ro);
    wide_s.push_back(Seconds(MonotonicNs() - t0));
    if (!wrep.ok() || wrep->records != wide_gen.records) {
      std::fprintf(stderr, "report: wide: %s\n",
                   wrep.ok() ? "record count differs" : std::string(wrep.status().message()).c_str());
      return 1;
    }
  }
  ::unlink(wide_path.c_str());
  const double wide_rate = static_cast<double>(wide_gen.records) / Median(wide_s);
  std::fprintf(stderr, "wide: %llu records over %llu distinct sources, report %.3f s (%.1f M records/s)\n",
               static_cast<unsigned long long>(wide_gen.records),
               static_cast<unsigned long long>(wide_gen.distinct_from), Median(wide_s),
               wide_rate / 1e6);
  // The former model, once: the whole file in memory.
  absl::StatusOr<Trace> whole;
  const OnceCost whole_cost = MeasureOnce([&] { whole = ReadTrace(path); });
  const bool whole_ok = whole.ok();
  whole = Trace();
  ::unlink(path.c_str());

  const double raw = Median(raw_s), rep = Median(report_s);
  const double records_per_s = static_cast<double>(report_records) / rep;
  // The worst repetition: the first, in a fresh process as pfmctl always
  // is, also pays for the allocator's and libdw's first growth.
  const double peak = *std::max_element(peak_delta.begin(), peak_delta.end());
  boost::json::object doc = Envelope("report", opt);
  doc["records"] = report_records;
  doc["file_bytes"] = file_bytes;
  doc["distinct_addresses"] = kAddresses;
  doc["distinct_branch_sources"] = gen.distinct_from;
  doc["repetitions"] = reps;
  doc["generate_s"] = Seconds(gen_ns);
  doc["raw_read"] = boost::json::object{
      {"seconds_median", raw},
      {"gb_per_s", static_cast<double>(file_bytes) / raw / 1e9},
      {"records_per_s", static_cast<double>(report_records) / raw}};
  doc["report"] = boost::json::object{
      {"seconds_median", rep},
      {"seconds", boost::json::value_from(report_s)},
      {"records_per_s", records_per_s},
      {"peak_rss_delta_bytes_max", peak},
      {"peak_rss_delta_bytes", boost::json::value_from(peak_delta)},
      {"peak_rss_bytes", Median(peak_abs)},
      {"peak_rss_reset", hwm_reset},
      {"vs_raw_read", raw / rep},
      {"hot_top3", hot}};
  // The file's encoding (trace_file.h): the compact file above against the
  // same records fixed.
  doc["file_encoding"] = boost::json::object{
      {"compact_bytes_per_record",
       static_cast<double>(file_bytes) / static_cast<double>(report_records)},
      {"fixed_bytes", fixed_bytes},
      {"fixed_bytes_per_record",
       static_cast<double>(fixed_bytes) / static_cast<double>(report_records)},
      {"fixed_report_seconds_median", Median(fixed_s)},
      {"compact_vs_fixed_report_speed", Median(fixed_s) / rep}};
  doc["timeline_from_file"] = boost::json::object{
      {"seconds", Seconds(tl_cost.ns)},
      {"records_per_s", static_cast<double>(tl->records) / Seconds(tl_cost.ns)},
      {"peak_rss_delta_bytes", tl_cost.peak_delta}};
  doc["export_perf_from_file"] = boost::json::object{
      {"seconds", Seconds(export_cost.ns)},
      {"records_per_s", static_cast<double>(exported->records) / Seconds(export_cost.ns)},
      {"peak_rss_delta_bytes", export_cost.peak_delta},
      {"perf_data_bytes", perf_bytes},
      {"peak_held_records", exported->detail["peak_held_records"]},
      {"sort_runs", exported->detail["sort_runs"]}};
  doc["read_whole_trace"] = boost::json::object{
      {"ok", whole_ok},
      {"seconds", Seconds(whole_cost.ns)},
      {"peak_rss_delta_bytes", whole_cost.peak_delta}};
  doc["report_wide"] = boost::json::object{
      {"records", wide_gen.records},
      {"distinct_addresses", kWideAddresses},
      {"distinct_branch_sources", wide_gen.distinct_from},
      {"seconds", boost::json::value_from(wide_s)},
      {"records_per_s", wide_rate},
      {"vs_raw_read", Median(wide_raw_s) / Median(wide_s)}};
  const bool met = records_per_s >= 5e6 && peak < 100.0 * (1 << 20);
  doc["target"] = boost::json::object{
      {"what", ">= 5 M records/s and peak RSS well under 100 MB for 10 M records"},
      {"met", met}};
  PrintJson(doc);
  return 0;
}
