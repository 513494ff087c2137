// End to end: what pfmctl says to a user's flags (issue 17's "every flag and
// error right"), against the real pfmd on the simulated machine.
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "pfm/trace_file.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Contains;
using testing::Pfmctl;
using testing::PfmctlJson;

class CliE2e : public testing::DaemonTest {
 protected:
  void SetUp() override { StartSim({"--sim-cpus", "2", "--sim-paused"}); }
  testing::Result Create(std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"session", "create"});
    return Pfmctl(socket(), flags);
  }
  size_t Sessions() {
    return PfmctlJson(socket(), {"--json", "session", "list"}).as_array().size();
  }
};

TEST_F(CliE2e, UnknownFlagIsNamedBeforeTheSpecIsChecked) {
  testing::Result r = Create({"--pdi", "1", "--bts", "history"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "pfmctl: INVALID_ARGUMENT: session create: unknown flag '--pdi'\n");
  EXPECT_EQ(Sessions(), 0u);
}

TEST_F(CliE2e, BufferSizesThatMeanNothingOrTwoThingsAreRefused) {
  testing::Result r = Create({"--pid", "1000", "--bts", "lossless", "--buffer", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "--buffer 0: a buffer needs bytes")) << r.err;
  r = Create({"--pid", "1000", "--bts", "lossless", "--buffer", "2KB"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "'KB' is ambiguous (1000 or 1024?); use KiB")) << r.err;
  EXPECT_EQ(Sessions(), 0u);
  // The binary spellings work.
  r = Create({"--pid", "1000", "--bts", "lossless", "--buffer", "64KiB"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// perf's -t takes a list; pfmctl's takes one thread (docs/pfmctl.md): a
// list is a usage error that starts nothing, for record and stat alike.
TEST_F(CliE2e, DashTTakesOneThreadAndRefusesAList) {
  const std::string out = ::testing::TempDir() + "/dash_t.pfmtrace";
  for (std::vector<std::string> args :
       {std::vector<std::string>{"record", "-t", "101,102", "-o", out},
        std::vector<std::string>{"stat", "-t", "101,102"}}) {
    testing::Result r = Pfmctl(socket(), args);
    EXPECT_EQ(r.exit_code, 2) << args[0];
    EXPECT_EQ(r.err, "pfmctl: INVALID_ARGUMENT: -t '101,102': expected an integer in "
                     "1..1073741823\n")
        << args[0];
  }
  EXPECT_EQ(::access(out.c_str(), F_OK), -1) << "no trace file";
  EXPECT_EQ(Sessions(), 0u);
}

// perf's -e is --counter.
TEST_F(CliE2e, DashEIsACounter) {
  const json::value c = PfmctlJson(socket(), {"--json", "session", "create", "--pid", "1000",
                                              "-e", "cycles", "--counter", "instructions"});
  const json::value s = PfmctlJson(
      socket(), {"--json", "session", "show", std::to_string(testing::Num(c.at("id")))});
  const json::array& cs = s.at("counters").as_array();
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].at("event").as_string(), "instructions");
  EXPECT_EQ(cs[1].at("event").as_string(), "cycles");
}

TEST_F(CliE2e, HistoryDefaultsToTheDebuggerRoleLosslessToTheProfiler) {
  const json::value h =
      PfmctlJson(socket(), {"--json", "session", "create", "--pid", "1000", "--bts", "history"});
  const json::value l =
      PfmctlJson(socket(), {"--json", "session", "create", "--pid", "1000", "--bts", "lossless"});
  const json::value e = PfmctlJson(socket(), {"--json", "session", "create", "--pid", "1000",
                                              "--bts", "history", "--role", "profiler"});
  auto role = [&](const json::value& created) {
    const std::string id = std::to_string(testing::Num(created.at("id")));
    const json::value s = PfmctlJson(socket(), {"--json", "session", "show", id});
    return std::string(s.at("role").as_string());
  };
  EXPECT_EQ(role(h), "debugger");
  EXPECT_EQ(role(l), "profiler");
  EXPECT_EQ(role(e), "profiler");  // an explicit role wins
}

// A trace written over an existing one keeps the old as FILE.old, as perf
// record keeps perf.data.old: a second snapshot does not destroy the first.
TEST_F(CliE2e, AnOutputFileThatExistsIsKeptAsDotOld) {
  const std::string dir = testing::MakeTempDir("cli");
  const std::string file = dir + "/snap.trace";
  const uint64_t id = DaemonTest::Create({"--pid", "1001", "--bts", "history"});
  ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "2000000"}).exit_code, 0);
  ASSERT_EQ(Pfmctl(socket(), {"snapshot", std::to_string(id), "-o", file}).exit_code, 0);
  absl::StatusOr<Trace> first = ReadTrace(file, {});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_NE(::access((file + ".old").c_str(), F_OK), 0) << "nothing to keep the first time";
  ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "2000000"}).exit_code, 0);
  ASSERT_EQ(Pfmctl(socket(), {"snapshot", std::to_string(id), "-o", file}).exit_code, 0);
  absl::StatusOr<Trace> old = ReadTrace(file + ".old", {});
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(old->complete);
  ASSERT_EQ(old->records.size(), first->records.size());
  EXPECT_EQ(old->records.back().time, first->records.back().time);
  absl::StatusOr<Trace> second = ReadTrace(file, {});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(second->records.back().time, first->records.back().time);
  EXPECT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
}

// Whatever file report and export are given, the answer is one pfmctl:
// line and an exit status, never a signal or an uncaught exception.
TEST_F(CliE2e, ReportAndExportOfAnyFileAnswerWithOneErrorLine) {
  const std::string dir = testing::MakeTempDir("cli");
  const std::string empty = dir + "/empty", noise = dir + "/noise", cut = dir + "/cut";
  { std::ofstream(empty).flush(); }
  {
    std::ofstream f(noise, std::ios::binary);
    uint32_t x = 12345;
    for (int i = 0; i < 4096; ++i) {
      x = x * 1103515245u + 12345u;
      f.put(static_cast<char>(x >> 24));
    }
  }
  {
    // A real trace, cut inside its first block.
    const uint64_t id = DaemonTest::Create({"--pid", "1000", "--bts", "lossless"});
    ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "2000000"}).exit_code, 0);
    ASSERT_EQ(Pfmctl(socket(), {"sim", "exit", "1000"}).exit_code, 0);
    ASSERT_EQ(Pfmctl(socket(), {"stream", std::to_string(id), "-o", cut}).exit_code, 0);
    ASSERT_EQ(::truncate(cut.c_str(), 100), 0);
  }
  for (const std::string& in : {dir, empty, noise, cut, dir + "/missing", std::string("/dev/null")}) {
    for (const std::vector<std::string>& cmd :
         {std::vector<std::string>{"report", in}, {"report", "--json", in},
          {"export", in, "-o", dir + "/out.data"},
          {"export", in, "--format", "chrome-json", "-o", dir + "/out.json"}}) {
      testing::Result r = Pfmctl(socket(), cmd);
      SCOPED_TRACE(cmd[0] + " " + in);
      EXPECT_GT(r.exit_code, 0);
      EXPECT_LT(r.exit_code, 128) << "killed by a signal";
      EXPECT_TRUE(testing::StartsWith(r.err, "pfmctl: ")) << r.err;
      EXPECT_EQ(testing::CountOf(r.err, "\n"), 1u) << r.err;
    }
  }
}

// `report --json --records --timeline OUT.svg`: the records are streamed to
// stdout as they are read, so a --timeline that cannot be written must be
// found before the first of them: stdout is one JSON document or nothing.
TEST_F(CliE2e, ReportTimelineThatCannotBeWrittenLeavesStdoutEmpty) {
  const std::string dir = testing::MakeTempDir("cli_timeline");
  const std::string trace = dir + "/t.pfmtrace";
  const uint64_t id = DaemonTest::Create({"--pid", "1000", "--bts", "lossless"});
  ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "20000000"}).exit_code, 0);
  ASSERT_EQ(Pfmctl(socket(), {"sim", "exit", "1000"}).exit_code, 0);
  ASSERT_EQ(Pfmctl(socket(), {"stream", std::to_string(id), "-o", trace}).exit_code, 0);
  // More than one 64 KiB piece of JSON records.
  testing::Result all = Pfmctl(socket(), {"--json", "report", "--records", trace});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  ASSERT_GT(all.out.size(), 256u << 10);

  // A directory that does not exist; a device that takes no bytes.
  // (Cannot be created: a bad argument; cannot be written: UNAVAILABLE.)
  for (const auto& [svg, code] : {std::pair<std::string, std::string>{dir + "/no/such/dir.svg",
                                                                      "INVALID_ARGUMENT"},
                                  {"/dev/full", "UNAVAILABLE"}}) {
    for (bool json : {true, false}) {
      std::vector<std::string> args = {"report", "--records", trace, "--timeline", svg};
      if (json) args.insert(args.begin(), "--json");
      testing::Result r = Pfmctl(socket(), args);
      SCOPED_TRACE(svg + (json ? " --json" : ""));
      EXPECT_EQ(r.out, "");
      EXPECT_GT(r.exit_code, 0);
      EXPECT_TRUE(
          testing::StartsWith(r.err, "pfmctl: " + code + ": " + svg + ": cannot write the timeline"))
          << r.err;
      EXPECT_EQ(testing::CountOf(r.err, "\n"), 1u) << r.err;
    }
  }
  // A timeline of a file that is not a trace: the error, and no empty SVG
  // left behind.
  const std::string svg = dir + "/new.svg";
  testing::Result r = Pfmctl(socket(), {"report", dir + "/missing", "--timeline", svg});
  EXPECT_GT(r.exit_code, 0);
  EXPECT_TRUE(testing::StartsWith(r.err, "pfmctl: NOT_FOUND: ")) << r.err;
  EXPECT_NE(::access(svg.c_str(), F_OK), 0) << svg << " left behind";
  // And a good one is written, the records and summary on stdout as before.
  r = Pfmctl(socket(), {"--json", "report", "--records", trace, "--timeline", svg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::value doc = json::parse(r.out);
  EXPECT_EQ(doc.at("records").as_array().size(), testing::Num(doc.at("summary").at("records")));
  EXPECT_TRUE(testing::Contains(testing::ReadFile(svg), "<svg")) << svg;
}

// A breakpoint on a debug register that never fires is "armed, 0 hits", not
// a counter "counted" at 100%.
TEST_F(CliE2e, ABreakpointThatNeverFiresIsArmedWithZeroHits) {
  const json::value c = PfmctlJson(socket(), {"--json", "session", "create", "--pid", "1000",
                                              "--breakpoint", "0x10:1:x"});
  const std::string id = std::to_string(testing::Num(c.at("id")));
  ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "2000000"}).exit_code, 0);
  testing::Result r = Pfmctl(socket(), {"session", "show", id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "breakpoint 0x10:1:x armed, 0 hits, on hardware")) << r.out;
  const json::value s = PfmctlJson(socket(), {"--json", "session", "show", id});
  const json::object& bp = s.at("breakpoints").as_array().at(0).as_object();
  EXPECT_EQ(bp.at("state").as_string(), "armed");
  EXPECT_EQ(testing::Num(bp.at("value")), 0u);
}

}  // namespace
}  // namespace pfm
