#include "userspace/pfmctl/report.h"

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace pfm {
namespace {

namespace json = boost::json;

std::string TempPath(const char* name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}

pfm_record Branch(uint64_t from, uint64_t to) {
  pfm_record r{};
  r.type = PFM_REC_BRANCH;
  r.pid = r.tid = 42;
  r.u.branch.from = from;
  r.u.branch.to = to;
  return r;
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
  absl::StatusOr<TraceReport> rep = BuildReport(path, 2);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->by_type.at("branch"), 3u);
  EXPECT_EQ(rep->lost, 7u);
  ASSERT_EQ(rep->hot.size(), 2u);  // no maps: functions are addresses
  EXPECT_EQ(rep->hot[0].function, "0x10");
  EXPECT_EQ(rep->hot[0].branches, 2u);
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
  EXPECT_NE(text.str().find("\nlast 2 branches:\n"), std::string::npos);
  const json::object j = RenderReportJson(*rep);
  EXPECT_EQ(j.at("records").as_array().size(), 2u);
  EXPECT_TRUE(j.at("counters").as_array().empty());
  EXPECT_TRUE(j.at("maps").is_null());
}

TEST(ReportTest, SkipsMalformedTrailerEntriesInsteadOfThrowing) {
  const json::value trailer = json::parse(R"({
    "counters": [{"event": "e", "value": 5, "ratio": 0.5}, "junk",
                 {"event": "f", "ratio": "bad"}],
    "maps": [{"start": 16, "end": 32, "offset": 0, "path": "/x"}],
    "steps": {"odd": 1}})");
  const std::string path = WriteTrace("odd.trace", trailer.as_object());
  absl::StatusOr<TraceReport> rep = BuildReport(path, 20);
  ASSERT_TRUE(rep.ok()) << rep.status();
  // Maps in JSON (trace version 1's place for them) are not read.
  EXPECT_EQ(SymbolMaps(rep->trace), nullptr);
  EXPECT_EQ(rep->hot[0].function, "0x10");
  std::ostringstream text;
  RenderReportText(*rep, text);
  EXPECT_NE(text.str().find("  e                                       5  running 50.0%\n"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("running bad\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("soft-BTS steps: {\"odd\":1}\n"), std::string::npos);
  // --json passes the counters on as written.
  EXPECT_EQ(RenderReportJson(*rep).at("counters").as_array().size(), 3u);
}

TEST(ReportTest, SymbolizesWithTheLastMapsBlockThatHasMappings) {
  const std::string path = TempPath("maps.trace");
  auto w = TraceWriter::Create(path, {{"command", "prog"}});
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<pfm_record> recs = {Branch(0x1010, 0x1020), Branch(0x1010, 0x5000)};
  ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  ProcessMaps first{1, 42, {Mapping{0x1000, 0x2000, 0, "/nonexistent/first"}}};
  ProcessMaps last{2, 42, {Mapping{0x1000, 0x2000, 0x4000, "/nonexistent/last"}}};
  ASSERT_TRUE(w->AppendMaps(first).ok());
  ASSERT_TRUE(w->AppendMaps(last).ok());
  ASSERT_TRUE(w->AppendMaps(ProcessMaps{3, 42, {}}).ok());  // hides nothing
  ASSERT_TRUE(w->Finish({}).ok());
  absl::StatusOr<TraceReport> rep = BuildReport(path, 20);
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->trace.maps.size(), 3u);
  ASSERT_NE(SymbolMaps(rep->trace), nullptr);
  EXPECT_EQ(SymbolMaps(rep->trace)->time_ns, 2u);
  ASSERT_EQ(rep->last_branches.size(), 2u);
  // The file cannot be read: the path and the offset in the file.
  EXPECT_EQ(rep->last_branches[0].from_sym, "[/nonexistent/last+0x4010]");
  EXPECT_EQ(rep->last_branches[1].to_sym, "");  // unmapped
  ASSERT_EQ(rep->hot.size(), 1u);
  EXPECT_EQ(rep->hot[0].branches, 2u);
  // Symbol-less branches count for their file, brackets closed.
  EXPECT_EQ(rep->hot[0].function, "[/nonexistent/last]");
  const json::object j = RenderReportJson(*rep);
  EXPECT_EQ(json::serialize(j.at("maps")),
            R"({"pid":42,"time_ns":2,"mappings":[{"start":"0x1000","end":"0x2000",)"
            R"("offset":"0x4000","path":"/nonexistent/last","writable":false,"shared":false}]})");
}

TEST(ReportTest, MissingFileIsNotFound) {
  EXPECT_EQ(BuildReport(TempPath("nonexistent.trace"), 20).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pfm
