// The metrics collector over a session manager on the simulated machine
// (paused: nothing moves unless a test runs it), without HTTP; then the
// endpoint itself on loopback, and that stopping it leaves no thread or fd.
#include "userspace/pfmd/metrics.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "userspace/pfmd/session_test_util.h"
#include <prometheus/check_names.h>
#include <prometheus/text_serializer.h>

#include "pfm/client.h"

namespace pfm {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

using session_test::kAlice;
using session_test::kBob;
using session_test::History;
using session_test::kTask;
using session_test::Lossless;
using session_test::Root;
using session_test::SimSkylake;
using session_test::User;

// Limits small enough to read back exactly.
PfmdConfig SimConfig() { return session_test::SimConfig(32ull << 20, 256ull << 20); }

// A profiler's flexible watchpoints: more than the 4 debug registers, so
// the arbiter multiplexes them.
TypedSpec Watches(int32_t pid, int n) {
  TypedSpec s;
  s.pid = pid;
  for (int i = 0; i < n; ++i)
    s.breakpoints.push_back(BreakpointSpec{0x600000u + 64u * i, 8, "w"});
  return s;
}

class MetricsTest : public ::testing::Test {
 protected:
  MetricsTest() : m_(SimConfig(), SimSkylake()), collector_(&m_, &refusals_) {}

  void Collect() { families_ = collector_.Collect(); }
  void RunSim(uint64_t ns) {
    ASSERT_TRUE(m_.Sim(Root(), {SimRequest::Action::kRun, -1, ns}).ok());
  }

  const MetricFamily& Family(const std::string& name) const {
    for (const MetricFamily& f : families_)
      if (f.name == name) return f;
    static const MetricFamily kNone;
    ADD_FAILURE() << "no family " << name;
    return kNone;
  }
  static double Value(const MetricFamily& f, const ClientMetric& m) {
    return f.type == MetricType::Counter ? m.counter.value : m.gauge.value;
  }
  static std::string LabelOf(const ClientMetric& m, const std::string& name) {
    for (const ClientMetric::Label& l : m.label)
      if (l.name == name) return l.value;
    return "";
  }
  // The value of the one sample of `name` whose labels include `labels`;
  // -1 if none does.
  double Get(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    const MetricFamily& f = Family(name);
    for (const ClientMetric& m : f.metric) {
      bool match = true;
      for (const auto& [k, v] : labels) match &= LabelOf(m, k) == v;
      if (match) return Value(f, m);
    }
    return -1;
  }
  double Sum(const std::string& name) const {
    const MetricFamily& f = Family(name);
    double sum = 0;
    for (const ClientMetric& m : f.metric) sum += Value(f, m);
    return sum;
  }
  // Every sample, in every family, that names session `id`.
  size_t SeriesOfSession(SessionId id) const {
    size_t n = 0;
    for (const MetricFamily& f : families_)
      for (const ClientMetric& m : f.metric) n += LabelOf(m, "session") == std::to_string(id);
    return n;
  }
  size_t AllSeries() const {
    size_t n = 0;
    for (const MetricFamily& f : families_) n += f.metric.size();
    return n;
  }

  SessionManager m_;
  RefusalCounts refusals_;
  MetricsCollector collector_;
  std::vector<MetricFamily> families_;
};

TEST_F(MetricsTest, SessionsByRoleAndUidSumToTheStatusCount) {
  ASSERT_TRUE(m_.Create(User(kAlice), 1, History(kTask)).ok());
  ASSERT_TRUE(m_.Create(User(kAlice), 1, History(kTask + 1)).ok());
  ASSERT_TRUE(m_.Create(User(kAlice), 1, Lossless(kTask)).ok());
  ASSERT_TRUE(m_.Create(User(kBob), 2, Watches(kTask, 1)).ok());
  Collect();
  EXPECT_EQ(Sum("pfm_sessions"), double(m_.Status().sessions));
  EXPECT_EQ(Get("pfm_sessions", {{"role", "debugger"}, {"uid", "1000"}}), 2);
  EXPECT_EQ(Get("pfm_sessions", {{"role", "profiler"}, {"uid", "1000"}}), 1);
  EXPECT_EQ(Get("pfm_sessions", {{"role", "profiler"}, {"uid", "1001"}}), 1);
  EXPECT_EQ(Get("pfm_sessions", {{"role", "debugger"}, {"uid", "1001"}}), -1)
      << "no series for a pair with no session";
}

TEST_F(MetricsTest, MemoryIsTheAccountantsAndTheLimitsAreTheFlags) {
  ASSERT_TRUE(m_.Create(User(kAlice), 1, Lossless(kTask)).ok());
  ASSERT_TRUE(m_.Create(User(kBob), 2, History(kTask)).ok());
  Collect();
  const StatusInfo st = m_.Status();
  ASSERT_EQ(st.charged.size(), 2u);
  for (const auto& [uid, bytes] : st.charged)
    EXPECT_EQ(Get("pfm_memory_charged_bytes", {{"uid", std::to_string(uid)}}), double(bytes));
  EXPECT_EQ(Sum("pfm_memory_charged_bytes"), double(st.allocated));
  EXPECT_EQ(Get("pfm_memory_allocated_bytes"), double(st.allocated));
  EXPECT_EQ(Get("pfm_memory_held_bytes"), double(st.held));
  EXPECT_EQ(Get("pfm_memory_held_bytes"), Get("pfm_memory_allocated_bytes"));
  EXPECT_EQ(Get("pfm_memory_limit_bytes", {{"scope", "uid"}}), double(32 << 20));
  EXPECT_EQ(Get("pfm_memory_limit_bytes", {{"scope", "daemon"}}), double(256 << 20));
}

TEST_F(MetricsTest, RecordsAndLossAreTheRingsOwnCounts) {
  absl::StatusOr<SessionId> id = m_.Create(User(kAlice), 1, Lossless(kTask));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_NO_FATAL_FAILURE(RunSim(50'000'000));
  Collect();
  absl::StatusOr<SessionInfo> s = m_.Show(User(kAlice), *id);
  ASSERT_TRUE(s.ok());
  ASSERT_GT(s->records, 0u) << "the sim wrote nothing in 50 ms";
  const std::map<std::string, std::string> l = {
      {"session", std::to_string(*id)}, {"uid", "1000"}, {"role", "profiler"}};
  EXPECT_EQ(Get("pfm_session_records_total", l), double(s->records));
  EXPECT_EQ(Get("pfm_session_lost_records_total", l), double(s->lost));
  EXPECT_EQ(Get("pfm_session_overwritten_records_total", l), double(s->overwritten));
}

TEST_F(MetricsTest, MultiplexedRequestsShowRatioRotationsAndSlots) {
  absl::StatusOr<SessionId> id = m_.Create(User(kAlice), 1, Watches(kTask, 6));
  ASSERT_TRUE(id.ok()) << id.status();
  Collect();
  EXPECT_EQ(Get("pfm_arbiter_rotations_total"), 0);
  EXPECT_EQ(Family("pfm_request_running_ratio").metric.size(), 0u)
      << "nothing has been counted before the machine runs";
  ASSERT_NO_FATAL_FAILURE(RunSim(200'000'000));
  Collect();
  EXPECT_GT(Get("pfm_arbiter_rotations_total"), 0);
  const MetricFamily& ratio = Family("pfm_request_running_ratio");
  ASSERT_EQ(ratio.metric.size(), 6u);
  std::set<std::string> requests;
  for (const ClientMetric& m : ratio.metric) {
    EXPECT_EQ(LabelOf(m, "session"), std::to_string(*id));
    EXPECT_NE(LabelOf(m, "event").find(":8:w"), std::string::npos) << LabelOf(m, "event");
    requests.insert(LabelOf(m, "request"));
    // Six watchpoints take turns in four debug registers.
    EXPECT_GT(m.gauge.value, 0.0);
    EXPECT_LT(m.gauge.value, 1.0);
  }
  EXPECT_EQ(requests.size(), 6u);
  // Every CPU and kind has a series; the debug registers in use are the
  // task's, on at most one CPU, never more than the machine has.
  EXPECT_EQ(Family("pfm_hw_slots_in_use").metric.size(), 2u * 3u);
  double dr = 0;
  for (int cpu = 0; cpu < 2; ++cpu) {
    const double used =
        Get("pfm_hw_slots_in_use", {{"cpu", std::to_string(cpu)}, {"kind", "debug_register"}});
    EXPECT_LE(used, 4);
    dr += used;
    EXPECT_EQ(Get("pfm_hw_slots_in_use", {{"cpu", std::to_string(cpu)}, {"kind", "gp_counter"}}), 0);
  }
  EXPECT_LE(dr, 4);
  EXPECT_EQ(Get("pfm_hw_slots_per_cpu", {{"kind", "debug_register"}}), 4);
  EXPECT_EQ(Get("pfm_hw_slots_per_cpu", {{"kind", "gp_counter"}}), 8);
  EXPECT_EQ(Get("pfm_hw_slots_per_cpu", {{"kind", "fixed_counter"}}), 3);
}

// The event label is the request's whole name, as session show gives it:
// not the arbiter's holder label, which is cut at 47 bytes.
TEST_F(MetricsTest, ALongEventNameIsLabelledWhole) {
  const std::string name = "BR_INST_RETIRED.ALL_BRANCHES:u=1:k=0:c=1:i=0:e=0";
  ASSERT_GT(name.size(), 47u);
  TypedSpec spec;
  spec.pid = kTask;
  spec.counters = {name};
  absl::StatusOr<SessionId> id = m_.Create(User(kAlice), 1, spec);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_NO_FATAL_FAILURE(RunSim(20'000'000));
  Collect();
  const MetricFamily& ratio = Family("pfm_request_running_ratio");
  ASSERT_EQ(ratio.metric.size(), 1u);
  EXPECT_EQ(LabelOf(ratio.metric[0], "event"), name);
  absl::StatusOr<SessionInfo> show = m_.Show(User(kAlice), *id);
  ASSERT_TRUE(show.ok()) << show.status();
  ASSERT_EQ(show->counters.size(), 1u);
  EXPECT_EQ(show->counters[0].label, name);
  // resources names it whole too.
  const ResourcesInfo r = m_.Resources(User(kAlice));
  std::string whats;
  for (const auto& t : r.tasks)
    for (const HolderInfo& h : t.holders) whats += h.what + ";";
  EXPECT_NE(whats.find(name + ";"), std::string::npos) << whats;
}

TEST_F(MetricsTest, CpuWideRequestsHoldTheirSlotsOnTheirCpu) {
  // A CPU context is always active: its requests are on the hardware from
  // the first tick, whatever runs there.
  TypedSpec cpu = Watches(-1, 2);
  cpu.cpu = 1;
  ASSERT_TRUE(m_.Create(Root(), 1, cpu).ok());
  ASSERT_NO_FATAL_FAILURE(RunSim(10'000'000));
  Collect();
  EXPECT_EQ(Get("pfm_hw_slots_in_use", {{"cpu", "1"}, {"kind", "debug_register"}}), 2);
  EXPECT_EQ(Get("pfm_hw_slots_in_use", {{"cpu", "0"}, {"kind", "debug_register"}}), 0);
  const MetricFamily& ratio = Family("pfm_request_running_ratio");
  ASSERT_EQ(ratio.metric.size(), 2u);
  for (const ClientMetric& m : ratio.metric) EXPECT_EQ(m.gauge.value, 1.0);
}

TEST_F(MetricsTest, AnEndedSessionLeavesNoSeries) {
  Collect();
  const size_t baseline = AllSeries();
  // Churn: many sessions come and go; nothing of them stays.
  for (int i = 0; i < 50; ++i) {
    absl::StatusOr<SessionId> a = m_.Create(User(kAlice), 7, Lossless(kTask));
    absl::StatusOr<SessionId> w = m_.Create(User(kBob), 8, Watches(kTask + 1, 5));
    ASSERT_TRUE(a.ok() && w.ok());
    ASSERT_NO_FATAL_FAILURE(RunSim(20'000'000));
    Collect();
    EXPECT_GT(SeriesOfSession(*a), 0u);
    EXPECT_GT(SeriesOfSession(*w), 0u);
    ASSERT_TRUE(m_.Kill(User(kAlice), *a).ok());
    m_.Disconnected(8);  // Bob's session ends with its connection
    Collect();
    EXPECT_EQ(SeriesOfSession(*a), 0u);
    EXPECT_EQ(SeriesOfSession(*w), 0u);
  }
  EXPECT_EQ(AllSeries(), baseline);
  EXPECT_EQ(Sum("pfm_sessions"), 0);
  EXPECT_EQ(Sum("pfm_memory_charged_bytes"), 0);
}

TEST_F(MetricsTest, RefusalsAreCountedByCodeAndEveryCodeHasASeries) {
  refusals_.Count(absl::StatusCode::kResourceExhausted);
  refusals_.Count(absl::StatusCode::kResourceExhausted);
  refusals_.Count(absl::StatusCode::kPermissionDenied);
  refusals_.Count(absl::StatusCode::kOk);  // not a refusal
  refusals_.Count(static_cast<absl::StatusCode>(99));  // counts as UNKNOWN
  Collect();
  EXPECT_EQ(Get("pfm_refusals_total", {{"code", "RESOURCE_EXHAUSTED"}}), 2);
  EXPECT_EQ(Get("pfm_refusals_total", {{"code", "PERMISSION_DENIED"}}), 1);
  EXPECT_EQ(Get("pfm_refusals_total", {{"code", "UNKNOWN"}}), 1);
  EXPECT_EQ(Get("pfm_refusals_total", {{"code", "NOT_FOUND"}}), 0);
  EXPECT_EQ(Get("pfm_refusals_total", {{"code", "OK"}}), -1);
  EXPECT_EQ(Family("pfm_refusals_total").metric.size(), 16u);
}

TEST_F(MetricsTest, TracerTotalsAreZeroOnTheSim) {
  Collect();
  EXPECT_EQ(Get("pfm_tracer_processes"), 0);
  EXPECT_EQ(Get("pfm_tracer_steps_total"), 0);
  EXPECT_EQ(Get("pfm_tracer_branches_total"), 0);
}

TEST_F(MetricsTest, EveryFamilyIsPfmPrefixedDocumentedAndWellNamed) {
  ASSERT_TRUE(m_.Create(User(kAlice), 1, Lossless(kTask)).ok());
  ASSERT_TRUE(m_.Create(User(kBob), 2, Watches(kTask, 6)).ok());
  ASSERT_NO_FATAL_FAILURE(RunSim(20'000'000));
  Collect();
  std::set<std::string> names;
  for (const MetricFamily& f : families_) {
    EXPECT_TRUE(names.insert(f.name).second) << "twice: " << f.name;
    EXPECT_EQ(f.name.rfind("pfm_", 0), 0u) << f.name;
    EXPECT_TRUE(prometheus::CheckMetricName(f.name)) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
    const bool total = f.name.size() > 6 && f.name.substr(f.name.size() - 6) == "_total";
    EXPECT_EQ(total, f.type == MetricType::Counter) << f.name;
    for (const ClientMetric& m : f.metric)
      for (const ClientMetric::Label& l : m.label)
        EXPECT_TRUE(prometheus::CheckLabelName(l.name)) << f.name << " " << l.name;
  }
  for (const char* n :
       {"pfm_sessions", "pfm_memory_charged_bytes", "pfm_memory_limit_bytes",
        "pfm_memory_held_bytes", "pfm_session_records_total", "pfm_session_lost_records_total",
        "pfm_refusals_total", "pfm_arbiter_rotations_total", "pfm_request_running_ratio",
        "pfm_hw_slots_in_use", "pfm_tracer_steps_total"})
    EXPECT_EQ(names.count(n), 1u) << n;
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, families_);
  EXPECT_NE(text.str().find("# HELP pfm_sessions "), std::string::npos);
  EXPECT_NE(text.str().find("# TYPE pfm_refusals_total counter"), std::string::npos);
}

// ---- the endpoint ----

size_t Entries(const char* dir) {
  size_t n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

// GET `path` over HTTP/1.0 from 127.0.0.1:port: the whole response.
std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == ssize_t(req.size())) {
      char buf[8192];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, size_t(n));
    }
  }
  ::close(fd);
  return out;
}

int PortOf(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

TEST_F(MetricsTest, EndpointServesMetricsAndStopsWithoutLeavingThreadsOrFds) {
  ASSERT_TRUE(m_.Create(User(kAlice), 1, History(kTask)).ok());
  const size_t threads = Entries("/proc/self/task");
  const size_t fds = Entries("/proc/self/fd");
  absl::StatusOr<ListenAddress> where = ParseListenAddress("127.0.0.1:0");
  ASSERT_TRUE(where.ok());
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> e =
      MetricsEndpoint::Start(*where, std::make_shared<MetricsCollector>(&m_, &refusals_));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE((*e)->loopback());
  EXPECT_EQ((*e)->address().rfind("127.0.0.1:", 0), 0u) << (*e)->address();
  const int port = PortOf((*e)->address());
  EXPECT_GT(port, 0);
  for (int i = 0; i < 5; ++i) {
    const std::string r = HttpGet(port, "/metrics");
    EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r.substr(0, 200);
    EXPECT_NE(r.find("\npfm_sessions{role=\"debugger\",uid=\"1000\"} 1\n"), std::string::npos)
        << r;
  }
  const std::string other = HttpGet(port, "/");
  EXPECT_NE(other.substr(0, other.find('\n')).find(" 404 "), std::string::npos)
      << "nothing else is served: " << other;
  // Stopping does not wait out civetweb's 2 s accept poll.
  const auto t0 = std::chrono::steady_clock::now();
  e->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(Entries("/proc/self/task"), threads);
  EXPECT_EQ(Entries("/proc/self/fd"), fds);
  EXPECT_TRUE(HttpGet(port, "/metrics").empty()) << "still listening after it stopped";
}

// The HTTP server's threads read the daemon while the simulated machine
// runs on its own thread and sessions come and go on this one: every
// scrape is whole and consistent (run under TSan too).
TEST(MetricsConcurrency, ScrapesWhileTheMachineRunsAndSessionsComeAndGo) {
  PfmdConfig c = SimConfig();
  c.sim_paused = false;
  SessionManager m(c, SimSkylake());
  RefusalCounts refusals;
  absl::StatusOr<ListenAddress> where = ParseListenAddress("127.0.0.1:0");
  ASSERT_TRUE(where.ok());
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> e =
      MetricsEndpoint::Start(*where, std::make_shared<MetricsCollector>(&m, &refusals));
  ASSERT_TRUE(e.ok()) << e.status();
  const int port = PortOf((*e)->address());
  std::atomic<bool> stop{false};
  std::atomic<int> scrapes{0}, bad{0};
  std::vector<std::thread> scrapers;
  for (int t = 0; t < 3; ++t)
    scrapers.emplace_back([&] {
      while (!stop.load()) {
        const std::string r = HttpGet(port, "/metrics");
        // Whole: the last family is there and the text ends with a line.
        if (r.rfind("HTTP/1.1 200", 0) != 0 || r.find("pfm_tracer_branches_total 0\n") ==
                                                   std::string::npos)
          ++bad;
        ++scrapes;
      }
    });
  for (int i = 0; i < 40; ++i) {
    absl::StatusOr<SessionId> a = m.Create(User(kAlice), 1, Lossless(kTask + i % 4));
    absl::StatusOr<SessionId> w = m.Create(User(kBob), 2, Watches(kTask + i % 4, 6));
    ASSERT_TRUE(a.ok() && w.ok());
    refusals.Count(absl::StatusCode::kNotFound);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(m.Kill(User(kAlice), *a).ok());
    m.Disconnected(2);
  }
  while (scrapes.load() < 20) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;
  for (std::thread& t : scrapers) t.join();
  EXPECT_EQ(bad.load(), 0) << "of " << scrapes.load() << " scrapes";
  e->reset();
  EXPECT_TRUE(m.Idle());
}

TEST_F(MetricsTest, AnAddressInUseIsRefusedWithTheReason) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const size_t threads = Entries("/proc/self/task");
  absl::StatusOr<ListenAddress> where =
      ParseListenAddress("127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
  ASSERT_TRUE(where.ok());
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> e =
      MetricsEndpoint::Start(*where, std::make_shared<MetricsCollector>(&m_, &refusals_));
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(e.status().message().find("Address already in use"), std::string::npos)
      << e.status();
  // None left behind (a thread of an earlier test may still be ending
  // when `threads` was counted: the count may only go down).
  EXPECT_LE(Entries("/proc/self/task"), threads);
  ::close(fd);
}

}  // namespace
}  // namespace pfm
