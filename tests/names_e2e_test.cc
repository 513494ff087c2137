// End to end, issue 17: names as input (`--breakpoint main`, `prog.c:42`,
// `write`, `sym+0x10`) resolved by the real pfmctl against the real target,
// and the build-ids a trace carries from record time. Runs the real pfmd
// (host driver) and pfmctl on libpfm-bts' names_prog (a PIE with debug
// info: its addresses are known only once it runs, and it prints them).
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernel/uapi/pfm_uapi.h"
#include "pfm/symbolizer.h"
#include "pfm/trace_file.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Contains;
using testing::Pfmctl;
using testing::PfmctlJson;

std::string RealPath(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) != nullptr ? buf : p;
}

std::string Prog() { return RealPath(testing::Runfile("libpfm-bts/names_prog")); }

// The line of names_prog.c that carries `marker` (a NAMES_LINE_* comment).
int MarkerLine(const std::string& marker) {
  std::ifstream in(testing::Runfile("libpfm-bts/testdata/names_prog.c"));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(marker) != std::string::npos && line.rfind("/*", 0) != 0) return n;
  return 0;
}

// "main=0x55..." lines the program printed -> addresses.
std::map<std::string, uint64_t> Printed(const std::string& text) {
  std::map<std::string, uint64_t> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, nl - at);
    at = nl + 1;
    const size_t eq = line.find("=0x");
    if (eq != std::string::npos && eq > 0)
      out[line.substr(0, eq)] = std::stoull(line.substr(eq + 1), nullptr, 16);
  }
  return out;
}

// "0x55d1c3a4f1b9:1:x (main)" -> 0x55d1c3a4f1b9.
uint64_t SpecAddr(const std::string& spec) { return std::stoull(spec, nullptr, 16); }

// The trailer's (or session show's) breakpoints by their name in
// parentheses: spec and value.
std::map<std::string, std::pair<std::string, uint64_t>> Breakpoints(const json::value& v) {
  std::map<std::string, std::pair<std::string, uint64_t>> out;
  if (!v.is_array()) return out;
  for (const json::value& b : v.as_array()) {
    const std::string spec = testing::Str(b.at("spec"));
    const size_t open = spec.find(" (");
    const std::string name =
        open == std::string::npos ? spec : spec.substr(open + 2, spec.size() - open - 3);
    out[name] = {spec, b.as_object().contains("value") ? testing::Num(b.at("value")) : 0};
  }
  return out;
}

// Branches of the trace in `file` whose source symbolizes to `fn` (or
// fn+0x...), with the trace's last MAPS block; the symbolizer's warnings in
// *warnings.
size_t BranchesFrom(const std::string& file, const std::string& fn,
                    std::vector<std::string>* warnings = nullptr) {
  absl::StatusOr<Trace> t = ReadTrace(file);
  if (!t.ok() || t->maps.empty()) {
    ADD_FAILURE() << file << ": " << (t.ok() ? "no MAPS block" : t.status().ToString());
    return 0;
  }
  Symbolizer sym(t->maps.back().mappings);
  size_t n = 0;
  for (const pfm_record& r : t->records) {
    if (r.type != PFM_REC_BRANCH) continue;
    const std::string s = sym.Symbolize(r.u.branch.from);
    if (s == fn || s.rfind(fn + "+", 0) == 0) ++n;
  }
  if (warnings != nullptr) *warnings = sym.warnings();
  return n;
}

class NamesE2e : public testing::DaemonTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: ptrace and perf_event_open on any process";
    ASSERT_NO_FATAL_FAILURE(StartDaemon({"--driver", "host"}));
    dir_ = testing::MakeTempDir("names");
  }
  size_t Sessions() {
    return PfmctlJson(socket(), {"--json", "session", "list"}).as_array().size();
  }
  std::string dir_;
};

// The program is launched stopped: its PIE load address exists only after
// the exec, where pfmctl resolves `main`; the hardware breakpoint counts the
// one call of main and the five of twice().
TEST_F(NamesE2e, RecordResolvesNamesInTheLaunchedProgramAfterItsExec) {
  const std::string file = dir_ + "/main.trace";
  const int loop_line = MarkerLine("NAMES_LINE_LOOP");
  ASSERT_GT(loop_line, 0);
  const std::string loop_name = "names_prog.c:" + std::to_string(loop_line);
  testing::Result r = Pfmctl(socket(), {"--json", "record", "--breakpoint", "main",
                                        "--breakpoint", "twice", "--breakpoint",
                                        loop_name,
                                        "--breakpoint", "pfm_names_work+4", "-o", file, "--",
                                        Prog()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // With --json the program's stdout is on stderr.
  const std::map<std::string, uint64_t> printed = Printed(r.err);
  ASSERT_EQ(printed.count("main"), 1u) << r.err;
  const json::value trailer = json::parse(r.out);
  const auto bps = Breakpoints(trailer.at("breakpoints"));
  ASSERT_EQ(bps.size(), 4u) << r.out;
  EXPECT_EQ(SpecAddr(bps.at("main").first), printed.at("main")) << bps.at("main").first;
  EXPECT_EQ(bps.at("main").first.substr(bps.at("main").first.find(':')), ":1:x (main)");
  // The line and the offset land inside pfm_names_work, after main's page
  // was placed: same load bias.
  const uint64_t loop = SpecAddr(bps.at(loop_name).first);
  const uint64_t work4 = SpecAddr(bps.at("pfm_names_work+4").first);
  EXPECT_GT(loop, work4);
  EXPECT_LT(loop, printed.at("main"));
  EXPECT_LT(SpecAddr(bps.at("twice").first), work4);
  // Hits: execute breakpoints fire in this VM (unlike data watchpoints, see
  // docs/host_drivers.md).
  EXPECT_EQ(bps.at("main").second, 1u) << r.out;
  EXPECT_EQ(bps.at("twice").second, 5u) << r.out;
  EXPECT_EQ(bps.at(loop_name).second, 1u) << "the loop's init runs once";
  // The trace's header carries the resolved spec.
  absl::StatusOr<Trace> t = ReadTrace(file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(Contains(json::serialize(t->header.at("spec")), "(main)"));
  EXPECT_EQ(Sessions(), 0u);
}

// `write` is libc's: not mapped at the exec. pfmctl runs the program to its
// entry point (libraries loaded) and resolves it there.
TEST_F(NamesE2e, LibraryNameInALaunchedProgramResolvesOnceItsLibrariesAreLoaded) {
  const std::string file = dir_ + "/write.trace";
  testing::Result r = Pfmctl(socket(), {"--json", "record", "--breakpoint", "write", "-o",
                                        file, "--", Prog()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::map<std::string, uint64_t> printed = Printed(r.err);
  ASSERT_EQ(printed.count("write"), 1u) << r.err;
  const auto bps = Breakpoints(json::parse(r.out).at("breakpoints"));
  ASSERT_EQ(bps.count("write"), 1u) << r.out;
  EXPECT_EQ(SpecAddr(bps.at("write").first), printed.at("write"));
  EXPECT_GE(bps.at("write").second, 1u) << "the program writes its output";
}

// With soft BTS the session's tracer takes over the program pfmctl stopped
// after its exec: the trace has its branches, names main's callees, and the
// breakpoint still counts.
TEST_F(NamesE2e, NamedBreakpointWithBranchTracing) {
  const std::string file = dir_ + "/bts.trace";
  testing::Result r = Pfmctl(socket(), {"--json", "record", "--bts", "lossless", "--breakpoint",
                                        "pfm_names_work", "-o", file, "--", Prog()},
                             120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::value trailer = json::parse(r.out);
  const auto bps = Breakpoints(trailer.at("breakpoints"));
  ASSERT_EQ(bps.count("pfm_names_work"), 1u) << r.out;
  EXPECT_EQ(bps.at("pfm_names_work").second, 1u) << r.out;
  EXPECT_GT(testing::Num(trailer.at("records")), 1000u);
  EXPECT_GT(BranchesFrom(file, "twice"), 0u);
}

// A name that is nowhere: NOT_FOUND naming what was searched; no session,
// no trace, and the program never ran.
TEST_F(NamesE2e, UnknownNameIsNotFoundAndCreatesNothing) {
  const std::string file = dir_ + "/none.trace";
  testing::Result r = Pfmctl(socket(), {"record", "--breakpoint", "pfm_nosuchfn", "-o", file,
                                        "--", Prog()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("pfmctl: NOT_FOUND: no symbol 'pfm_nosuchfn' in " + Prog() +
                            " (and its libraries searched: ",
                        0),
            0u)
      << r.err;
  EXPECT_TRUE(Contains(r.err, "libc.so")) << r.err;
  EXPECT_EQ(testing::CountOf(r.err, "\n"), 1u) << r.err;
  EXPECT_FALSE(Contains(r.out + r.err, "main=0x")) << "the program ran";
  EXPECT_NE(access(file.c_str(), F_OK), 0) << "a trace was written";
  EXPECT_EQ(Sessions(), 0u);
  // An offset beyond the function, an unknown source file: refused alike.
  r = Pfmctl(socket(), {"record", "--breakpoint", "main+0x100000", "-o", file, "--", Prog()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "INVALID_ARGUMENT: 'main+0x100000' is beyond main")) << r.err;
  r = Pfmctl(socket(), {"record", "--breakpoint", "nosuch.c:3", "-o", file, "--", Prog()});
  EXPECT_TRUE(Contains(r.err, "NOT_FOUND: no source file 'nosuch.c'")) << r.err;
  EXPECT_NE(access(file.c_str(), F_OK), 0);
  EXPECT_EQ(Sessions(), 0u);
}

// A running process: its libraries are mapped, so libc's write resolves
// (session create --pid, record -p).
TEST_F(NamesE2e, AttachedProcessResolvesProgramAndLibraryNames) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const std::string prog = Prog();
  pid_t child = fork();
  if (child == 0) {
    dup2(out[1], 1);
    execl(prog.c_str(), prog.c_str(), "wait", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[256];
  while (Printed(text).size() < 3) {
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  const std::map<std::string, uint64_t> printed = Printed(text);
  ASSERT_EQ(printed.size(), 3u) << text;
  testing::Result r = Pfmctl(socket(), {"--json", "session", "create", "--pid",
                                        std::to_string(child), "--breakpoint", "write",
                                        "--breakpoint", "main", "--breakpoint",
                                        "pfm_names_work"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const uint64_t id = testing::Num(json::parse(r.out).at("id"));
  const json::value show =
      PfmctlJson(socket(), {"--json", "session", "show", std::to_string(id)});
  const auto bps = Breakpoints(show.at("breakpoints"));
  ASSERT_EQ(bps.size(), 3u) << json::serialize(show);
  for (const char* name : {"write", "main", "pfm_names_work"})
    EXPECT_EQ(SpecAddr(bps.at(name).first), printed.at(name)) << name;
  EXPECT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
  // Unknown: nothing created.
  r = Pfmctl(socket(), {"session", "create", "--pid", std::to_string(child), "--breakpoint",
                        "pfm_nosuchfn"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "NOT_FOUND: no symbol 'pfm_nosuchfn'")) << r.err;
  EXPECT_EQ(Sessions(), 0u);
  // A CPU has no files to look a name up in.
  r = Pfmctl(socket(), {"session", "create", "--cpu", "0", "--breakpoint", "main"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

// The build-id of `readelf -n FILE`, as hex; "" if none.
std::string ReadelfBuildId(const std::string& file) {
  testing::Result r = testing::Run({"/usr/bin/readelf", "-n", file});
  const size_t at = r.out.find("Build ID: ");
  if (at == std::string::npos) return "";
  const std::string rest = r.out.substr(at + 10);
  return rest.substr(0, rest.find_first_of("\r\n"));
}

std::string Hex(const std::string& bytes) {
  std::string out;
  char b[3];
  for (unsigned char c : bytes) {
    snprintf(b, sizeof(b), "%02x", c);
    out += b;
  }
  return out;
}

// The MAPS blocks a recording writes carry each file's build-id, read at
// record time.
TEST_F(NamesE2e, RecordedMapsCarryTheBuildIds) {
  const std::string file = dir_ + "/true.trace";
  testing::Result r = Pfmctl(socket(), {"record", "-o", file, "--", "/bin/true"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<Trace> t = ReadTrace(file);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_FALSE(t->maps.empty());
  const std::string want = ReadelfBuildId("/usr/bin/true");
  ASSERT_FALSE(want.empty()) << "/usr/bin/true has no build-id here";
  bool found = false, libc = false;
  for (const Mapping& m : t->maps.back().mappings) {
    if (m.path == RealPath("/usr/bin/true")) {
      found = true;
      EXPECT_EQ(Hex(m.build_id), want);
    }
    if (Contains(m.path, "libc.so")) {
      libc = true;
      EXPECT_EQ(Hex(m.build_id), ReadelfBuildId(m.path)) << m.path;
    }
  }
  EXPECT_TRUE(found) << "no mapping of /usr/bin/true";
  EXPECT_TRUE(libc) << "no mapping of libc";
}

// A binary replaced after the recording: export keeps the recorded build-id
// and says the file changed; report and script leave its addresses unnamed
// rather than naming them from the new file, and say why.
TEST_F(NamesE2e, ExportReportAndScriptWarnWhenTheBinaryChangedSinceTheRecording) {
  const std::string copy = dir_ + "/prog_copy";
  ASSERT_EQ(testing::Run({"/bin/cp", Prog(), copy}).exit_code, 0);
  const std::string file = dir_ + "/copy.trace";
  testing::Result r =
      Pfmctl(socket(), {"record", "--bts", "lossless", "-o", file, "--", copy}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string recorded = ReadelfBuildId(copy);
  ASSERT_FALSE(recorded.empty());
  // Unchanged: no warning, the names are there.
  json::value ex =
      PfmctlJson(socket(), {"--json", "export", file, "-o", dir_ + "/same.perf.data"});
  EXPECT_FALSE(ex.at("detail").as_object().contains("warnings")) << json::serialize(ex);
  std::vector<std::string> warnings;
  EXPECT_GT(BranchesFrom(file, "pfm_names_work", &warnings), 0u);
  EXPECT_TRUE(warnings.empty());
  // Replaced by another program.
  ASSERT_EQ(testing::Run({"/bin/cp", "/bin/true", copy}).exit_code, 0);
  ASSERT_NE(ReadelfBuildId(copy), recorded);
  ex = PfmctlJson(socket(), {"--json", "export", file, "-o", dir_ + "/changed.perf.data"});
  const std::string detail = json::serialize(ex.at("detail"));
  EXPECT_TRUE(Contains(detail, copy + ": build-id " + recorded + " when recorded, ")) << detail;
  EXPECT_TRUE(Contains(detail, "the file changed since the recording")) << detail;
  // /bin/true's symbols would name the old program's addresses wrongly.
  EXPECT_EQ(BranchesFrom(file, "pfm_names_work", &warnings), 0u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(Contains(warnings[0], copy + ": build-id " + recorded)) << warnings[0];
  // report and script say so too: in the text, in --json, and on script's
  // stderr after its records.
  const std::string warning = "warning: " + copy + ": build-id " + recorded + " when recorded, ";
  testing::Result rep = Pfmctl(socket(), {"report", file});
  EXPECT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_TRUE(Contains(rep.out, warning)) << rep.out;
  const json::value rj = PfmctlJson(socket(), {"--json", "report", file});
  ASSERT_EQ(rj.at("warnings").as_array().size(), 1u) << json::serialize(rj);
  EXPECT_TRUE(Contains(std::string(rj.at("warnings").as_array()[0].as_string()),
                       copy + ": build-id " + recorded))
      << json::serialize(rj);
  testing::Result sc = Pfmctl(socket(), {"script", file});
  EXPECT_EQ(sc.exit_code, 0) << sc.err;
  EXPECT_TRUE(Contains(sc.err, warning)) << sc.err;
  EXPECT_FALSE(Contains(sc.out, "warning:"));
  // Before the change, none of them warned.
  ASSERT_EQ(testing::Run({"/bin/cp", Prog(), copy}).exit_code, 0);
  rep = Pfmctl(socket(), {"report", file});
  EXPECT_FALSE(Contains(rep.out, "warning:")) << rep.out;
  sc = Pfmctl(socket(), {"script", file});
  EXPECT_FALSE(Contains(sc.err, "warning:")) << sc.err;
  EXPECT_TRUE(Contains(sc.out, "pfm_names_work")) << sc.out.substr(0, 2000);
}

}  // namespace
}  // namespace pfm
