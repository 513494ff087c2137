#include "userspace/pfmctl/report.h"

#include <dirent.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "libpfm-bts/testing/elf_text.h"
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
            R"({"pid":42,"time_ns":4,"cut":false,"mappings":[{"start":"0x1000","end":"0x2000",)"
            R"("offset":"0x4000","path":"/nonexistent/last","writable":false,"shared":false}]})");
  EXPECT_TRUE(rep->warnings.empty());
}

// A cut mapping list (ProcessMaps::cut: the tracer had more mappings than
// a list carries) is said once per process, in the text and the JSON,
// naming what was kept; the names it has are used as before.
TEST(ReportTest, ACutMappingListIsSaidOncePerProcess) {
  const std::string path = TempPath("cut_maps.trace");
  auto w = TraceWriter::Create(path, {{"command", "prog"}});
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<pfm_record> recs = {Branch(0x1010, 0x1020, 5)};
  ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  ProcessMaps cut{2, 42, {Mapping{0x1000, 0x2000, 0, "/nonexistent/a"},
                          Mapping{0x3000, 0x4000, 0, "/nonexistent/b"}}};
  cut.cut = true;
  ASSERT_TRUE(w->AppendMaps(cut).ok());
  cut.time_ns = 3;
  ASSERT_TRUE(w->AppendMaps(cut).ok());  // the same process again: said once
  ASSERT_TRUE(w->AppendMaps(ProcessMaps{4, 43, {Mapping{0x1000, 0x2000, 0, "/c"}}}).ok());
  ASSERT_TRUE(w->Finish({}).ok());
  absl::StatusOr<TraceReport> rep = BuildReport(path, Limit(20));
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->warnings.size(), 1u);
  EXPECT_EQ(rep->warnings[0],
            "pid 42 had more executable mappings than a mapping list carries: only its 2 "
            "lowest (up to 0x4000) were recorded, addresses above are not named");
  std::ostringstream text;
  RenderReportText(*rep, text);
  EXPECT_NE(text.str().find("warning: pid 42 had more executable mappings"), std::string::npos)
      << text.str();
  ASSERT_EQ(rep->last_branches.size(), 1u);
  EXPECT_EQ(rep->last_branches[0].from_sym, "[/nonexistent/a+0x10]");
  EXPECT_EQ(RenderReportJson(*rep).at("warnings").as_array().size(), 1u);
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

// A stripped program's code is reported by function, as its unwind table
// (.eh_frame) divides it: branches from two of /usr/bin/bash's functions
// (Debian strips it; the FDEs as readelf lists them) are two lines
// "func@0x<start>", not one "[/usr/bin/bash]".
TEST(ReportTest, AStrippedProgramsCodeIsReportedByFunction) {
  const std::string bash = "/usr/bin/bash";
  // Its executable segment, placed as a loader would.
  const uint64_t base = uint64_t{0x555500000000};
  uint64_t lo = 0, hi = 0;
  const std::optional<Mapping> text = testing::TextMapping(bash, base, &lo, &hi);
  ASSERT_TRUE(text.has_value());
  // Two FDEs from the middle of readelf's list (past the PLT's).
  const std::vector<std::pair<uint64_t, uint64_t>> fdes = testing::ReadelfFdes(bash);
  ASSERT_GT(fdes.size(), 100u);
  // bash exports many of its functions (.dynsym): two that no symbol names,
  // long enough for the addresses used below.
  Symbolizer sym({*text});
  std::vector<uint64_t> unnamed;
  for (size_t i = fdes.size() / 2; i < fdes.size() && unnamed.size() < 2; ++i) {
    const auto [a, b] = fdes[i];
    if (a >= lo && b <= hi && b - a >= 4 && sym.Symbolize(base + a + 1)[0] == '[')
      unnamed.push_back(a);
  }
  ASSERT_EQ(unnamed.size(), 2u);
  const uint64_t f1 = unnamed[0], f2 = unnamed[1];
  const std::string path = TempPath("stripped.trace");
  auto w = TraceWriter::Create(path, {});
  ASSERT_TRUE(w.ok());
  std::vector<pfm_record> recs;
  for (uint64_t i = 0; i < 30; ++i) recs.push_back(Branch(base + f1 + i % 3, base + f2, i));
  for (uint64_t i = 0; i < 20; ++i) recs.push_back(Branch(base + f2 + 1, base + f1, 30 + i));
  ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  ProcessMaps maps{1, 42, {*text}};
  ASSERT_TRUE(w->AppendMaps(maps).ok());
  ASSERT_TRUE(w->Finish({}).ok());
  absl::StatusOr<TraceReport> rep = BuildReport(path, Limit(1));
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->hot.size(), 2u);
  char want1[64], want2[64];
  std::snprintf(want1, sizeof(want1), "func@0x%llx", static_cast<unsigned long long>(f1));
  std::snprintf(want2, sizeof(want2), "func@0x%llx", static_cast<unsigned long long>(f2));
  EXPECT_EQ(rep->hot[0].function, want1);
  EXPECT_EQ(rep->hot[0].branches, 30u);
  EXPECT_EQ(rep->hot[0].dso, "bash");
  EXPECT_EQ(rep->hot[1].function, want2);
  EXPECT_EQ(rep->hot[1].branches, 20u);
  // The records themselves keep their file offsets (as perf script's
  // addresses): the last one is "[/usr/bin/bash+0x...]".
  ASSERT_EQ(rep->last_branches.size(), 1u);
  EXPECT_EQ(rep->last_branches[0].from_sym.rfind("[/usr/bin/bash+0x", 0), 0u)
      << rep->last_branches[0].from_sym;
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

// The ring writes a LOST record only before the next record it stores: a
// loss at the end of a session is in the trailer's count alone (the ring's
// total, of which the LOST records are parts).
TEST(ReportTest, TrailerLossWithoutALostRecordIsReported) {
  const std::string path = TempPath("trailer_lost.trace");
  {
    auto w = TraceWriter::Create(path, {});
    ASSERT_TRUE(w.ok()) << w.status();
    const std::vector<pfm_record> recs = {Branch(0x10, 0x20, 1), Branch(0x10, 0x30, 2),
                                          Branch(0x40, 0x50, 3)};
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
    ASSERT_TRUE(w->Finish({{"records", 3}, {"lost", 5}}).ok());
  }
  absl::StatusOr<TraceReport> rep = BuildReport(path, Limit(20));
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->lost, 5u);
  EXPECT_EQ(rep->lost_in_records, 0u);
  std::ostringstream text;
  RenderReportText(*rep, text);
  EXPECT_NE(text.str().find("lost: 5 records (5 not marked by a LOST record"), std::string::npos)
      << text.str();
  json::object j = RenderReportJson(*rep);
  EXPECT_EQ(j.at("summary").at("lost").as_uint64(), 5u);
  EXPECT_EQ(j.at("summary").at("lost_in_records").as_uint64(), 0u);

  // LOST records (7) are parts of the trailer's total (9): 9, not 16.
  const std::string both = WriteTrace("trailer_lost_both.trace", {{"lost", 9}});
  rep = BuildReport(both, Limit(20));
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->lost, 9u);
  EXPECT_EQ(rep->lost_in_records, 7u);
  // A trailer that says less (or nothing, or not a number) leaves the records' sum.
  for (const json::value& v : {json::value(3), json::value("many"), json::value(-4)}) {
    const std::string less = WriteTrace("trailer_lost_less.trace", {{"lost", v}});
    rep = BuildReport(less, Limit(20));
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(rep->lost, 7u) << json::serialize(v);
  }

  // A history ring's snapshot: what was overwritten is not lost, and said apart.
  const std::string history = WriteTrace("trailer_overwritten.trace",
                                         {{"lost", 0}, {"overwritten", 1000}});
  rep = BuildReport(history, Limit(20));
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->lost, 7u);
  EXPECT_EQ(rep->overwritten, 1000u);
  text.str("");
  RenderReportText(*rep, text);
  EXPECT_NE(text.str().find("overwritten: 1000 records"), std::string::npos) << text.str();
  j = RenderReportJson(*rep);
  EXPECT_EQ(j.at("summary").at("overwritten").as_uint64(), 1000u);
}

size_t OpenFds() {
  size_t n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

std::string SelfExe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

pfm_record BranchOf(uint32_t pid, uint64_t from, uint64_t to, uint64_t time) {
  pfm_record r = Branch(from, to, time);
  r.pid = r.tid = pid;
  return r;
}

// A trace of many processes (a build: one MAPS block per process) maps the
// same files in every block: each file is opened once, not once per block
// (libdwfl keeps an fd per module), and a record finds its block without a
// walk over all of them.
TEST(ReportTest, ManyMapsBlocksShareTheirFilesAndNameEveryRecord) {
  absl::StatusOr<std::vector<Mapping>> self = ReadProcMaps(0);
  ASSERT_TRUE(self.ok()) << self.status();
  const uint64_t fn = reinterpret_cast<uint64_t>(&PfmReportTestTarget);
  constexpr uint32_t kBlocks = 300, kFirstPid = 5000;
  const std::string path = TempPath("many_blocks.trace");
  {
    auto w = TraceWriter::Create(path, {});
    ASSERT_TRUE(w.ok());
    for (uint32_t i = 0; i < kBlocks; ++i)
      ASSERT_TRUE(w->AppendMaps(ProcessMaps{10 + i, static_cast<int32_t>(kFirstPid + i), *self})
                      .ok());
    std::vector<pfm_record> recs;
    for (uint32_t i = 0; i < kBlocks; ++i) recs.push_back(BranchOf(kFirstPid + i, fn + 1, fn, 1000 + i));
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
    ASSERT_TRUE(w->Finish({}).ok());
  }
  const size_t before = OpenFds();
  size_t most = 0, records = 0;
  std::string last_from;
  ReportOptions o;
  o.limit = 1;
  o.each_record = [&](const ReportRecord& r) {
    most = std::max(most, OpenFds());
    last_from = r.from_sym;
    ++records;
    return absl::OkStatus();
  };
  absl::StatusOr<TraceReport> rep = BuildReport(path, o);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(records, kBlocks);
  EXPECT_EQ(last_from, "PfmReportTestTarget+0x1");
  ASSERT_EQ(rep->hot.size(), 1u);
  EXPECT_EQ(rep->hot[0].function, "PfmReportTestTarget");
  EXPECT_EQ(rep->hot[0].branches, kBlocks);
  // One fd for the test binary (and the trace's), not one per block.
  EXPECT_LT(most, before + 10) << "fds before " << before;
  EXPECT_LE(OpenFds(), before);
}

// Of a pid's blocks, the last taken at or before the record's time, else its
// first; a pid without blocks: the first block of any pid at or after the
// time, else the last.
TEST(ReportTest, MapsAtIsThePidsLastBlockAtOrBeforeTheTime) {
  auto block = [](uint64_t time, int32_t pid, const char* path) {
    return ProcessMaps{time, pid, {Mapping{0x1000, 0x2000, 0, path}}};
  };
  const std::vector<ProcessMaps> maps = {block(10, 7, "/a"), block(15, 8, "/b"),
                                         block(20, 7, "/c"), ProcessMaps{25, 7, {}},
                                         block(30, 7, "/d"), block(30, 7, "/e")};
  TraceSymbols s(maps);
  ASSERT_EQ(s.spaces(), 5u);  // the empty block hides nothing
  auto path_at = [&](uint64_t time, uint32_t pid) {
    return s.Lookup(s.MapsAt(time, pid), 0x1000).name;
  };
  EXPECT_EQ(path_at(5, 7), "[/a+0x0]");   // before them all: its first
  EXPECT_EQ(path_at(10, 7), "[/a+0x0]");
  EXPECT_EQ(path_at(19, 7), "[/a+0x0]");
  EXPECT_EQ(path_at(26, 7), "[/c+0x0]");
  EXPECT_EQ(path_at(30, 7), "[/e+0x0]");  // a tie: the later in the file
  EXPECT_EQ(path_at(99, 7), "[/e+0x0]");
  EXPECT_EQ(path_at(1, 8), "[/b+0x0]");
  EXPECT_EQ(path_at(99, 8), "[/b+0x0]");
  EXPECT_EQ(path_at(12, 9), "[/b+0x0]");  // no blocks of its own
  EXPECT_EQ(path_at(15, 0), "[/b+0x0]");
  EXPECT_EQ(path_at(31, 9), "[/e+0x0]");
  EXPECT_EQ(TraceSymbols({}).MapsAt(5, 7), -1);
  EXPECT_EQ(TraceSymbols({block(50, 3, "/x")}).MapsAt(5, 7), 0);
}

// Equal counts of one function name in two libraries (a static function in
// two programs) come out in one order, every time.
TEST(ReportTest, TiesOfCountAndFunctionAreOrderedByLibrary) {
  absl::StatusOr<std::vector<Mapping>> self = ReadProcMaps(0);
  ASSERT_TRUE(self.ok()) << self.status();
  const std::string exe = SelfExe();
  ASSERT_FALSE(exe.empty());
  // The test binary under two names, each the program of one process.
  std::vector<Mapping> as[2] = {*self, *self};
  const char* names[2] = {"tie_copy_a", "tie_copy_b"};
  for (int i = 0; i < 2; ++i) {
    const std::string copy = TempPath(names[i]);
    std::ifstream in(exe, std::ios::binary);
    std::ofstream(copy, std::ios::binary | std::ios::trunc) << in.rdbuf();
    for (Mapping& m : as[i])
      if (m.path == exe) m.path = copy;
  }
  const uint64_t fn = reinterpret_cast<uint64_t>(&PfmReportTestTarget);
  const std::string path = TempPath("ties.trace");
  {
    auto w = TraceWriter::Create(path, {});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->AppendMaps(ProcessMaps{1, 100, as[0]}).ok());
    ASSERT_TRUE(w->AppendMaps(ProcessMaps{1, 200, as[1]}).ok());
    const std::vector<pfm_record> recs = {BranchOf(100, fn, fn, 5), BranchOf(200, fn, fn, 6),
                                          BranchOf(100, fn, fn, 7), BranchOf(200, fn, fn, 8)};
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
    ASSERT_TRUE(w->Finish({}).ok());
  }
  absl::StatusOr<TraceReport> rep = BuildReport(path, Limit(0));
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->hot.size(), 2u);
  EXPECT_EQ(rep->hot[0].function, "PfmReportTestTarget");
  EXPECT_EQ(rep->hot[1].function, "PfmReportTestTarget");
  // As names: the greater first.
  EXPECT_EQ(rep->hot[0].dso, "tie_copy_b");
  EXPECT_EQ(rep->hot[1].dso, "tie_copy_a");
}

TEST(ReportTest, MissingFileIsNotFound) {
  EXPECT_EQ(BuildReport(TempPath("nonexistent.trace"), Limit(20)).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pfm
