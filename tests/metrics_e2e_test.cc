// End to end, issue 15 (part 3): pfmd's Prometheus /metrics. The real pfmd
// and pfmctl, a real TCP scrape, the real `promtool check metrics` on what
// it returns, and a real Prometheus server scraping pfmd until its query
// agrees with `pfmctl status`. Skips only when promtool or prometheus is
// not installed (tools/install_deps.sh installs them).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Contains;
using testing::FdCount;
using testing::Num;
using testing::Pfmctl;
using testing::PfmctlJson;
using testing::StartsWith;
using Clock = std::chrono::steady_clock;

constexpr char kPromtool[] = "/usr/bin/promtool";
constexpr char kPrometheus[] = "/usr/bin/prometheus";
// How long Prometheus may take to start, scrape pfmd and answer the query.
constexpr std::chrono::seconds kPrometheusWait{30};

bool Installed(const char* path) { return ::access(path, X_OK) == 0; }

struct HttpReply {
  int status = 0;  // 0: no answer
  std::string body;
};

// GET `target` ("/metrics") from 127.0.0.1:port over HTTP/1.0 (the server
// closes after the reply); 5 s at most.
HttpReply HttpGet(int port, const std::string& target) {
  HttpReply r;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return r;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string raw;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[16384];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
        raw.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  const size_t end = raw.find("\r\n\r\n");
  if (!StartsWith(raw, "HTTP/1.") || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  r.body = raw.substr(end + 4);
  return r;
}

int PortOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? 0 : std::atoi(address.c_str() + colon + 1);
}

// A port nothing listens on now (bound and released; the kernel does not
// hand it out again at once).
int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// The samples of an exposition: "name{labels}" -> value.
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

// The sum of every sample of metric `name`; -1 if it has none.
double SumOf(const std::map<std::string, double>& samples, const std::string& name) {
  double sum = 0;
  bool any = false;
  for (const auto& [series, v] : samples) {
    if (series == name || StartsWith(series, name + "{")) {
      sum += v;
      any = true;
    }
  }
  return any ? sum : -1;
}

// TCP sockets pfmd holds in LISTEN state, as "IP:PORT" (/proc/net/tcp and
// tcp6, matched by inode with pfmd's fds), and how many TCP sockets of any
// state it holds.
struct TcpSockets {
  std::vector<std::string> listening;
  size_t all = 0;
};
TcpSockets TcpSocketsOf(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd/";
  for (int fd = 0; fd < 4096; ++fd) {
    char target[256];
    const ssize_t n = ::readlink((fd_dir + std::to_string(fd)).c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string t(target, static_cast<size_t>(n));
    if (StartsWith(t, "socket:[")) inodes.insert(t.substr(8, t.size() - 9));
  }
  TcpSockets out;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (inodes.count(inode) == 0) continue;
      ++out.all;
      if (st != "0A") continue;  // TCP_LISTEN
      const size_t colon = local.find(':');
      const int port = std::stoi(local.substr(colon + 1), nullptr, 16);
      std::string ip = local.substr(0, colon);
      if (ip.size() == 8) {  // IPv4, little-endian hex
        in_addr a{};
        a.s_addr = static_cast<in_addr_t>(std::stoul(ip, nullptr, 16));
        char buf[INET_ADDRSTRLEN];
        ip = ::inet_ntop(AF_INET, &a, buf, sizeof(buf));
      }
      out.listening.push_back(ip + ":" + std::to_string(port));
    }
  }
  return out;
}

// pfmd's fd count once connections that just closed are gone from it
// (pfmctl's, a scrape's): the same count twice, 100 ms apart.
int SettledFdCount(pid_t pid) {
  int last = FdCount(pid);
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int now = FdCount(pid);
    if (now == last) return now;
    last = now;
  }
  return last;
}

size_t ThreadCount(pid_t pid) {
  size_t n = 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (StartsWith(line, "Threads:")) n = std::stoul(line.substr(8));
  return n;
}

// A real Prometheus server on 127.0.0.1, scraping `target` every second,
// with its data and log in `dir`. Stopped (SIGTERM, then SIGKILL after
// 15 s) by Stop() or the destructor; it dies with the test too
// (PR_SET_PDEATHSIG).
class PrometheusServer {
 public:
  PrometheusServer(const std::string& target, const std::string& dir)
      : port_(FreeLoopbackPort()), log_(dir + "/prometheus.log") {
    const std::string config = dir + "/prometheus.yml";
    std::ofstream(config) << "global:\n"
                             "  scrape_interval: 1s\n"
                             "  scrape_timeout: 1s\n"
                             "  evaluation_interval: 1s\n"
                             "scrape_configs:\n"
                             "  - job_name: pfmd\n"
                             "    static_configs:\n"
                             "      - targets: ['"
                          << target << "']\n";
    const std::vector<std::string> argv = {
        kPrometheus,
        "--config.file=" + config,
        "--storage.tsdb.path=" + dir + "/data",
        "--web.listen-address=127.0.0.1:" + std::to_string(port_),
        "--log.level=warn"};
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int out = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      ::dup2(null, 0);
      ::dup2(out, 1);
      ::dup2(out, 2);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~PrometheusServer() { Stop(); }
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  int port() const { return port_; }
  bool running() const { return pid_ > 0; }
  std::string Log() const { return testing::ReadFile(log_); }

  // The value of an instant query's first sample; nullopt-like "" if the
  // result is empty or the server does not answer (yet).
  std::string Query(const std::string& promql) const {
    const HttpReply r = HttpGet(port_, "/api/v1/query?query=" + promql);
    if (r.status != 200) return "";
    boost::system::error_code ec;
    const json::value v = json::parse(r.body, ec);
    if (ec || !v.is_object()) return "";
    const json::value* data = v.as_object().if_contains("data");
    if (data == nullptr || !data->is_object()) return "";
    const json::value* result = data->as_object().if_contains("result");
    if (result == nullptr || !result->is_array() || result->as_array().empty()) return "";
    return testing::Str(result->as_array()[0].at("value").as_array()[1]);
  }

  // SIGTERM and wait; SIGKILL after 15 s. True if it exited by itself.
  bool Stop() {
    if (pid_ <= 0) return true;
    ::kill(pid_, SIGTERM);
    int status = 0;
    const Clock::time_point until = Clock::now() + std::chrono::seconds(15);
    while (Clock::now() < until) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return false;
  }

 private:
  const int port_;
  const std::string log_;
  pid_t pid_ = -1;
};

class MetricsE2e : public testing::DaemonTest {
 protected:
  // pfmd on the sim with /metrics on a free loopback port.
  void StartWithMetrics(std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"--metrics-listen", "127.0.0.1:0"});
    ASSERT_NO_FATAL_FAILURE(StartSim(extra));
    ASSERT_NO_FATAL_FAILURE(FindMetrics());
  }
  void FindMetrics() {
    const json::value st = PfmctlJson(socket(), {"status"});
    const json::value* a = st.as_object().if_contains("metrics_address");
    ASSERT_TRUE(a != nullptr && a->is_string()) << json::serialize(st);
    address_ = std::string(a->as_string());
    port_ = PortOf(address_);
    ASSERT_GT(port_, 0) << address_;
  }
  std::string Scrape() {
    const HttpReply r = HttpGet(port_, "/metrics");
    EXPECT_EQ(r.status, 200) << r.body;
    return r.body;
  }
  uint64_t StatusSessions() { return Num(PfmctlJson(socket(), {"status"}).at("sessions")); }

  std::string address_;
  int port_ = 0;
};

// Skylake events that only go on general-purpose counters: ten of them
// on one task take turns in its eight GP counters.
const std::vector<std::string> kGpEvents = {
    "branch-instructions", "branch-misses", "cache-references", "cache-misses",
    "bus-cycles", "L2_RQSTS.REFERENCES", "BR_INST_RETIRED.ALL_BRANCHES",
    "BR_MISP_RETIRED.ALL_BRANCHES", "MEM_LOAD_RETIRED.L1_HIT", "MEM_LOAD_RETIRED.L2_HIT"};

TEST_F(MetricsE2e, PromtoolAcceptsTheScrapeAndPrometheusAgreesWithStatus) {
  if (!Installed(kPromtool) || !Installed(kPrometheus))
    GTEST_SKIP() << kPromtool << " or " << kPrometheus
                 << " is not installed (tools/install_deps.sh installs prometheus)";
  ASSERT_NO_FATAL_FAILURE(StartWithMetrics({"--sim-pmu", "skl", "--sim-cpus", "2"}));
  Create({"--role", "debugger", "--pid", "1000", "--bts", "history", "--buffer", "2KiB"});
  Create({"--pid", "1001", "--bts", "lossless"});
  std::vector<std::string> counters = {"--pid", "1002"};
  for (const std::string& e : kGpEvents) counters.insert(counters.end(), {"--counter", e});
  Create(counters);
  Create({"--pid", "1000", "--breakpoint", "0x601000:8:w"});
  const uint64_t sessions = StatusSessions();
  ASSERT_EQ(sessions, 4u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the sim runs

  const std::string text = Scrape();
  const std::map<std::string, double> s = Samples(text);
  EXPECT_EQ(SumOf(s, "pfm_sessions"), double(sessions)) << text;
  EXPECT_EQ(s.count("pfm_sessions{role=\"debugger\",uid=\"" + std::to_string(::getuid()) + "\"}"),
            1u)
      << text;
  EXPECT_GT(SumOf(s, "pfm_arbiter_rotations_total"), 0) << text;
  EXPECT_EQ(s.count("pfm_memory_limit_bytes{scope=\"uid\"}"), 1u) << text;
  EXPECT_GT(SumOf(s, "pfm_request_running_ratio"), 0) << text;
  EXPECT_GT(SumOf(s, "pfm_session_records_total"), 0) << text;
  std::cout << "---- /metrics (pfm_ families, abridged) ----\n";
  std::istringstream lines(text);
  size_t shown = 0;
  for (std::string line; std::getline(lines, line) && shown < 80;)
    if (Contains(line, "pfm_")) {
      std::cout << line << "\n";
      ++shown;
    }

  // The real promtool: the exposition parses and passes its lint.
  const std::string dir = testing::MakeTempDir("metrics");
  const std::string file = dir + "/scrape.txt";
  std::ofstream(file) << text;
  const testing::Result check =
      testing::Run({"/bin/sh", "-c", std::string("exec ") + kPromtool + " check metrics < " + file});
  EXPECT_EQ(check.exit_code, 0) << "promtool check metrics:\n"
                                << check.out << check.err << "\non:\n"
                                << text;
  std::cout << "promtool check metrics: exit " << check.exit_code << " " << check.out
            << check.err << "\n";

  // The real Prometheus, scraping pfmd every second, until its view of
  // sum(pfm_sessions) is what `pfmctl status` says.
  PrometheusServer prom(address_, dir);
  ASSERT_TRUE(prom.running());
  const Clock::time_point start = Clock::now();
  std::string value;
  while (Clock::now() - start < kPrometheusWait) {
    value = prom.Query("sum(pfm_sessions)");
    if (value == std::to_string(sessions)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(value, std::to_string(StatusSessions()))
      << "after " << waited << " s; prometheus log:\n"
      << prom.Log();
  std::cout << "prometheus: sum(pfm_sessions) = " << value << " after " << waited
            << " s; pfmctl status: " << sessions << " sessions\n";
  // A session ends: Prometheus follows.
  json::value list = PfmctlJson(socket(), {"session", "list"});
  ASSERT_EQ(Pfmctl(socket(), {"session", "kill", testing::Str(list.as_array()[0].at("id"))})
                .exit_code,
            0);
  const uint64_t after = StatusSessions();
  while (Clock::now() - start < 2 * kPrometheusWait) {
    value = prom.Query("sum(pfm_sessions)");
    if (value == std::to_string(after)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_EQ(value, std::to_string(after)) << prom.Log();
  EXPECT_EQ(prom.Query("up{job=\"pfmd\"}"), "1");
  EXPECT_TRUE(prom.Stop()) << "prometheus did not exit on SIGTERM within 15 s";
  EXPECT_FALSE(prom.running());
}

TEST_F(MetricsE2e, RefusalsRecordsAndEndedSessionsFollowTheDaemon) {
  ASSERT_NO_FATAL_FAILURE(StartWithMetrics({"--sim-pmu", "skl"}));
  std::map<std::string, double> s = Samples(Scrape());
  EXPECT_EQ(s["pfm_refusals_total{code=\"RESOURCE_EXHAUSTED\"}"], 0);
  EXPECT_EQ(s["pfm_refusals_total{code=\"NOT_FOUND\"}"], 0);
  // Four pinned breakpoints fill the debug registers; a fifth is refused.
  for (int i = 0; i < 4; ++i)
    Create({"--role", "debugger", "--pid", "1000", "--breakpoint",
            "0x60" + std::to_string(1 + i) + "000:8:w"});
  testing::Result r = Pfmctl(socket(), {"session", "create", "--role", "debugger", "--pid",
                                        "1000", "--breakpoint", "0x609000:8:w"});
  ASSERT_NE(r.exit_code, 0);
  ASSERT_TRUE(Contains(r.err, "RESOURCE_EXHAUSTED")) << r.err;
  ASSERT_NE(Pfmctl(socket(), {"session", "show", "999"}).exit_code, 0);
  ASSERT_NE(Pfmctl(socket(), {"session", "show", "998"}).exit_code, 0);
  const uint64_t id = Create({"--pid", "1001", "--bts", "lossless"});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  s = Samples(Scrape());
  EXPECT_EQ(s["pfm_refusals_total{code=\"RESOURCE_EXHAUSTED\"}"], 1);
  EXPECT_EQ(s["pfm_refusals_total{code=\"NOT_FOUND\"}"], 2);
  const std::string series =
      "{session=\"" + std::to_string(id) + "\",uid=\"" + std::to_string(::getuid()) +
      "\",role=\"profiler\"}";
  ASSERT_EQ(s.count("pfm_session_records_total" + series), 1u);
  EXPECT_GT(s["pfm_session_records_total" + series], 0);
  EXPECT_EQ(s.count("pfm_session_lost_records_total" + series), 1u);
  EXPECT_LE(SumOf(s, "pfm_hw_slots_in_use"), 4) << "four pinned breakpoints at most";
  // The session ends: none of its series stay.
  ASSERT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
  const std::string text = Scrape();
  EXPECT_FALSE(Contains(text, "session=\"" + std::to_string(id) + "\"")) << text;
  EXPECT_EQ(SumOf(Samples(text), "pfm_sessions"), double(StatusSessions()));
}

TEST_F(MetricsE2e, ScrapesLeakNoFdOrThreadAndTheEndpointStopsWithPfmd) {
  ASSERT_NO_FATAL_FAILURE(StartWithMetrics());
  Create({"--pid", "1000", "--bts", "history"});
  Scrape();
  const pid_t pid = d_->pid();
  const int fds = SettledFdCount(pid);
  const size_t threads = ThreadCount(pid);
  for (int i = 0; i < 30; ++i) Scrape();
  EXPECT_EQ(SettledFdCount(pid), fds);
  EXPECT_EQ(ThreadCount(pid), threads);
  // SIGTERM stops the HTTP server with the rest: a clean exit, the port
  // closed.
  EXPECT_EQ(d_->Stop(), 0);
  EXPECT_EQ(HttpGet(port_, "/metrics").status, 0);
}

TEST_F(MetricsE2e, ListensOnLoopbackWhenOnlyAPortIsGiven) {
  ASSERT_NO_FATAL_FAILURE(StartSim({"--metrics-listen", "0"}));
  ASSERT_NO_FATAL_FAILURE(FindMetrics());
  EXPECT_TRUE(StartsWith(address_, "127.0.0.1:")) << address_;
  const TcpSockets tcp = TcpSocketsOf(d_->pid());
  ASSERT_EQ(tcp.listening.size(), 1u);
  EXPECT_EQ(tcp.listening[0], address_);
  EXPECT_EQ(Samples(Scrape()).count("pfm_memory_allocated_bytes"), 1u);
}

TEST_F(MetricsE2e, NoListenerWithoutTheFlag) {
  ASSERT_NO_FATAL_FAILURE(StartSim({}));
  const json::value st = PfmctlJson(socket(), {"status"});
  EXPECT_TRUE(st.at("metrics_address").is_null()) << json::serialize(st);
  const TcpSockets tcp = TcpSocketsOf(d_->pid());
  EXPECT_EQ(tcp.all, 0u) << "pfmd holds a TCP socket";
  EXPECT_TRUE(tcp.listening.empty());
}

// pfmd run to its idle exit, its stderr captured.
testing::Result RunPfmdBriefly(const std::vector<std::string>& flags) {
  const std::string dir = testing::MakeSocketDir();
  std::vector<std::string> argv = {testing::PfmdPath(), "--socket", dir + "/pfmd.sock",
                                   "--driver", "sim", "--idle-exit-s", "1"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  testing::Result r = testing::Run(argv, {}, 30);
  ::rmdir(dir.c_str());
  return r;
}

TEST(MetricsLog, SaysWhereItListensAndWhenThatIsNotLoopback) {
  testing::Result r = RunPfmdBriefly({"--metrics-listen", "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "pfmd: metrics on http://127.0.0.1:")) << r.err;
  EXPECT_FALSE(Contains(r.err, "NOT loopback")) << r.err;
  r = RunPfmdBriefly({"--metrics-listen", "0.0.0.0:0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "pfmd: metrics on http://0.0.0.0:")) << r.err;
  EXPECT_TRUE(Contains(r.err, "NOT loopback")) << r.err;
  // A bad address is refused before anything starts.
  r = RunPfmdBriefly({"--metrics-listen", "metrics.example:9464"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "--metrics-listen")) << r.err;
}

TEST(MetricsLog, AnAddressInUseStopsPfmdNamingIt) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string where = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const testing::Result r = RunPfmdBriefly({"--metrics-listen", where});
  ::close(fd);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "UNAVAILABLE")) << r.err;
  EXPECT_TRUE(Contains(r.err, where)) << r.err;
  EXPECT_TRUE(Contains(r.err, "Address already in use")) << r.err;
}

// The host driver: a soft-BTS tracer single-steps a real process, and its
// steps reach /metrics; they stay counted after the tracer is gone.
TEST_F(MetricsE2e, TracerStepsOnTheHost) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: ptrace on any process";
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({"--driver", "host", "--metrics-listen", "127.0.0.1:0"}));
  ASSERT_NO_FATAL_FAILURE(FindMetrics());
  const pid_t child = ::fork();
  if (child == 0) {
    for (;;) {
      for (volatile int i = 0; i < 200; ++i) {
      }
    }
  }
  // Killed however the test ends.
  testing::ScopedChild reaper{child};
  const uint64_t id = Create({"--pid", std::to_string(child), "--bts", "lossless"});
  std::map<std::string, double> s;
  const Clock::time_point until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until) {
    s = Samples(Scrape());
    if (s["pfm_tracer_steps_total"] > 1000) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(s["pfm_tracer_processes"], 1);
  EXPECT_GT(s["pfm_tracer_steps_total"], 1000);
  EXPECT_GT(s["pfm_tracer_branches_total"], 0);
  // Bound to one CPU (pfmd's default on a machine of several), the one
  // session show names.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(mine), &mine), 0);
  if (CPU_COUNT(&mine) >= 2) {
    const boost::json::value shown =
        testing::PfmctlJson(socket(), {"session", "show", std::to_string(id)});
    const boost::json::value& cpu = shown.at("soft_bts").at("bound_cpu");
    ASSERT_TRUE(cpu.is_int64()) << boost::json::serialize(shown);
    EXPECT_EQ(SumOf(s, "pfm_tracer_processes_bound"), 1);
    EXPECT_EQ(s.count("pfm_tracer_processes_bound{cpu=\"" + std::to_string(cpu.as_int64()) +
                      "\"}"),
              1u);
  }
  ASSERT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
  const std::map<std::string, double> after = Samples(Scrape());
  EXPECT_EQ(after.at("pfm_tracer_processes"), 0);
  EXPECT_LE(SumOf(after, "pfm_tracer_processes_bound"), 0) << "a bound tracer left";
  EXPECT_GE(after.at("pfm_tracer_steps_total"), s["pfm_tracer_steps_total"])
      << "a counter never goes down";
}

// The host driver: a breakpoint session (no BTS, so no tracer reports the
// task's switches to the arbiter) holds a debug register of the task in the
// kernel; /metrics says so as `pfmctl resources` does, and its running ratio
// is the kernel's (session show's). Before, /metrics counted the arbiter's
// bookkeeping: no slot in use and no ratio.
TEST_F(MetricsE2e, HostBreakpointsAreTheKernelsAsResourcesShowsThem) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: ptrace on any process";
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({"--driver", "host", "--metrics-listen", "127.0.0.1:0"}));
  ASSERT_NO_FATAL_FAILURE(FindMetrics());
  static volatile int watched = 0;
  const pid_t child = ::fork();
  if (child == 0) {
    for (;;) {
      watched = watched + 1;
      ::usleep(1000);
    }
  }
  testing::ScopedChild reaper{child};
  char bp[64];
  std::snprintf(bp, sizeof(bp), "0x%lx:4:w",
                static_cast<unsigned long>(reinterpret_cast<uintptr_t>(&watched)));
  const uint64_t id = Create({"--pid", std::to_string(child), "--pinned", "--breakpoint", bp});
  const json::value res = PfmctlJson(socket(), {"resources"});
  EXPECT_NE(json::serialize(res).find("\"on hw\""), std::string::npos) << res;
  std::map<std::string, double> s;
  const Clock::time_point until = Clock::now() + std::chrono::seconds(10);
  std::string text;
  while (Clock::now() < until) {
    text = Scrape();
    s = Samples(text);
    if (Contains(text, "pfm_request_running_ratio{")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(s["pfm_host_breakpoints_on_hw"], 1) << text;
  EXPECT_EQ(SumOf(s, "pfm_hw_slots_in_use"), 0) << "per-CPU slots are the arbiter's";
  size_t ratios = 0;
  for (const auto& [series, v] : s)
    if (StartsWith(series, "pfm_request_running_ratio{") &&
        Contains(series, "event=\"" + std::string(bp) + "\"")) {
      ++ratios;
      EXPECT_EQ(v, 1) << series << ": a pinned breakpoint is never multiplexed out";
    }
  EXPECT_EQ(ratios, 1u) << text;
  const json::value show = PfmctlJson(socket(), {"session", "show", std::to_string(id)});
  EXPECT_EQ(show.at("breakpoints").as_array().size(), 1u) << show;
  ASSERT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
  EXPECT_EQ(Samples(Scrape()).at("pfm_host_breakpoints_on_hw"), 0);
}

}  // namespace
}  // namespace pfm
