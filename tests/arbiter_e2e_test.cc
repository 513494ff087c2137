// End to end, issue 4: counters and debug registers through the real pfmd
// and pfmctl on the simulated Skylake (8 general, 3 fixed counters, 4 debug
// registers), advanced deterministically with `pfmctl sim run`.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Pfmctl;
using testing::PfmctlJson;

double Num(const json::value& v) { return v.to_number<double>(); }

const std::vector<std::string>& kGpEvents = testing::kSkylakeGpOnlyEvents;

class ArbiterE2e : public testing::DaemonTest {
 protected:
  void SetUp() override {
    StartSim({"--sim-pmu", "skl", "--sim-cpus", "2", "--sim-tasks", "3", "--sim-seed", "11",
              "--sim-paused"});
  }
  // `pfmctl --json session create <flags>`, refused or not.
  testing::Result TryCreate(std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--json", "session", "create"});
    return Pfmctl(socket(), flags);
  }
  json::object Show(uint64_t id) {
    return PfmctlJson(socket(), {"session", "show", std::to_string(id)}).as_object();
  }
  void Run(uint64_t ns) {
    ASSERT_EQ(Pfmctl(socket(), {"sim", "run", std::to_string(ns)}).exit_code, 0);
  }
};

std::vector<std::string> Breakpoints(int n, uint64_t base) {
  std::vector<std::string> f;
  for (int i = 0; i < n; ++i) {
    char buf[64];
    snprintf(buf, sizeof(buf), "0x%llx:8:w", static_cast<unsigned long long>(base + 8 * i));
    f.push_back("--breakpoint");
    f.push_back(buf);
  }
  return f;
}

TEST_F(ArbiterE2e, FourPinnedBreakpointsAdmittedFifthRefusedUntilOneLeaves) {
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i) {
    std::vector<std::string> f = {"--role", "debugger", "--pid", "1000"};
    std::vector<std::string> bp = Breakpoints(1, 0x601000 + 64 * i);
    f.insert(f.end(), bp.begin(), bp.end());
    ids.push_back(Create(f));
  }
  testing::Result r = TryCreate({"--role", "debugger", "--pid", "1000", "--breakpoint",
                              "0x602000:8:w"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("debug register"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("session"), std::string::npos) << "names the holder: " << r.err;
  json::value list = PfmctlJson(socket(), {"session", "list"});
  EXPECT_EQ(list.as_array().size(), 4u) << "the refusal left nothing behind";
  ASSERT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(ids[1])}).exit_code, 0);
  Create({"--role", "debugger", "--pid", "1000", "--breakpoint", "0x602000:8:w"});
}

TEST_F(ArbiterE2e, DebuggerBreakpointsStayPinnedWhileWatchpointsMultiplex) {
  std::vector<std::string> dbg = {"--role", "debugger", "--pid", "1000"};
  std::vector<std::string> bp = Breakpoints(2, 0x601000);
  dbg.insert(dbg.end(), bp.begin(), bp.end());
  const uint64_t d = Create(dbg);
  std::vector<std::string> prof = {"--role", "profiler", "--pid", "1000"};
  bp = Breakpoints(6, 0x700000);
  prof.insert(prof.end(), bp.begin(), bp.end());
  const uint64_t p = Create(prof);
  Run(400000000);  // 400 ms virtual
  const json::object ds = Show(d), ps = Show(p);
  for (const json::value& b : ds.at("breakpoints").as_array())
    EXPECT_DOUBLE_EQ(Num(b.at("ratio")), 1.0) << json::serialize(b);
  double sum = 0;
  for (const json::value& b : ps.at("breakpoints").as_array()) {
    ASSERT_FALSE(b.at("ratio").is_null()) << json::serialize(b);
    const double ratio = Num(b.at("ratio"));
    EXPECT_GT(ratio, 0.0);
    EXPECT_LT(ratio, 1.0);
    sum += ratio;
  }
  // Four debug registers, two pinned by the debugger: two are shared.
  EXPECT_NEAR(sum, 2.0, 0.1);
}

TEST_F(ArbiterE2e, TwelveFlexibleCountersScaleWithinTenPercentOfTruth) {
  std::vector<std::string> f = {"--pid", "1001"};
  for (const std::string& e : kGpEvents) {
    f.push_back("--counter");
    f.push_back(e);
  }
  const uint64_t id = Create(f);
  Run(2000000000);  // 2 s virtual
  json::object show = Show(id);
  json::value stats = PfmctlJson(socket(), {"sim", "stats", "1001"});
  const json::object& truth = stats.at("tasks").at(0).at("true_counts").as_object();
  ASSERT_EQ(show.at("counters").as_array().size(), kGpEvents.size());
  for (const json::value& c : show.at("counters").as_array()) {
    const std::string event(c.at("event").as_string());
    ASSERT_FALSE(c.at("ratio").is_null()) << event << " never ran";
    const double ratio = Num(c.at("ratio"));
    EXPECT_GT(ratio, 0.0) << event;
    EXPECT_LT(ratio, 1.0) << event;
    const double real = Num(truth.at(event));
    const double scaled = Num(c.at("scaled"));
    ASSERT_GT(real, 0) << event;
    EXPECT_NEAR(scaled / real, 1.0, 0.10)
        << event << ": scaled " << scaled << " vs true " << real << " (ratio " << ratio << ")";
    EXPECT_LT(Num(c.at("value")), real) << "multiplexed: the raw value undercounts";
  }
}

// The policy (docs/arbiter.md): free counters are dealt round-robin across
// sessions, so a session's share does not grow with how many events it
// asks for. With 8 general counters, B's single counter always runs and A's
// ten share the other seven.
TEST_F(ArbiterE2e, SessionWithOneCounterIsNotStarvedByOneWithTen) {
  std::vector<std::string> fa = {"--pid", "1002"};
  for (int i = 0; i < 10; ++i) {
    fa.push_back("--counter");
    fa.push_back(kGpEvents[i]);
  }
  const uint64_t a = Create(fa);
  const uint64_t b = Create({"--pid", "1002", "--counter", kGpEvents[11]});
  Run(1000000000);
  const json::object bs = Show(b), as = Show(a);
  const json::array& bc = bs.at("counters").as_array();
  ASSERT_EQ(bc.size(), 1u);
  EXPECT_NEAR(Num(bc[0].at("ratio")), 1.0, 1e-6);
  double a_sum = 0;
  for (const json::value& c : as.at("counters").as_array()) {
    const double r = Num(c.at("ratio"));
    EXPECT_NEAR(r, 0.7, 0.05);
    a_sum += r;
  }
  EXPECT_NEAR(a_sum, 7.0, 0.2);
}

TEST_F(ArbiterE2e, PinnedCountersBeyondTheHardwareAreRefused) {
  std::vector<std::string> f = {"--pid", "1000", "--pinned"};
  for (int i = 0; i < 9; ++i) {
    f.push_back("--counter");
    f.push_back(kGpEvents[i]);
  }
  testing::Result r = TryCreate(f);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << r.err;
  json::value st = PfmctlJson(socket(), {"status"});
  EXPECT_EQ(st.at("sessions").to_number<int>(), 0);
}

TEST_F(ArbiterE2e, UnknownEventNameIsInvalidArgumentNamingIt) {
  testing::Result r = TryCreate({"--pid", "1000", "--counter", "NOT_AN_EVENT_X"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("NOT_AN_EVENT_X"), std::string::npos) << r.err;
}

TEST_F(ArbiterE2e, ResourcesShowsWhoHoldsWhat) {
  Create({"--role", "debugger", "--pid", "1000", "--breakpoint", "0x601000:8:w",
              "--bts", "history"});
  Create({"--pid", "1000", "--counter", "cycles", "--bts", "lossless"});
  Run(10000000);
  json::value r = PfmctlJson(socket(), {"resources"});
  std::string all = json::serialize(r);
  EXPECT_NE(all.find("debug register"), std::string::npos) << all;
  EXPECT_NE(all.find("debug store"), std::string::npos) << all;
  EXPECT_NE(all.find("cycles"), std::string::npos) << all;
  testing::Result text = Pfmctl(socket(), {"resources"});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("task 1000"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace pfm
