#include "userspace/pfmctl/report.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pfm/symbolizer.h"

// A function of this binary for the report to name: C linkage, so its
// symbol is the plain name.
extern "C" __attribute__((noinline)) int PfmReportTestTarget(int x) {
  asm volatile("" : "+r"(x));
  return x + 1;
}

namespace pfm {
namespace {

namespace json = boost::json;

std::string TempPath(const char* name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}

pfm_record Branch(uint64_t from, uint64_t to, uint64_t time = 0) {
  pfm_record r{};
  r.type = PFM_REC_BRANCH;
  r.time = time;
  r.pid = r.tid = 42;
  r.u.branch.from = from;
  r.u.branch.to = to;
  return r;
}

ReportOptions Limit(size_t n) {
  ReportOptions o;
  o.limit = n;
  return o;
}

std::string WriteTrace(const char* name, const json::object& trailer) {
  const std::string path = TempPath(name);
  auto w = TraceWriter::Create(path, {{"command", "prog arg"}});
  EXPECT_TRUE(w.ok()) << w.status();
  std::vector<pfm_record> recs = {Branch(0x10, 0x20), Branch(0x10, 0x30),
                                  Branch(0x40, 0x50)};
  pfm_record lost{};
  lost.type = PFM_REC_LOST;
  lost.u.lost.count = 7;
  recs.push_back(lost);
  EXPECT_TRUE(w->Append(recs.data(), recs.size()).ok());
  EXPECT_TRUE(w->Finish(trailer).ok());
  return path;
}

TEST(ReportTest, CountsTypesLossAndHotAddresses) {
  const std::string path = WriteTrace("plain.trace", {{"exit", "exit 0"}});
  absl::StatusOr<TraceReport> rep = BuildReport(path, Limit(2));
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->records, 4u);
  EXPECT_EQ(rep->by_type.at("branch"), 3u);
  EXPECT_EQ(rep->branches, 3u);
  EXPECT_EQ(rep->lost, 7u);
  ASSERT_EQ(rep->hot.size(), 2u);  // no maps: functions are addresses
  EXPECT_EQ(rep->hot[0].function, "0x10");
  EXPECT_EQ(rep->hot[0].branches, 2u);
  EXPECT_NEAR(rep->hot[0].percent, 200.0 / 3, 1e-9);
  EXPECT_EQ(rep->hot[0].dso, "");
  ASSERT_EQ(rep->last_branches.size(), 2u);
  EXPECT_EQ(rep->last_branches[1].record.u.branch.from, 0x40u);
  ASSERT_EQ(rep->last_records.size(), 2u);
  EXPECT_EQ(rep->last_records[1].record.type, PFM_REC_LOST);
  std::ostringstream text;
  RenderReportText(*rep, text);
  EXPECT_NE(text.str().find(": 4 records, 3 branch, 1 lost\n"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("command: prog arg\nexit: exit 0\n"), std::string::npos);
  EXPECT_NE(text.str().find("lost: 7 records\n"), std::string::npos);
  EXPECT_NE(text.str().find("66.67%  0x10"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("\nlast 2 branches:\n"), std::string::npos);
  const json::object j = RenderReportJson(*rep);
  EXPECT_EQ(j.at("records").as_array().size(), 2u);
  EXPECT_EQ(j.at("last_branches").as_array().size(), 2u);
  EXPECT_EQ(j.at("summary").at("branches").as_uint64(), 3u);
  EXPECT_EQ(j.at("hot_functions").at(0).at("branches").as_uint64(), 2u);
  EXPECT_TRUE(j.at("counters").as_array().empty());
  EXPECT_TRUE(j.at("maps").is_null());
}

TEST(ReportTest, LastRecordsKeepTheNewestInOrderWhateverTheLimit) {
  const std::string path = TempPath("many.trace");
  auto w = TraceWriter::Create(path, {});
  ASSERT_TRUE(w.ok());
  std::vector<pfm_record> recs;
  for (uint64_t i = 0; i < 1000; ++i) recs.push_back(Branch(0x1000 + i, 0x2000, i));
  ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  ASSERT_TRUE(w->Finish({}).ok());
  for (size_t limit : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{1} << 30}) {
    absl::StatusOr<TraceReport> rep = BuildReport(path, Limit(limit));
    ASSERT_TRUE(rep.ok()) << rep.status();
    const size_t n = std::min<size_t>(limit, 1000);
    ASSERT_EQ(rep->last_branches.size(), n) << limit;
    for (size_t i = 0; i < n; ++i)
      EXPECT_EQ(rep->last_branches[i].record.time, 1000 - n + i) << limit;
    EXPECT_EQ(rep->hot.size(), 1000u);
  }
}

TEST(ReportTest, SkipsMalformedTrailerEntriesInsteadOfThrowing) {
  const json::value trailer = json::parse(R"({
    "counters": [{"event": "e", "value": 5, "ratio": 0.5}, "junk",
                 {"event": "f", "ratio": "bad"},
                 {"event": "task-clock", "value": 12345678, "ratio": 1}],
    "maps": [{"start": 16, "end": 32, "offset": 0, "path": "/x"}],
    "steps": {"odd": 1}})");
  const std::string path = WriteTrace("odd.trace", trailer.as_object());
  absl::StatusOr<TraceReport> rep = BuildReport(path, Limit(20));
  ASSERT_TRUE(rep.ok()) << rep.status();
  // Maps in JSON (trace version 1's place for them) are not read.
  EXPECT_FALSE(rep->maps.has_value());
  EXPECT_EQ(rep->hot[0].function, "0x10");
  std::ostringstream text;
  RenderReportText(*rep, text);
  EXPECT_NE(text.str().find("  e                                       5       running 50.0%\n"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("running bad\n"), std::string::npos) << text.str();
  // The clocks in msec, as perf stat shows them.
  EXPECT_NE(text.str().find("12.35 msec  running 100.0%\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("soft-BTS steps: {\"odd\":1}\n"), std::string::npos);
  // --json passes the counters on as written, each object with its unit.
  const json::array counters = RenderReportJson(*rep).at("counters").as_array();
  ASSERT_EQ(counters.size(), 4u);
  EXPECT_EQ(counters[0].at("unit").as_string(), "events");
  EXPECT_EQ(counters[1].as_string(), "junk");
  EXPECT_EQ(counters[3].at("unit").as_string(), "ns");
}

TEST(ReportTest, NamesEachRecordWithTheMapsInEffectAtItsTime) {
  const std::string path = TempPath("maps.trace");
  auto w = TraceWriter::Create(path, {{"command", "prog"}});
  ASSERT_TRUE(w.ok()) << w.status();
  // One branch before both MAPS blocks' times, one after them.
  const std::vector<pfm_record> recs = {Branch(0x1010, 0x1020, 1), Branch(0x1010, 0x5000, 9)};
  ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  ProcessMaps first{2, 42, {Mapping{0x1000, 0x2000, 0, "/nonexistent/first"}}};
  ProcessMaps last{4, 42, {Mapping{0x1000, 0x2000, 0x4000, "/nonexistent/last"}}};
  ASSERT_TRUE(w->AppendMaps(first).ok());
  ASSERT_TRUE(w->AppendMaps(last).ok());
  ASSERT_TRUE(w->AppendMaps(ProcessMaps{6, 42, {}}).ok());  // hides nothing
  ASSERT_TRUE(w->Finish({}).ok());
  absl::StatusOr<TraceReport> rep = BuildReport(path, Limit(20));
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_TRUE(rep->maps.has_value());
  EXPECT_EQ(rep->maps->time_ns, 4u);
  ASSERT_EQ(rep->last_branches.size(), 2u);
  // The file cannot be read: the path and the offset in the file.
  EXPECT_EQ(rep->last_branches[0].from_sym, "[/nonexistent/first+0x10]");
  EXPECT_EQ(rep->last_branches[1].from_sym, "[/nonexistent/last+0x4010]");
  EXPECT_EQ(rep->last_branches[1].to_sym, "");  // unmapped
  ASSERT_EQ(rep->hot.size(), 2u);
  // Symbol-less branches count for their file, brackets closed.
  EXPECT_EQ(rep->hot[0].function, "[/nonexistent/last]");
  EXPECT_EQ(rep->hot[0].dso, "last");
  EXPECT_EQ(rep->hot[1].function, "[/nonexistent/first]");
  const json::object j = RenderReportJson(*rep);
  EXPECT_EQ(json::serialize(j.at("maps")),
            R"({"pid":42,"time_ns":4,"mappings":[{"start":"0x1000","end":"0x2000",)"
            R"("offset":"0x4000","path":"/nonexistent/last","writable":false,"shared":false}]})");
}

TEST(ReportTest, HotFunctionsNameARealFunctionAndItsFile) {
  absl::StatusOr<std::vector<Mapping>> self = ReadProcMaps(0);
  ASSERT_TRUE(self.ok()) << self.status();
  const uint64_t fn = reinterpret_cast<uint64_t>(&PfmReportTestTarget);
  const std::string path = TempPath("self.trace");
  auto w = TraceWriter::Create(path, {});
  ASSERT_TRUE(w.ok());
  std::vector<pfm_record> recs;
  for (uint64_t i = 0; i < 100; ++i) recs.push_back(Branch(fn + (i % 4), fn, i));
  recs.push_back(Branch(0x10, fn, 100));  // unmapped: its own address
  ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  ASSERT_TRUE(w->AppendMaps(ProcessMaps{1000, getpid(), *self}).ok());
  ASSERT_TRUE(w->Finish({}).ok());
  absl::StatusOr<TraceReport> rep = BuildReport(path, Limit(1));
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->hot.size(), 2u);
  EXPECT_EQ(rep->hot[0].function, "PfmReportTestTarget");
  EXPECT_EQ(rep->hot[0].branches, 100u);
  EXPECT_EQ(rep->hot[0].dso, "report_test");
  EXPECT_EQ(rep->hot[1].function, "0x10");
  ASSERT_EQ(rep->last_branches.size(), 1u);
  EXPECT_EQ(rep->last_branches[0].to_sym, "PfmReportTestTarget");
}

TEST(ReportTest, HandsOutEveryRecordInOrderAndStopsOnTheCallersError) {
  const std::string path = WriteTrace("each.trace", {});
  std::vector<uint16_t> types;
  ReportOptions o;
  o.each_record = [&](const ReportRecord& r) {
    types.push_back(r.record.type);
    return absl::OkStatus();
  };
  ASSERT_TRUE(BuildReport(path, o).ok());
  EXPECT_EQ(types, (std::vector<uint16_t>{PFM_REC_BRANCH, PFM_REC_BRANCH, PFM_REC_BRANCH,
                                          PFM_REC_LOST}));
  int calls = 0;
  o.each_record = [&](const ReportRecord&) {
    return ++calls == 2 ? absl::UnavailableError("closed") : absl::OkStatus();
  };
  EXPECT_EQ(BuildReport(path, o).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 2);
}

TEST(ReportTest, DistinctAddressesBeyondTheCapAreCountedApart) {
  const std::string path = TempPath("wide.trace");
  auto w = TraceWriter::Create(path, {});
  ASSERT_TRUE(w.ok());
  constexpr uint64_t kExtra = 10;
  std::vector<pfm_record> recs;
  for (uint64_t i = 0; i < kMaxHotAddresses + kExtra; ++i) {
    recs.push_back(Branch(0x100000 + i, 0));
    if (recs.size() == 65536) {
      ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
      recs.clear();
    }
  }
  recs.push_back(Branch(0x100000, 0));  // seen before: still counted
  ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  ASSERT_TRUE(w->Finish({}).ok());
  absl::StatusOr<TraceReport> rep = BuildReport(path, Limit(0));
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->hot_uncounted, kExtra);
  EXPECT_EQ(rep->hot.size(), kMaxHotAddresses);
  EXPECT_EQ(rep->hot[0].branches, 2u);
  std::ostringstream text;
  RenderReportText(*rep, text);
  EXPECT_NE(text.str().find("10 branches from addresses beyond the"), std::string::npos);
}

TEST(ReportTest, CutTraceIsReportedAsFarAsItReads) {
  const std::string path = WriteTrace("cut.trace", {});
  std::ifstream in(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Into the trailer: the records are all there, the trailer is not.
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(data.size() - 1)), 0);
  absl::StatusOr<TraceReport> rep = BuildReport(path, Limit(20));
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_FALSE(rep->complete);
  EXPECT_EQ(rep->records, 4u);
  EXPECT_EQ(rep->cut_reason.rfind("truncated block at byte", 0), 0u) << rep->cut_reason;
  std::ostringstream text;
  RenderReportText(*rep, text);
  EXPECT_NE(text.str().find("warning: trace cut short: truncated block"), std::string::npos);
}

TEST(ReportTest, MissingFileIsNotFound) {
  EXPECT_EQ(BuildReport(TempPath("nonexistent.trace"), Limit(20)).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pfm
