#include "userspace/pfmctl/script.h"

#include <limits.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "pfm/trace_file.h"
#include "userspace/pfmctl/trace_commands.h"

// Fault injection: while g_fail_path names a file, a read() from it of at
// least 4096 bytes starting at byte g_fail_at (where a block's records
// start) fails with EIO, as a disk error in the middle of the file would,
// once g_fail_skip such reads went through (0 for script and report, whose
// first pass, for the MAPS blocks, skips compact blocks unread). This
// binary's read() stands in for libc's (it comes first in the symbol
// lookup); the rest goes to the system call unchanged.
const char* g_fail_path = nullptr;
off_t g_fail_at = 0;
int g_fail_skip = 0;

extern "C" ssize_t PfmScriptTestRead(int fd, void* buf, size_t n) __asm__("read");
extern "C" ssize_t PfmScriptTestRead(int fd, void* buf, size_t n) {
  if (g_fail_path != nullptr && n >= 4096) {
    char proc[64], target[4096];
    std::snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    const ssize_t len = ::readlink(proc, target, sizeof(target) - 1);
    if (len > 0 && static_cast<size_t>(len) == std::strlen(g_fail_path) &&
        std::memcmp(target, g_fail_path, static_cast<size_t>(len)) == 0 &&
        ::lseek(fd, 0, SEEK_CUR) == g_fail_at && g_fail_skip-- <= 0) {
      errno = EIO;
      return -1;
    }
  }
  return ::syscall(SYS_read, fd, buf, n);
}

namespace pfm {
namespace {

namespace json = boost::json;

std::string TempPath(const char* name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}

pfm_record Rec(uint16_t type, uint64_t time) {
  pfm_record r{};
  r.type = type;
  r.time = time;
  r.cpu = 3;
  r.pid = 42;
  r.tid = 43;
  return r;
}

std::string Line(const ReportRecord& r) {
  std::string s;
  AppendScriptLine(r, &s);
  return s;
}

TEST(ScriptTest, LinesShowTimeCpuTaskTypeAndFields) {
  pfm_record b = Rec(PFM_REC_BRANCH, 12'000'000'345);
  b.u.branch.from = 0x401000;
  b.u.branch.to = 0x7f0010;
  EXPECT_EQ(Line({b, "main+0x10", "", ""}),
            "12.000000345 [003] 42/43 branch: 401000 main+0x10 => 7f0010 [unknown]\n");
  pfm_record sw = Rec(PFM_REC_SWITCH_OUT, 5);
  sw.misc = PFM_MISC_SWITCH_PREEMPT;
  sw.u.sw.other_pid = 7;
  sw.u.sw.other_tid = 8;
  EXPECT_EQ(Line({sw, "", "", ""}), "0.000000005 [003] 42/43 switch_out: -> 7/8 preempted\n");
  pfm_record lost = Rec(PFM_REC_LOST, 0);
  lost.u.lost.count = 17;
  EXPECT_EQ(Line({lost, "", "", ""}), "0.000000000 [003] 42/43 lost: 17 records lost\n");
  pfm_record exit = Rec(PFM_REC_EXIT, 0);
  exit.u.exit.status = 3 << 8;
  EXPECT_EQ(Line({exit, "", "", ""}), "0.000000000 [003] 42/43 exit: status 768 (exit 3)\n");
  EXPECT_EQ(Line({Rec(PFM_REC_THROTTLE, 0), "", "", ""}), "0.000000000 [003] 42/43 throttle:\n");
  EXPECT_EQ(Line({Rec(99, 0), "", "", ""}), "0.000000000 [003] 42/43 type_99:\n");
}

std::string WriteTrace(const char* name, bool finish) {
  const std::string path = TempPath(name);
  auto w = TraceWriter::Create(path, {{"command", "prog"}});
  EXPECT_TRUE(w.ok()) << w.status();
  std::vector<pfm_record> recs;
  for (uint64_t i = 0; i < 5000; ++i) {
    pfm_record r = Rec(PFM_REC_BRANCH, i);
    r.u.branch.from = 0x1000 + i % 16;
    r.u.branch.to = 0x2000;
    recs.push_back(r);
  }
  recs.push_back(Rec(PFM_REC_EXIT, 5001));
  EXPECT_TRUE(w->Append(recs.data(), recs.size()).ok());
  EXPECT_TRUE(w->AppendMaps(ProcessMaps{1, 42, {Mapping{0x1000, 0x3000, 0, "/nonexistent/p"}}})
                  .ok());
  if (finish) {
    EXPECT_TRUE(w->Finish({}).ok());
  }
  return path;
}

struct ScriptRun {
  absl::StatusOr<int> rc;
  std::string out, err;
};

ScriptRun Script(const std::vector<std::string>& args, bool json) {
  std::ostringstream out, err;
  CliContext ctx;
  ctx.json = json;
  ctx.out = &out;
  ctx.err = &err;
  CommandArgs a = {"script"};
  a.insert(a.end(), args.begin(), args.end());
  ScriptRun r{ScriptCommand(ctx, a), "", ""};
  r.out = out.str();
  r.err = err.str();
  return r;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(ScriptTest, PrintsEveryRecordNamedWithTheTracesMaps) {
  const std::string path = WriteTrace("script.trace", true);
  ScriptRun r = Script({path}, false);
  ASSERT_TRUE(r.rc.ok()) << r.rc.status();
  EXPECT_EQ(*r.rc, 0);
  EXPECT_EQ(Count(r.out, "\n"), 5001u);
  EXPECT_EQ(Count(r.out, " branch: "), 5000u);
  // The MAPS block comes after the records: read first, by the pre-pass.
  EXPECT_NE(r.out.find("1000 [/nonexistent/p+0x0] => 2000 [/nonexistent/p+0x1000]\n"),
            std::string::npos)
      << r.out.substr(0, 200);
  const std::string last = "0.000005001 [003] 42/43 exit: status 0 (exit 0)\n";
  ASSERT_GE(r.out.size(), last.size());
  EXPECT_EQ(r.out.substr(r.out.size() - last.size()), last);

  ScriptRun j = Script({path}, true);
  ASSERT_TRUE(j.rc.ok()) << j.rc.status();
  const json::value doc = json::parse(j.out);
  EXPECT_EQ(doc.at("records").as_array().size(), 5001u);
  EXPECT_EQ(doc.at("records").at(0).at("from_sym").as_string(), "[/nonexistent/p+0x0]");
  EXPECT_TRUE(doc.at("complete").as_bool());
  EXPECT_EQ(doc.at("trace").as_string(), path);
}

TEST(ScriptTest, CutTraceIsPrintedAsFarAsItReadsThenDataLoss) {
  const std::string path = WriteTrace("script_cut.trace", false);
  ScriptRun r = Script({path}, false);
  ASSERT_FALSE(r.rc.ok());
  EXPECT_EQ(r.rc.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.rc.status().message().find("no trailer"), std::string::npos) << r.rc.status();
  EXPECT_NE(r.rc.status().message().find("printed 5001 records"), std::string::npos);
  EXPECT_EQ(Count(r.out, "\n"), 5001u);
  ScriptRun j = Script({path}, true);
  ASSERT_FALSE(j.rc.ok());
  const json::value doc = json::parse(j.out);  // still one whole document
  EXPECT_FALSE(doc.at("complete").as_bool());
}

// Ten RECORDS blocks of 1000 branches (compact, each over 4096 bytes: the
// branches jump far); *real is the file's real path (what /proc/self/fd
// shows, for the fault injection).
std::string WriteBlocks(const char* name, std::string* real) {
  const std::string path = TempPath(name);
  auto w = TraceWriter::Create(path, {{"command", "prog"}});
  EXPECT_TRUE(w.ok()) << w.status();
  for (uint64_t block = 0; block < 10; ++block) {
    std::vector<pfm_record> recs;
    for (uint64_t i = 0; i < 1000; ++i) {
      pfm_record r = Rec(PFM_REC_BRANCH, block * 1000 + i);
      r.u.branch.from = 0x1000 + (i * 7919 % 100000) * 16;
      r.u.branch.to = 0x2000 + (i * 104729 % 100000) * 16;
      recs.push_back(r);
    }
    EXPECT_TRUE(w->Append(recs.data(), recs.size()).ok());
  }
  EXPECT_TRUE(w->Finish({}).ok());
  char buf[PATH_MAX];
  *real = ::realpath(path.c_str(), buf) != nullptr ? buf : path;
  return path;
}

// Where the records of the sixth RECORDS block of `path` start (after its
// block header and compact prefix): reads of them (over 4096 bytes) fail,
// after five blocks of records went out.
off_t SixthRecordsBlock(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string d((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int seen = 0;
  for (size_t at = 12; at + 8 <= d.size();) {
    uint32_t kind, len;
    std::memcpy(&kind, d.data() + at, 4);
    std::memcpy(&len, d.data() + at + 4, 4);
    if ((kind == 2 || kind == 6) && ++seen == 6) {
      EXPECT_EQ(kind, 6u);
      EXPECT_GE(len, 4096u + 8);
      return static_cast<off_t>(at + 16);
    }
    at += 8 + len;
  }
  ADD_FAILURE() << "no sixth RECORDS block in " << path;
  return 0;
}

// A read error in the middle of the file, after records went out: the
// text keeps the lines printed (as perf script), the JSON document is closed
// with an "error" member, so stdout still holds one parseable document.
TEST(ScriptTest, ReadErrorMidFileClosesTheJsonDocumentWithTheError) {
  std::string real;
  const std::string path = WriteBlocks("script_eio.trace", &real);
  g_fail_at = SixthRecordsBlock(path);
  g_fail_path = real.c_str();
  g_fail_skip = 0;
  ScriptRun j = Script({path}, true);
  g_fail_skip = 0;
  ScriptRun t = Script({path}, false);
  g_fail_path = nullptr;

  ASSERT_FALSE(j.rc.ok());
  EXPECT_EQ(j.rc.status().code(), absl::StatusCode::kInvalidArgument) << j.rc.status();
  boost::system::error_code ec;
  const json::value doc = json::parse(j.out, ec);
  ASSERT_FALSE(ec) << "not one JSON document: ..." << j.out.substr(j.out.size() - 200);
  EXPECT_EQ(doc.at("records").as_array().size(), 5000u);
  EXPECT_EQ(doc.at("error").at("code").as_string(), "INVALID_ARGUMENT");
  EXPECT_NE(std::string(doc.at("error").at("message").as_string()).find("cannot read"),
            std::string::npos)
      << json::serialize(doc.at("error"));
  EXPECT_FALSE(doc.as_object().contains("complete"));

  ASSERT_FALSE(t.rc.ok());
  EXPECT_EQ(t.rc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Count(t.out, " branch: "), 5000u);
  EXPECT_EQ(Count(t.out, "\n"), 5000u);
}

// `report --records` streams the same way: a read error after records
// went out closes the JSON document with "error" (no summary), and the
// text keeps the lines printed.
TEST(ScriptTest, ReportRecordsReadErrorMidFileClosesTheJsonDocumentWithTheError) {
  std::string real;
  const std::string path = WriteBlocks("report_eio.trace", &real);
  auto report = [&](bool json) {
    std::ostringstream out, err;
    CliContext ctx;
    ctx.json = json;
    ctx.out = &out;
    ctx.err = &err;
    g_fail_at = SixthRecordsBlock(path);
    g_fail_path = real.c_str();
    g_fail_skip = 0;
    ScriptRun r{ReportCommand(ctx, {"report", "--records", path}), "", ""};
    g_fail_path = nullptr;
    r.out = out.str();
    r.err = err.str();
    return r;
  };
  ScriptRun j = report(true);
  ASSERT_FALSE(j.rc.ok());
  EXPECT_EQ(j.rc.status().code(), absl::StatusCode::kInvalidArgument) << j.rc.status();
  boost::system::error_code ec;
  const json::value doc = json::parse(j.out, ec);
  ASSERT_FALSE(ec) << "not one JSON document: ..." << j.out.substr(j.out.size() - 200);
  EXPECT_EQ(doc.at("records").as_array().size(), 5000u);
  EXPECT_EQ(doc.at("error").at("code").as_string(), "INVALID_ARGUMENT");
  EXPECT_FALSE(doc.as_object().contains("summary"));

  ScriptRun t = report(false);
  ASSERT_FALSE(t.rc.ok());
  EXPECT_EQ(Count(t.out, " branch: "), 5000u);
  EXPECT_EQ(t.out.find("branches by source function"), std::string::npos);

  // Unharmed, the same file: the records, then the summary in one object.
  std::ostringstream out;
  CliContext ctx;
  ctx.json = true;
  ctx.out = &out;
  ASSERT_TRUE(ReportCommand(ctx, {"report", "--records", path}).ok());
  const json::value whole = json::parse(out.str());
  EXPECT_EQ(whole.at("records").as_array().size(), 10000u);
  EXPECT_EQ(whole.at("summary").at("records").to_number<uint64_t>(), 10000u);
  EXPECT_FALSE(whole.as_object().contains("error"));
}

TEST(ScriptTest, NotATraceIsRefusedWithNothingOnStdout) {
  const std::string path = TempPath("script_not.trace");
  std::ofstream(path) << "PFMTRACE but not really";
  for (bool json : {false, true}) {
    ScriptRun r = Script({path}, json);
    ASSERT_FALSE(r.rc.ok());
    EXPECT_EQ(r.rc.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.out, "");
  }
  ScriptRun usage = Script({}, false);
  EXPECT_EQ(usage.rc.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pfm
