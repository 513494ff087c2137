// End to end, issue 17: `pfmctl script`, the streamed `report` and the
// progress line of `record`, on a real recording of /bin/true (soft BTS on
// this machine's host driver: needs root, skips otherwise).
#include <unistd.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Contains;
using testing::Num;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class ScriptE2e : public testing::DaemonTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: ptrace for soft BTS";
    ASSERT_NO_FATAL_FAILURE(StartDaemon({"--driver", "host"}));
    dir_ = testing::MakeTempDir("script");
  }

  // pfmctl with `env` added (testing::Pfmctl takes none).
  testing::Result Pfmctl(std::vector<std::string> args,
                         const std::map<std::string, std::string>& env = {}) {
    args.insert(args.begin(), {testing::PfmctlPath(), "--socket", socket()});
    return testing::Run(args, env, 120);
  }

  // Records /bin/true into dir_/NAME once per test.
  std::string RecordTrue(const std::string& name,
                         const std::map<std::string, std::string>& env = {},
                         testing::Result* result = nullptr) {
    const std::string file = dir_ + "/" + name;
    testing::Result r = Pfmctl({"record", "-o", file, "--", "/bin/true"}, env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (result != nullptr) *result = r;
    return file;
  }

  std::string dir_;
};

TEST_F(ScriptE2e, ScriptPrintsEveryRecordOnALineWithNames) {
  const std::string file = RecordTrue("true.pfmtrace");
  const json::value rep = json::parse(Pfmctl({"--json", "report", file}).out);
  const uint64_t records = Num(rep.at("summary").at("records"));
  const uint64_t branches = Num(rep.at("summary").at("by_type").at("branch"));
  ASSERT_GT(branches, 2000u);

  testing::Result s = Pfmctl({"script", file});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const std::vector<std::string> lines = Lines(s.out);
  ASSERT_EQ(lines.size(), records);
  uint64_t branch_lines = 0, named = 0, in_ld = 0;
  for (const std::string& line : lines) {
    // "SECONDS.NANOSECONDS [CPU] PID/TID TYPE: ..."
    const size_t dot = line.find('.');
    ASSERT_NE(dot, std::string::npos) << line;
    ASSERT_GT(line.size(), dot + 11) << line;
    EXPECT_EQ(line.substr(dot + 10, 2), " [") << line;
    if (!Contains(line, " branch: ")) continue;
    ++branch_lines;
    ASSERT_TRUE(Contains(line, " => ")) << line;
    // "from sym+off => to sym+off", names from the trace's MAPS block.
    const std::string from = line.substr(line.find(" branch: ") + 9);
    if (!Contains(from.substr(0, from.find(" => ")), "[unknown]")) ++named;
    if (Contains(line, " _dl_")) ++in_ld;
  }
  EXPECT_EQ(branch_lines, branches);
  EXPECT_GT(named, branches * 9 / 10);
  EXPECT_GT(in_ld, 100u);

  // --json: one document, the records streamed into it.
  testing::Result j = Pfmctl({"--json", "script", file});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json::value doc = json::parse(j.out);
  EXPECT_EQ(doc.at("records").as_array().size(), records);
  EXPECT_TRUE(doc.at("complete").as_bool());
}

TEST_F(ScriptE2e, ReportJsonIsASummaryAndRecordsOptIntoEveryRecord) {
  const std::string file = RecordTrue("true.pfmtrace");
  const json::value rep = json::parse(Pfmctl({"--json", "report", file}).out);
  const uint64_t records = Num(rep.at("summary").at("records"));
  ASSERT_GT(records, 2000u);
  // The summary: the newest 20 records and branches, not all of them.
  EXPECT_EQ(rep.at("records").as_array().size(), 20u);
  EXPECT_EQ(rep.at("last_branches").as_array().size(), 20u);
  const json::array& hot = rep.at("hot_functions").as_array();
  ASSERT_FALSE(hot.empty());
  double percent = 0;
  bool ld = false;
  for (const json::value& h : hot) {
    percent += h.at("percent").as_double();
    if (Contains(testing::Str(h.at("dso")), "ld-linux")) ld = true;
  }
  EXPECT_GT(percent, 50.0);
  EXPECT_LE(percent, 100.0 + 1e-6);
  EXPECT_TRUE(ld) << json::serialize(hot);

  const json::value all = json::parse(Pfmctl({"--json", "report", "--records", file}).out);
  EXPECT_EQ(all.at("records").as_array().size(), records);
  EXPECT_EQ(Num(all.at("summary").at("records")), records);

  testing::Result text = Pfmctl({"report", file});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(Contains(text.out, "branches by source function:")) << text.out;
  EXPECT_TRUE(Contains(text.out, "%  _dl_")) << text.out;
  EXPECT_TRUE(Contains(text.out, "ld-linux")) << text.out;
  testing::Result every = Pfmctl({"report", "--records", file});
  EXPECT_EQ(testing::CountOf(every.out, " branch: "),
            Num(rep.at("summary").at("by_type").at("branch")));
}

// A binary replaced since the recording: export says so on stderr in the
// text form, one "pfmctl: warning:" line per file (as perf does), and only
// in "detail" with --json (stderr stays empty).
TEST_F(ScriptE2e, ExportWarnsOnStderrWhenABinaryChangedSinceTheRecording) {
  const std::string copy = dir_ + "/true_copy";
  ASSERT_EQ(testing::Run({"/bin/cp", "/bin/true", copy}).exit_code, 0);
  const std::string file = dir_ + "/copy.pfmtrace";
  testing::Result rec = Pfmctl({"record", "-o", file, "--", copy});
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  testing::Result same = Pfmctl({"export", file, "-o", dir_ + "/same.data"});
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(same.err, "");
  ASSERT_EQ(testing::Run({"/bin/cp", "/bin/false", copy}).exit_code, 0);

  testing::Result text = Pfmctl({"export", file, "-o", dir_ + "/changed.data"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(Contains(text.out, " exported to " + dir_ + "/changed.data (perf)\n")) << text.out;
  const std::vector<std::string> lines = Lines(text.err);
  ASSERT_EQ(lines.size(), 1u) << text.err;
  EXPECT_TRUE(testing::StartsWith(lines[0], "pfmctl: warning: " + copy + ": build-id "))
      << lines[0];
  EXPECT_TRUE(Contains(lines[0], " now (the file changed since the recording)")) << lines[0];

  testing::Result j = Pfmctl({"--json", "export", file, "-o", dir_ + "/changed.data"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(j.err, "");
  const json::value doc = json::parse(j.out);
  ASSERT_EQ(doc.at("detail").at("warnings").as_array().size(), 1u) << j.out;
  EXPECT_EQ("pfmctl: warning: " + testing::Str(doc.at("detail").at("warnings").at(0)), lines[0]);
}

// The progress line: forced on ($PFMCTL_PROGRESS=1) it is drawn in place and
// erased before the final message; in a run whose stderr is not a terminal
// (this test's pipes) there is none.
TEST_F(ScriptE2e, RecordShowsProgressOnlyWhenStderrIsATerminalOrForced) {
  testing::Result forced;
  RecordTrue("forced.pfmtrace", {{"PFMCTL_PROGRESS", "1"}}, &forced);
  EXPECT_TRUE(Contains(forced.err, "\r\033[Kpfmctl: ")) << forced.err;
  EXPECT_TRUE(Contains(forced.err, "  steps ")) << forced.err;
  EXPECT_TRUE(Contains(forced.err, "  branches ")) << forced.err;
  // Erased, then the final message on a line of its own.
  EXPECT_TRUE(Contains(forced.err, "\r\033[Kpfmctl: recorded ")) << forced.err;

  for (const char* env : {"", "0"}) {
    testing::Result plain;
    std::map<std::string, std::string> e;
    if (*env) e["PFMCTL_PROGRESS"] = env;
    RecordTrue("plain.pfmtrace", e, &plain);
    EXPECT_EQ(plain.err.find('\r'), std::string::npos) << plain.err;
    EXPECT_EQ(plain.err.find("\033["), std::string::npos) << plain.err;
    EXPECT_TRUE(testing::StartsWith(plain.err, "pfmctl: recorded ")) << plain.err;
  }
}

}  // namespace
}  // namespace pfm
