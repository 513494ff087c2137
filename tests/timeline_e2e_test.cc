// End to end, issue 15 (timeline): a profiler with more counters than the
// simulated Skylake has general counters, streamed to a trace file through
// the real pfmd and pfmctl. The trace carries the arbiter's schedule
// (SCHEDULE records), from which `pfmctl export --format chrome-json` and
// `pfmctl report --timeline` draw when each counter was on the hardware: the
// on-slices of every counter add up to the time_running pfmd reports.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "pfm/trace_file.h"
#include "tests/testing/e2e.h"
#include "userspace/pfmctl/timeline.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Pfmctl;

const std::vector<std::string>& kGpEvents = testing::kSkylakeGpOnlyEvents;

class TimelineE2e : public testing::DaemonTest {
 protected:
  void SetUp() override {
    StartSim({"--sim-pmu", "skl", "--sim-cpus", "2", "--sim-tasks", "3", "--sim-seed", "5",
              "--sim-paused"});
  }
  // A lossless profiler with the twelve counters on pid 1000, run for
  // 200 ms of virtual time; the task exits; the stream goes to a file.
  std::string Record() {
    std::vector<std::string> f = {"--role", "profiler", "--pid", "1000", "--bts", "lossless",
                                  "--buffer", "16MiB"};
    for (const std::string& e : kGpEvents) {
      f.push_back("--counter");
      f.push_back(e);
    }
    const uint64_t id = Create(f);
    EXPECT_EQ(Pfmctl(socket(), {"sim", "run", "200000000"}).exit_code, 0);
    EXPECT_EQ(Pfmctl(socket(), {"sim", "exit", "1000"}).exit_code, 0);
    dir_ = testing::MakeTempDir("timeline");
    const std::string file = dir_ + "/prof.trace";
    testing::Result r = Pfmctl(socket(), {"stream", std::to_string(id), "-o", file});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return file;
  }
  std::string dir_;
};

TEST_F(TimelineE2e, OnHardwareSlicesAddUpToTimeRunning) {
  const std::string file = Record();
  absl::StatusOr<Trace> t = ReadTrace(file);
  ASSERT_TRUE(t.ok()) << t.status();
  const Timeline tl = BuildTimeline(*t);
  EXPECT_GT(tl.schedule_records, 24u);
  ASSERT_EQ(tl.requests.size(), kGpEvents.size());
  for (const RequestTrack& r : tl.requests) {
    ASSERT_TRUE(r.time_running.has_value()) << r.name;
    ASSERT_TRUE(r.time_enabled.has_value()) << r.name;
    EXPECT_GT(r.on.size(), 1u) << r.name << " rotated";
    EXPECT_EQ(r.on_ns, *r.time_running) << r.name;
    EXPECT_LT(*r.time_running, *r.time_enabled) << r.name << " is multiplexed";
  }
  // The task's running slices, from the switch records.
  ASSERT_FALSE(tl.threads.empty());
  uint64_t runs = 0;
  for (const ThreadTrack& th : tl.threads) runs += th.runs.size();
  EXPECT_GT(runs, 0u);
}

// A debugger's small history ring keeps its slots for branches: its
// breakpoints' schedule is not written there.
TEST_F(TimelineE2e, HistoryRingsGetNoScheduleRecords) {
  const uint64_t id = Create({"--role", "debugger", "--pid", "1000", "--bts", "history",
                              "--buffer", "2KiB", "--breakpoint", "0x601000:8:w"});
  ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "50000000"}).exit_code, 0);
  const json::value snap = testing::PfmctlJson(socket(), {"snapshot", std::to_string(id)});
  size_t branches = 0;
  for (const json::value& r : snap.at("records").as_array()) {
    EXPECT_NE(r.at("type").as_string(), "schedule");
    if (r.at("type").as_string() == "branch") ++branches;
  }
  EXPECT_EQ(branches, snap.at("records").as_array().size());
  EXPECT_GT(branches, 0u);
}

TEST_F(TimelineE2e, ChromeJsonExportObeysTheTraceEventFormat) {
  const std::string file = Record();
  const std::string out = dir_ + "/prof.json";
  testing::Result r =
      Pfmctl(socket(), {"export", file, "--format", "chrome-json", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::value v = json::parse(testing::ReadFile(out));
  std::map<std::string, double> on_us;  // by event name
  size_t slices = 0;
  for (const json::value& e : v.at("traceEvents").as_array()) {
    const json::object& o = e.as_object();
    ASSERT_TRUE(o.at("ph").is_string());
    ASSERT_TRUE(o.at("name").is_string());
    ASSERT_TRUE(o.at("pid").is_number());
    ASSERT_TRUE(o.at("tid").is_number());
    const std::string ph(o.at("ph").as_string());
    if (ph == "M") continue;
    ASSERT_TRUE(o.at("ts").is_number());
    if (ph == "X" && o.at("cat").as_string() == "pmu") {
      on_us[std::string(o.at("name").as_string())] += o.at("dur").to_number<double>();
      ++slices;
    }
  }
  EXPECT_GT(slices, kGpEvents.size());
  // Against pfmd's own numbers, as the trailer carries them.
  absl::StatusOr<Trace> t = ReadTrace(file);
  ASSERT_TRUE(t.ok()) << t.status();
  const json::array& counters = t->trailer.at("counters").as_array();
  ASSERT_EQ(counters.size(), kGpEvents.size());
  for (const json::value& c : counters) {
    const std::string event(c.at("event").as_string());
    const double running_us = c.at("time_running").to_number<double>() / 1000.0;
    EXPECT_NEAR(on_us[event], running_us, 0.01) << event;
  }
}

TEST_F(TimelineE2e, ReportTimelineIsAnSvgWithOneRowPerRequest) {
  const std::string file = Record();
  const std::string svg = dir_ + "/t.svg";
  testing::Result r = Pfmctl(socket(), {"report", file, "--timeline", svg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Parsed by a real XML parser.
  testing::Result py = testing::Run(
      {"/usr/bin/python3", "-c",
       "import sys, xml.etree.ElementTree as E\n"
       "r = E.parse(sys.argv[1]).getroot()\n"
       "ns = '{http://www.w3.org/2000/svg}'\n"
       "print(sum(1 for g in r.iter(ns + 'g') if g.get('class') == 'request'))",
       svg});
  ASSERT_EQ(py.exit_code, 0) << py.err;
  EXPECT_EQ(std::stoul(py.out), kGpEvents.size());
  testing::Result bad = Pfmctl(socket(), {"report", file, "--timeline", dir_ + "/no/such/dir.svg"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(testing::Contains(bad.err, "cannot write the timeline")) << bad.err;
}

// A report killed while it reads the trace (^C, or SIGKILL) leaves no
// empty SVG behind: the timeline's new file has no name until it is
// written (O_TMPFILE). Before, ^C left an empty OUT.svg.
TEST_F(TimelineE2e, AReportKilledWhileReadingTheTraceLeavesNoSvg) {
  dir_ = testing::MakeTempDir("timeline_kill");
  ASSERT_FALSE(dir_.empty());
  // As /proc shows it (the fd links below).
  char real[PATH_MAX];
  ASSERT_NE(::realpath(dir_.c_str(), real), nullptr) << dir_;
  dir_ = real;
  {
    const int probe = ::open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (probe < 0 && (errno == EOPNOTSUPP || errno == EISDIR))
      GTEST_SKIP() << dir_ << " has no O_TMPFILE: pfmctl creates OUT.svg at once there";
    if (probe >= 0) ::close(probe);
  }
  const std::string big = dir_ + "/big.trace", svg = dir_ + "/killed.svg";
  size_t records = size_t{1} << 20;
  bool killed_in_time = false;
  for (int attempt = 0; attempt < 4 && !killed_in_time; ++attempt, records *= 2) {
    {
      absl::StatusOr<TraceWriter> w = TraceWriter::Create(big, json::object{{"tool", "test"}});
      ASSERT_TRUE(w.ok()) << w.status();
      std::vector<pfm_record> batch(1 << 14);
      uint64_t time = 1;
      for (size_t done = 0; done < records; done += batch.size()) {
        for (pfm_record& r : batch) {
          r = pfm_record{};
          r.type = PFM_REC_BRANCH;
          r.pid = r.tid = 4242;
          r.time = time++;
        }
        ASSERT_TRUE(w->Append(batch.data(), batch.size()).ok());
      }
      ASSERT_TRUE(w->Finish(json::object{}).ok());
    }
    for (const int sig : {SIGINT, SIGKILL}) {
      SCOPED_TRACE(strsignal(sig));
      const pid_t pfmctl = testing::StartPfmctl(socket(), {"report", big, "--timeline", svg},
                                                [] { ::dup2(::open("/dev/null", O_WRONLY), 1); });
      ASSERT_GE(pfmctl, 0);
      testing::ScopedChild reap{pfmctl};
      // Its timeline file: an fd in the directory, before the trace is read.
      const std::string fds = "/proc/" + std::to_string(pfmctl) + "/fd";
      bool open = false;
      for (int i = 0; i < 50000 && !open; ++i) {
        if (DIR* d = ::opendir(fds.c_str())) {
          while (const dirent* e = ::readdir(d)) {
            char link[4096];
            const ssize_t n = ::readlinkat(::dirfd(d), e->d_name, link, sizeof(link));
            const std::string_view l(link, n > 0 ? static_cast<size_t>(n) : 0);
            if (l.substr(0, dir_.size() + 1) == dir_ + "/" && l != big) open = true;
          }
          ::closedir(d);
        }
        if (!open) ::usleep(100);
      }
      ASSERT_TRUE(open) << "no timeline file seen in " << fds;
      ASSERT_EQ(::kill(pfmctl, sig), 0);
      int ws = 0;
      ASSERT_EQ(::waitpid(pfmctl, &ws, 0), pfmctl);
      reap.pid = 0;
      if (WIFEXITED(ws)) {
        // Done before the signal came: a bigger trace next time.
        EXPECT_EQ(WEXITSTATUS(ws), 0);
        ::unlink(svg.c_str());
        break;
      }
      ASSERT_TRUE(WIFSIGNALED(ws) && WTERMSIG(ws) == sig) << ws;
      EXPECT_NE(::access(svg.c_str(), F_OK), 0) << svg << " left behind";
      killed_in_time = sig == SIGKILL;
    }
  }
  EXPECT_TRUE(killed_in_time) << "every report ended before it could be killed";
  // And unkilled, the picture is written, with the mode a created file
  // gets under pfmctl's umask (027 here).
  {
    const pid_t pfmctl =
        testing::StartPfmctl(socket(), {"report", big, "--timeline", svg}, [] {
          ::dup2(::open("/dev/null", O_WRONLY), 1);
          ::umask(027);
        });
    ASSERT_GE(pfmctl, 0);
    int ws = 0;
    ASSERT_EQ(::waitpid(pfmctl, &ws, 0), pfmctl);
    ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << ws;
  }
  EXPECT_TRUE(testing::Contains(testing::ReadFile(svg), "<svg")) << svg;
  struct stat st {};
  ASSERT_EQ(::stat(svg.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  ::unlink(big.c_str());
}

}  // namespace
}  // namespace pfm
