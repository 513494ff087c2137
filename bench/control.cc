// control: the control path through the real socket. Starts pfmd
// (--driver sim --sim-paused) as a child, connects with libpfm-bts's Client
// and measures
//   1. session_create + session_kill round trips (p50/p99 us), against a
//      "ping" round trip on the same connection in the same run (the cost
//      of the socket and framing alone);
//   2. 1,000 sessions alive at once (history rings of 4 KiB on the sim's
//      pids): time to create them, check "status", kill them all, and the
//      daemon's VmRSS before, during and after.
// pfmd is found in the runfiles (userspace/pfmd/pfmd, a data dependency).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "pfm/client.h"
#include "pfm/session_spec.h"

namespace pfm::bench {
namespace {

constexpr int kSimTasks = 32;  // 1000 sessions / 32 pids < 64 consumers each
constexpr int32_t kFirstPid = 1000;

std::string FindPfmd(const char* argv0) {
  std::vector<std::string> candidates;
  for (const char* env : {"RUNFILES_DIR", "TEST_SRCDIR"})
    if (const char* d = std::getenv(env)) candidates.push_back(std::string(d) + "/pfm");
  candidates.push_back(std::string(argv0) + ".runfiles/pfm");
  candidates.push_back("bazel-bin");
  for (const std::string& c : candidates) {
    std::string p = c + "/userspace/pfmd/pfmd";
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

class Daemon {
 public:
  ~Daemon() { Stop(); }
  int Start(const std::string& pfmd) {
    char tmpl[] = "/tmp/pfmbench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return -errno;
    dir_ = tmpl;
    socket_ = dir_ + "/pfmd.sock";
    const std::string log = dir_ + "/pfmd.log";
    std::vector<std::string> argv = {pfmd,       "--socket",      socket_,
                                     "--driver", "sim",           "--sim-paused",
                                     "--sim-tasks", std::to_string(kSimTasks)};
    pid_ = fork();
    if (pid_ < 0) return -errno;
    if (pid_ == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    for (int i = 0; i < 400; ++i) {
      if (Client::Connect(socket_).ok()) return 0;
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return -ECHILD;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return -ETIMEDOUT;
  }
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
    if (!dir_.empty()) {
      unlink(socket_.c_str());
      unlink((dir_ + "/pfmd.log").c_str());
      rmdir(dir_.c_str());
      dir_.clear();
    }
  }
  // VmRSS of the daemon in KiB, -1 if unreadable.
  long RssKib() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
    return -1;
  }
  const std::string& socket() const { return socket_; }

 private:
  std::string dir_, socket_;
  pid_t pid_ = -1;
};

boost::json::object Spec(int i) {
  SessionSpec s;
  s.role = "debugger";
  s.pid = kFirstPid + i % kSimTasks;
  s.bts = "history";
  s.buffer_bytes = 4096;
  return s.ToJson();
}

absl::StatusOr<uint64_t> Create(Client& c, int i) {
  auto r = c.Call("session_create", boost::json::object{{"spec", Spec(i)}});
  if (!r.ok()) return r.status();
  return r->result.at("id").to_number<uint64_t>();
}

absl::Status Kill(Client& c, uint64_t id) {
  auto r = c.Call("session_kill", boost::json::object{{"id", id}});
  return r.ok() ? absl::OkStatus() : r.status();
}

int Fail(const char* what, const absl::Status& st) {
  std::fprintf(stderr, "control: %s: %s\n", what, st.ToString().c_str());
  return 1;
}

}  // namespace
}  // namespace pfm::bench

int main(int argc, char** argv) {
  using namespace pfm;
  using namespace pfm::bench;
  const Options opt = ParseOptions(
      argc, argv, "pfmd session create+kill latency and 1000 live sessions");
  const int rounds = opt.quick ? 1000 : 10000;
  const int alive = 1000;
  const std::string pfmd = FindPfmd(argv[0]);
  if (pfmd.empty()) {
    std::fprintf(stderr, "control: userspace/pfmd/pfmd not found in the runfiles\n");
    return 1;
  }
  Daemon d;
  if (int rc = d.Start(pfmd); rc != 0) {
    std::fprintf(stderr, "control: pfmd did not start (%d)\n", rc);
    return 1;
  }
  auto client = Client::Connect(d.socket());
  if (!client.ok()) return Fail("connect", client.status());
  Client& c = *client;

  // Warm up both paths (first allocations, page faults in the daemon).
  for (int i = 0; i < 100; ++i) {
    auto id = Create(c, i);
    if (!id.ok()) return Fail("session_create", id.status());
    if (auto st = Kill(c, *id); !st.ok()) return Fail("session_kill", st);
    if (auto p = c.Call("ping"); !p.ok()) return Fail("ping", p.status());
  }

  // 1. Round trips, create+kill interleaved with ping.
  std::vector<double> rt_us, ping_us;
  rt_us.reserve(rounds);
  ping_us.reserve(rounds);
  for (int i = 0; i < rounds; ++i) {
    uint64_t t0 = MonotonicNs();
    auto id = Create(c, i);
    if (!id.ok()) return Fail("session_create", id.status());
    if (auto st = Kill(c, *id); !st.ok()) return Fail("session_kill", st);
    uint64_t t1 = MonotonicNs();
    if (auto p = c.Call("ping"); !p.ok()) return Fail("ping", p.status());
    uint64_t t2 = MonotonicNs();
    rt_us.push_back((t1 - t0) / 1e3);
    ping_us.push_back((t2 - t1) / 1e3);
  }

  // 2. 1000 sessions alive at once.
  const long rss_before = d.RssKib();
  std::vector<uint64_t> ids;
  uint64_t t0 = MonotonicNs();
  for (int i = 0; i < alive; ++i) {
    auto id = Create(c, i);
    if (!id.ok()) return Fail("session_create (alive)", id.status());
    ids.push_back(*id);
  }
  const double create_s = (MonotonicNs() - t0) / 1e9;
  t0 = MonotonicNs();
  auto status = c.Call("status");
  if (!status.ok()) return Fail("status", status.status());
  const double status_ms = (MonotonicNs() - t0) / 1e6;
  const uint64_t listed = status->result.at("sessions").to_number<uint64_t>();
  const long rss_during = d.RssKib();
  t0 = MonotonicNs();
  for (uint64_t id : ids)
    if (auto st = Kill(c, id); !st.ok()) return Fail("session_kill (alive)", st);
  const double kill_s = (MonotonicNs() - t0) / 1e9;
  auto status2 = c.Call("status");
  if (!status2.ok()) return Fail("status", status2.status());
  const uint64_t left = status2->result.at("sessions").to_number<uint64_t>();
  const long rss_after = d.RssKib();

  const double p50 = Percentile(rt_us, 50), p99 = Percentile(rt_us, 99);
  const double ping50 = Percentile(ping_us, 50);
  std::fprintf(stderr, "create+kill: p50 %.1f us p99 %.1f us (ping p50 %.1f us)\n", p50, p99, ping50);
  std::fprintf(stderr, "%d alive: create %.3f s, status %.2f ms (sessions=%llu), kill %.3f s; RSS %ld/%ld/%ld KiB\n",
               alive, create_s, status_ms, static_cast<unsigned long long>(listed),
               kill_s, rss_before, rss_during, rss_after);

  boost::json::object doc = Envelope("control", opt);
  doc["daemon"] = "pfmd --driver sim --sim-paused --sim-tasks 32";
  doc["round_trip"] = boost::json::object{
      {"rounds", rounds},
      {"create_kill_p50_us", p50},
      {"create_kill_p99_us", p99},
      {"ping_p50_us", ping50},
      {"ping_p99_us", Percentile(ping_us, 99)},
      {"create_kill_vs_ping_p50", p50 / ping50}};
  doc["alive"] = boost::json::object{
      {"sessions", alive},
      {"spec", boost::json::serialize(Spec(0))},
      {"create_s", create_s},
      {"status_ms", status_ms},
      {"status_sessions", listed},
      {"kill_s", kill_s},
      {"sessions_left", left},
      {"rss_kib_before", rss_before},
      {"rss_kib_during", rss_during},
      {"rss_kib_after", rss_after},
      {"rss_kib_per_session", double(rss_during - rss_before) / alive}};
  d.Stop();
  PrintJson(doc);
  return listed == uint64_t(alive) && left == 0 ? 0 : 1;
}
