// End to end, issue 15: `pfmctl export` to perf.data, read by the real perf
// (/usr/bin/perf, installed by tools/install_deps.sh). A real program's
// branches (`pfmctl record` on the host) and a simulated PEBS session
// (`pfmd --driver sim`) are exported, and what perf script / perf report
// print is checked against the trace itself. Skips only when perf is not
// installed.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernel/uapi/pfm_uapi.h"
#include "pfm/trace_file.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Contains;
using testing::CountOf;
using testing::Num;
using testing::Pfmctl;
using testing::Result;

constexpr char kPerf[] = "/usr/bin/perf";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<std::string> Words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// One branch as `perf script -F comm,tid,time,ip,sym,addr` prints it:
//   "prog  3010  9437.791460:   40150b _start =>   402800 __libc_start_main_impl"
struct PerfBranch {
  uint64_t from = 0, to = 0;
  std::string from_sym, to_sym;
};

bool ParseBranchLine(const std::string& line, PerfBranch* b) {
  const size_t arrow = line.find(" => ");
  if (arrow == std::string::npos) return false;
  const std::vector<std::string> left = Words(line.substr(0, arrow));
  const std::vector<std::string> right = Words(line.substr(arrow + 4));
  // The time is the first word ending in ':'; the ip and its symbol follow.
  auto t = std::find_if(left.begin(), left.end(),
                        [](const std::string& w) { return !w.empty() && w.back() == ':'; });
  if (t == left.end() || left.end() - t < 3 || right.size() < 2) return false;
  b->from = std::stoull(*(t + 1), nullptr, 16);
  b->from_sym = *(t + 2);
  b->to = std::stoull(right[0], nullptr, 16);
  b->to_sym = right[1];
  return true;
}

class ExportE2e : public testing::DaemonTest {
 protected:
  void SetUp() override {
    if (access(kPerf, X_OK) != 0) GTEST_SKIP() << kPerf << " is not installed";
    dir_ = testing::MakeTempDir("export");
    home_ = dir_ + "/home";
    ASSERT_EQ(mkdir(home_.c_str(), 0700), 0);
  }

  // The real perf, with a HOME of its own (its config and build-id cache)
  // and no pager. Its stderr has no message ("Warning:", "Error:") but the
  // ones the test expects (`expected`: a part of each) and the one about
  // kernel addresses when this machine's kallsyms is restricted; in
  // particular no "N out of order events" (the export is in time order).
  Result Perf(std::vector<std::string> args, const std::vector<std::string>& expected = {}) {
    args.insert(args.begin(), kPerf);
    Result r = testing::Run(args, {{"HOME", home_}, {"PAGER", "cat"}}, 60);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(Contains(r.err, "out of order")) << args[1] << ": " << r.err;
    for (const std::string& m : PerfMessages(r.err)) {
      bool known = Contains(m, "Kernel address maps (/proc/{kallsyms,modules}) were restricted");
      for (const std::string& e : expected) known = known || Contains(m, e);
      EXPECT_TRUE(known) << "perf " << args[1] << " says:\n" << m;
    }
    return r;
  }

  // perf's stderr as its messages: each a "Warning:" or "Error:" line and
  // the lines up to the next; lines before the first are one too.
  static std::vector<std::string> PerfMessages(const std::string& err) {
    std::vector<std::string> out;
    std::string cur;
    for (const std::string& line : Lines(err)) {
      if ((line == "Warning:" || line == "Error:") && !cur.empty()) {
        out.push_back(cur);
        cur.clear();
      }
      if (!line.empty()) cur += line + "\n";
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
  }

  // `pfmctl export` (no daemon needed).
  Result Export(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {testing::PfmctlPath(), "export"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::Run(argv);
  }

  std::vector<pfm_record> OfType(const Trace& t, uint16_t type) {
    std::vector<pfm_record> out;
    for (const pfm_record& r : t.records)
      if (r.type == type) out.push_back(r);
    return out;
  }

  std::string dir_, home_;
};

class HostExportE2e : public ExportE2e {
 protected:
  void SetUp() override {
    ExportE2e::SetUp();
    if (IsSkipped()) return;
    ASSERT_NO_FATAL_FAILURE(StartDaemon({"--driver", "host"}));
    prog_ = testing::Runfile("tests/export_prog");
  }
  std::string prog_;
};

TEST_F(HostExportE2e, PerfScriptPrintsTheRecordedBranchesInOrderWithTheProgramsSymbols) {
  const std::string trace = dir_ + "/t.pfmtrace", data = dir_ + "/out.data";
  Result rec = Pfmctl(socket(), {"record", "-o", trace, "--", prog_});
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  Result ex = Export({trace, "-o", data});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_TRUE(Contains(ex.out, "exported to " + data)) << ex.out;

  absl::StatusOr<Trace> t = ReadTrace(trace);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->complete);
  // perf delivers records in time order; the export writes them so (a
  // stable sort), which for soft BTS's branches is the trace's own order.
  std::vector<pfm_record> branches = OfType(*t, PFM_REC_BRANCH);
  std::stable_sort(branches.begin(), branches.end(),
                   [](const pfm_record& a, const pfm_record& b) { return a.time < b.time; });
  ASSERT_GT(branches.size(), 500u);

  Result script = Perf({"script", "-F", "comm,tid,time,ip,sym,addr", "-i", data});
  std::vector<PerfBranch> printed;
  for (const std::string& line : Lines(script.out)) {
    PerfBranch b;
    if (ParseBranchLine(line, &b)) printed.push_back(b);
  }
  ASSERT_EQ(printed.size(), branches.size()) << script.out.substr(0, 2000);
  size_t mismatches = 0;
  for (size_t i = 0; i < branches.size() && mismatches < 5; ++i) {
    if (printed[i].from == branches[i].u.branch.from && printed[i].to == branches[i].u.branch.to)
      continue;
    ++mismatches;
    ADD_FAILURE() << "branch " << i << ": perf " << std::hex << printed[i].from << " => "
                  << printed[i].to << ", trace " << branches[i].u.branch.from << " => "
                  << branches[i].u.branch.to;
  }
  // The program's own functions, by name, on both ends of branches.
  std::map<std::string, uint64_t> calls;
  uint64_t unknown = 0;
  for (const PerfBranch& b : printed) {
    if (b.from_sym == "pfm_export_middle" && b.to_sym == "pfm_export_leaf") ++calls["leaf"];
    if (b.from_sym == "main" && b.to_sym == "pfm_export_middle") ++calls["middle"];
    unknown += b.from_sym == "[unknown]";
  }
  EXPECT_EQ(calls["leaf"], 25u) << "pfm_export_middle calls pfm_export_leaf 25 times";
  EXPECT_EQ(calls["middle"], 1u);
  // Only what ran before the exec (pfmctl's held child) is outside PROG.
  EXPECT_LT(unknown, 100u);
  const std::string first_line = Lines(script.out).at(0);
  EXPECT_TRUE(Contains(first_line, "export_prog")) << "the comm: " << first_line;

  Result report = Perf({"report", "--stdio", "-i", data});
  for (const char* fn : {"pfm_export_leaf", "pfm_export_middle", "main", "__libc_start_main"})
    EXPECT_TRUE(Contains(report.out, fn)) << fn << " in:\n" << report.out;
  EXPECT_TRUE(Contains(report.out, "of event 'branches:u'")) << report.out;

  const size_t switches =
      OfType(*t, PFM_REC_SWITCH_IN).size() + OfType(*t, PFM_REC_SWITCH_OUT).size();
  Result sw = Perf({"script", "--show-switch-events", "-F", "comm,tid,time", "-i", data});
  EXPECT_EQ(CountOf(sw.out, "PERF_RECORD_SWITCH "), switches) << sw.out.substr(0, 2000);
  Result task = Perf({"script", "--show-task-events", "-F", "comm,tid,time", "-i", data});
  EXPECT_EQ(CountOf(task.out, "PERF_RECORD_COMM exec: export_prog"), 1u) << task.out;
  EXPECT_EQ(CountOf(task.out, "PERF_RECORD_EXIT"), OfType(*t, PFM_REC_EXIT).size());

  Result header = Perf({"report", "--header-only", "-i", data});
  EXPECT_TRUE(Contains(header.out, "event : name = branches:u")) << header.out;
  EXPECT_TRUE(Contains(header.out, "cmdline : pfmctl export " + trace)) << header.out;

  // The program's GNU build-id, as binutils reads it, is in the file's
  // build-id table (HEADER_BUILD_ID) next to its path.
  Result notes = testing::Run({"/usr/bin/readelf", "-n", prog_});
  ASSERT_EQ(notes.exit_code, 0) << notes.err;
  const size_t at = notes.out.find("Build ID: ");
  ASSERT_NE(at, std::string::npos) << "gcc links with --build-id on Debian:\n" << notes.out;
  const std::string id = notes.out.substr(at + 10, 40);
  Result ids = Perf({"buildid-list", "-i", data});
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  EXPECT_TRUE(Contains(ids.out, id + " ")) << id << " in:\n" << ids.out;
  EXPECT_TRUE(Contains(ids.out, "export_prog")) << ids.out;
}

// A process tree (issue 13): `sh -c 'true; echo'` traced with its children.
// The export carries every process's mappings under its own pid (the
// forked /bin/true's, and the shell's before and after it execs echo), so
// perf names the branches of each program, each under its own comm.
TEST_F(HostExportE2e, PerfNamesTheBranchesOfEveryProcessOfATree) {
  const std::string trace = dir_ + "/tree.pfmtrace", data = dir_ + "/tree.data";
  Result rec = Pfmctl(socket(), {"record", "-o", trace, "--", "/bin/sh", "-c",
                                 "/bin/true; /bin/echo tree"});
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  Result ex = Export({trace, "-o", data});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  absl::StatusOr<Trace> t = ReadTrace(trace);
  ASSERT_TRUE(t.ok()) << t.status();
  std::set<uint32_t> pids;
  for (const pfm_record& r : OfType(*t, PFM_REC_BRANCH)) pids.insert(r.pid);
  ASSERT_GE(pids.size(), 2u) << "the shell and its forked /bin/true";

  Result script = Perf({"script", "-F", "comm,pid,ip,sym,dso", "-i", data});
  // Per comm (the program each process ran; the shell is dash): lines,
  // lines in the program's own binary, and lines perf named with a symbol
  // (Debian's binaries are stripped; ld.so and libc are named).
  std::map<std::string, uint64_t> lines, own, named;
  std::set<std::string> pids_of_true;
  for (const std::string& line : Lines(script.out)) {
    const std::vector<std::string> w = Words(line);
    if (w.size() < 4) continue;
    const std::string& comm = w[0];
    ++lines[comm];
    if (!Contains(line, "[unknown]")) ++named[comm];
    const std::string bin = comm == "dash" ? "(/usr/bin/dash)" : "(/usr/bin/" + comm + ")";
    if (Contains(line, bin)) ++own[comm];
    if (comm == "true") pids_of_true.insert(w[1]);
  }
  for (const char* comm : {"dash", "true", "echo"}) {
    EXPECT_GT(lines[comm], 100u) << comm << "\n" << script.out.substr(0, 2000);
    EXPECT_GT(own[comm], 5u) << comm;
    EXPECT_GT(named[comm], 50u) << comm;
  }
  EXPECT_EQ(pids_of_true.size(), 1u);
  EXPECT_TRUE(Contains(script.out, "_dl_start")) << script.out.substr(0, 2000);
  Result task = Perf({"script", "--show-task-events", "-F", "comm,pid", "-i", data});
  EXPECT_TRUE(Contains(task.out, "PERF_RECORD_COMM exec: true")) << task.out.substr(0, 3000);
  EXPECT_TRUE(Contains(task.out, "PERF_RECORD_COMM exec: echo")) << task.out.substr(0, 3000);
}

TEST_F(HostExportE2e, RecordWithOutputFormatPerfKeepsTheTraceNextToIt) {
  const std::string data = dir_ + "/rec.data";
  Result rec = Pfmctl(socket(), {"record", "--output-format", "perf", "-o", data, "--", prog_});
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  EXPECT_TRUE(Contains(rec.err, "exported to " + data)) << rec.err;
  absl::StatusOr<Trace> t = ReadTrace(data + ".pfmtrace");
  ASSERT_TRUE(t.ok()) << t.status();
  Result script = Perf({"script", "-F", "ip,addr", "-i", data});
  EXPECT_EQ(CountOf(script.out, "=>"), OfType(*t, PFM_REC_BRANCH).size());

  // An unknown format is a usage error before anything runs.
  const std::string marker = dir_ + "/ran";
  rec = Pfmctl(socket(), {"record", "--output-format", "ctf", "-o", dir_ + "/x", "--",
                          "/usr/bin/touch", marker});
  EXPECT_EQ(rec.exit_code, 2);
  EXPECT_EQ(rec.err,
            "pfmctl: INVALID_ARGUMENT: record: unknown --output-format 'ctf' (formats: "
            "pfmtrace, perf, chrome-json)\n");
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the command ran";
}

class SimExportE2e : public ExportE2e {
 protected:
  void SetUp() override {
    ExportE2e::SetUp();
    if (IsSkipped()) return;
    ASSERT_NO_FATAL_FAILURE(StartSim({"--sim-pmu", "skl", "--sim-cpus", "2", "--sim-tasks", "4",
                                      "--sim-seed", "7", "--sim-paused"}));
  }
};

TEST_F(SimExportE2e, PebsBranchesSwitchesAndCountersShowInPerfByName) {
  const uint64_t id =
      Create({"--role", "profiler", "--pid", "1000", "--bts", "lossless", "--buffer", "16MiB",
              "--pebs", "MEM_LOAD_RETIRED.L3_MISS:2000", "--counter", "cycles"});
  ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "5000000"}).exit_code, 0);
  ASSERT_EQ(Pfmctl(socket(), {"sim", "exit", "1000"}).exit_code, 0);
  const std::string trace = dir_ + "/sim.pfmtrace", data = dir_ + "/sim.data";
  Result st = Pfmctl(socket(), {"stream", std::to_string(id), "-o", trace});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  Result ex = Export({"--json", trace, "-o", data, "--format", "perf"});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_EQ(json::serialize(json::parse(ex.out).at("detail").at("events")),
            R"(["branches","MEM_LOAD_RETIRED.L3_MISS","cycles"])");

  absl::StatusOr<Trace> t = ReadTrace(trace);
  ASSERT_TRUE(t.ok()) << t.status();
  const size_t branches = OfType(*t, PFM_REC_BRANCH).size();
  const size_t pebs = OfType(*t, PFM_REC_PEBS).size();
  ASSERT_GT(branches, 100u);
  ASSERT_GT(pebs, 100u);

  Result script = Perf({"script", "-F", "event,ip,addr", "-i", data});
  EXPECT_EQ(CountOf(script.out, "branches:"), branches);
  EXPECT_EQ(CountOf(script.out, "MEM_LOAD_RETIRED.L3_MISS:"), pebs);
  Result report = Perf({"report", "--stdio", "-i", data});
  EXPECT_TRUE(Contains(report.out, "of event 'branches'")) << report.out.substr(0, 3000);
  EXPECT_TRUE(Contains(report.out, "of event 'MEM_LOAD_RETIRED.L3_MISS'"));

  const size_t switches =
      OfType(*t, PFM_REC_SWITCH_IN).size() + OfType(*t, PFM_REC_SWITCH_OUT).size();
  ASSERT_GT(switches, 2u);
  Result sw = Perf({"script", "--show-switch-events", "-F", "tid,time", "-i", data});
  EXPECT_EQ(CountOf(sw.out, "PERF_RECORD_SWITCH "), switches);
  EXPECT_EQ(CountOf(sw.out, "PERF_RECORD_SWITCH OUT preempt"),
            static_cast<size_t>(std::count_if(
                t->records.begin(), t->records.end(), [](const pfm_record& r) {
                  return r.type == PFM_REC_SWITCH_OUT && (r.misc & PFM_MISC_SWITCH_PREEMPT);
                })));

  // The counters: the trailer's numbers, which `pfmctl report` prints, in
  // perf report -T's table and perf report -D's READ records.
  std::map<std::string, uint64_t> want;
  for (const json::value& c : t->trailer.at("counters").as_array())
    want[std::string(c.at("event").as_string())] = Num(c.at("value"));
  ASSERT_EQ(want.size(), 2u);
  Result threads = Perf({"report", "-T", "--stdio", "-i", data});
  const std::vector<std::string> lines = Lines(threads.out);
  auto head = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return Contains(l, "PID") && Contains(l, "TID") && Contains(l, "cycles");
  });
  ASSERT_NE(head, lines.end()) << threads.out.substr(threads.out.size() - 1000);
  ASSERT_NE(head + 1, lines.end());
  // "#  PID   TID  MEM_LOAD_RETIRED.L3_MISS   cycles", then the values.
  std::vector<std::string> names = Words(*head);
  const std::vector<std::string> values = Words(*(head + 1));
  if (!names.empty() && names[0] == "#") names.erase(names.begin());
  ASSERT_EQ(names.size(), values.size()) << *head << "\n" << *(head + 1);
  for (size_t i = 2; i < names.size(); ++i)
    EXPECT_EQ(std::stoull(values[i]), want[names[i]]) << names[i];
  EXPECT_EQ(values[0], "1000");
  Result dump = Perf({"report", "-D", "-i", data});
  for (const auto& [name, value] : want)
    EXPECT_TRUE(Contains(dump.out, "PERF_RECORD_READ: 1000 1000 " + name + " " +
                                       std::to_string(value)))
        << name;
  EXPECT_TRUE(Contains(dump.out, "... time running :"));
}

// A trace written here, with every record type, and the empty trace:
// perf reads both without a complaint.
TEST_F(ExportE2e, PerfReadsEveryRecordTypeAndTheEmptyTrace) {
  const std::string trace = dir_ + "/every.pfmtrace", data = dir_ + "/every.data";
  {
    absl::StatusOr<TraceWriter> w = TraceWriter::Create(
        trace, {{"kind", "record"}, {"command", "/bin/every"}, {"pid", 7}});
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<pfm_record> recs;
    for (uint16_t type = PFM_REC_BRANCH; type < PFM_REC_TYPE_MAX; ++type) {
      pfm_record r{};
      r.type = type;
      r.time = 1000 * type;
      r.pid = r.tid = 7;
      r.u.branch.from = 0x401000;  // also the PEBS ip
      r.u.branch.to = 0x401100;
      if (type == PFM_REC_LOST) r.u.lost.count = 5;
      recs.push_back(r);
    }
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
    ASSERT_TRUE(w->Finish({{"records", recs.size()}}).ok());
  }
  Result ex = Export({trace, "-o", data});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  Result dump = Perf({"report", "-D", "-i", data}, {"lost 1 chunks"});
  for (const char* rec : {"PERF_RECORD_COMM exec", "PERF_RECORD_SAMPLE", "PERF_RECORD_SWITCH",
                          "PERF_RECORD_LOST", "PERF_RECORD_READ", "PERF_RECORD_THROTTLE",
                          "PERF_RECORD_EXIT", "PERF_RECORD_FINISHED_ROUND"})
    EXPECT_TRUE(Contains(dump.out, rec)) << rec;
  Result lost = Perf({"script", "--show-lost-events", "-F", "tid,time", "-i", data});
  EXPECT_TRUE(Contains(lost.out, "PERF_RECORD_LOST")) << lost.out;

  const std::string empty = dir_ + "/empty.pfmtrace", empty_data = dir_ + "/empty.data";
  {
    absl::StatusOr<TraceWriter> w = TraceWriter::Create(empty, {{"kind", "stream"}});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Finish({{"records", 0}}).ok());
  }
  ex = Export({empty, "-o", empty_data});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  Result script = Perf({"script", "-i", empty_data});
  EXPECT_EQ(script.out, "");
  Perf({"report", "--stdio", "-i", empty_data}, {"has no samples"});
}

// An exec late in the trace, past perf's first two rounds of records
// (2 x 65536): a process runs dash's code for 150,000 branches, then execs
// echo (a MAPS block at that time). The export writes the exec's COMM and
// mappings where its time falls among the branches, so perf delivers them
// in order: no "out of order events", the branches before the exec are
// dash's and those after it echo's. (A real recording that long takes
// soft BTS about half a minute; the trace is written here instead.)
TEST_F(ExportE2e, PerfAppliesALateExecOnlyToTheBranchesAfterIt) {
  const std::string trace = dir_ + "/late.pfmtrace", data = dir_ + "/late.data";
  constexpr uint32_t kPid = 4242;
  constexpr int kBefore = 150000, kAfter = 50000;
  {
    absl::StatusOr<TraceWriter> w = TraceWriter::Create(
        trace, {{"kind", "record"}, {"command", "/usr/bin/dash -c loop"}, {"pid", kPid}});
    ASSERT_TRUE(w.ok()) << w.status();
    ProcessMaps dash, echo;
    dash.pid = echo.pid = kPid;
    dash.mappings.push_back({0x400000, 0x500000, 0, "/usr/bin/dash", false, false});
    echo.mappings.push_back({0x400000, 0x500000, 0, "/usr/bin/echo", false, false});
    echo.time_ns = 1000 + kBefore;
    ASSERT_TRUE(w->AppendMaps(dash).ok());
    std::vector<pfm_record> recs;
    for (int i = 0; i < kBefore + kAfter; ++i) {
      pfm_record r{};
      r.type = PFM_REC_BRANCH;
      r.time = 1000 + i;
      r.pid = r.tid = kPid;
      r.u.branch.from = 0x401000 + (i % 256) * 16;
      r.u.branch.to = 0x402000;
      recs.push_back(r);
      if (i == kBefore - 1 || i == kBefore + kAfter - 1) {
        ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
        recs.clear();
      }
      if (i == kBefore - 1) {
        ASSERT_TRUE(w->AppendMaps(echo).ok());
      }
    }
    ASSERT_TRUE(w->Finish({{"records", kBefore + kAfter}}).ok());
  }
  Result ex = Export({trace, "-o", data});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  Result script = Perf({"script", "-F", "comm,tid,ip,dso", "-i", data});
  // Each branch as "COMM TID IP (DSO)".
  uint64_t dash = 0, echo = 0, other = 0;
  for (const std::string& line : Lines(script.out)) {
    const std::vector<std::string> w = Words(line);
    const bool mine = w.size() == 4 && w[1] == std::to_string(kPid);
    if (mine && w[0] == "dash" && w[3] == "(/usr/bin/dash)") ++dash;
    else if (mine && w[0] == "echo" && w[3] == "(/usr/bin/echo)") ++echo;
    else if (other++ < 3) ADD_FAILURE() << "neither program's: " << line;
  }
  EXPECT_EQ(dash, static_cast<uint64_t>(kBefore)) << script.out.substr(0, 1000);
  EXPECT_EQ(echo, static_cast<uint64_t>(kAfter));
  EXPECT_EQ(other, 0u);
  Result task = Perf({"script", "--show-task-events", "-F", "comm,tid", "-i", data});
  EXPECT_EQ(CountOf(task.out, "PERF_RECORD_COMM exec: echo"), 1u) << task.out.substr(0, 3000);
}

// A CPU's trace (a snapshot of "cpu 1"): the trailer's counters are the
// cpu's, so perf gets them as no task's (pid/tid -1) on that cpu, not as
// the first process's.
TEST_F(ExportE2e, PerfShowsACpusCountersUnderNoTask) {
  const std::string trace = dir_ + "/cpu.pfmtrace", data = dir_ + "/cpu.data";
  {
    absl::StatusOr<TraceWriter> w =
        TraceWriter::Create(trace, {{"kind", "snapshot"}, {"ring", {{"target", "cpu 1"}}}});
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<pfm_record> recs;
    for (uint32_t i = 0; i < 4; ++i) {
      pfm_record r{};
      r.type = PFM_REC_BRANCH;
      r.time = 1000 + i;
      r.cpu = 1;
      r.pid = r.tid = i < 2 ? 1000 : 2000;
      r.u.branch.from = 0x401000;
      r.u.branch.to = 0x401100;
      recs.push_back(r);
    }
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
    ASSERT_TRUE(w->Finish({{"records", recs.size()},
                           {"counters", json::array{{{"event", "cycles"},
                                                     {"value", 5},
                                                     {"time_enabled", 7},
                                                     {"time_running", 7}}}}})
                    .ok());
  }
  Result ex = Export({trace, "-o", data});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  // "CPU TIME OFFSET [SIZE]: PERF_RECORD_READ: PID TID EVENT VALUE".
  Result dump = Perf({"report", "-D", "-i", data});
  std::vector<std::string> reads;
  for (const std::string& line : Lines(dump.out))
    if (Contains(line, "PERF_RECORD_READ")) reads.push_back(line);
  ASSERT_EQ(reads.size(), 1u) << dump.out.substr(0, 3000);
  EXPECT_TRUE(Contains(reads[0], "PERF_RECORD_READ: -1 -1 cycles 5")) << reads[0];
  EXPECT_TRUE(testing::StartsWith(reads[0], "1 1003 ")) << "cpu 1, the last time: " << reads[0];
  Result threads = Perf({"report", "-T", "--stdio", "-i", data});
  const std::vector<std::string> lines = Lines(threads.out);
  auto head = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return Contains(l, "PID") && Contains(l, "TID") && Contains(l, "cycles");
  });
  ASSERT_NE(head, lines.end()) << threads.out;
  ASSERT_NE(head + 1, lines.end());
  EXPECT_EQ(Words(*(head + 1)), (std::vector<std::string>{"-1", "-1", "5"})) << threads.out;
  Result script = Perf({"script", "-F", "tid,cpu,ip", "-i", data});
  EXPECT_EQ(CountOf(script.out, "[001]"), 4u) << script.out;
}

TEST_F(ExportE2e, BadInputIsOneErrorLineAndWhatIsReadableIsExported) {
  // A trace whose writer was killed: no trailer.
  const std::string cut = dir_ + "/cut.pfmtrace", data = dir_ + "/cut.data";
  {
    absl::StatusOr<TraceWriter> w = TraceWriter::Create(cut, {{"kind", "stream"}});
    ASSERT_TRUE(w.ok());
    std::vector<pfm_record> recs(3);
    for (pfm_record& r : recs) {
      r.type = PFM_REC_BRANCH;
      r.pid = r.tid = 9;
      r.u.branch.from = 0x401000;
      r.u.branch.to = 0x401100;
    }
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  }
  Result r = Export({cut, "-o", data});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(CountOf(r.err, "\n"), 1u) << r.err;
  EXPECT_TRUE(testing::StartsWith(
      r.err, "pfmctl: DATA_LOSS: " + cut + ": trace cut short: no trailer"))
      << r.err;
  EXPECT_TRUE(Contains(r.err, "exported 3 records to " + data)) << r.err;
  EXPECT_EQ(CountOf(Perf({"script", "-F", "ip,addr", "-i", data}).out, "=>"), 3u);

  r = Export({dir_ + "/missing", "-o", data});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(testing::StartsWith(r.err, "pfmctl: NOT_FOUND: cannot open")) << r.err;
  r = Export({dir_, "-o", data});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "pfmctl: INVALID_ARGUMENT: " + dir_ +
                       " is a directory, not a pfm trace file\n");
  r = Export({cut, "-o", data, "--format", "ctf"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "pfmctl: INVALID_ARGUMENT: unknown export format 'ctf' (formats: perf, chrome-json)\n");
  r = Export({cut, "-o", dir_});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(testing::StartsWith(r.err, "pfmctl: INVALID_ARGUMENT: cannot write " + dir_))
      << r.err;
  const std::string nowhere = dir_ + "/no/such/dir/t.json";
  r = Export({cut, "-o", nowhere, "--format", "chrome-json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "pfmctl: INVALID_ARGUMENT: cannot write " + nowhere +
                       ": No such file or directory\n");
  r = Export({cut});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "pfmctl: INVALID_ARGUMENT: usage: export TRACE -o FILE [--format perf|chrome-json]\n");
}

}  // namespace
}  // namespace pfm
