#include "userspace/pfmd/config.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

namespace pfm {
namespace {

absl::StatusOr<PfmdConfig> Parse(std::vector<std::string> args) {
  bool help = false;
  return ParsePfmdFlags(args, &help);
}

TEST(PfmdFlags, ParsesTheDesignFlags) {
  auto c = Parse({"--socket", "/tmp/s", "--driver=sim", "--sim-pmu", "icl",
                  "--sim-cpus", "64", "--sim-tasks", "2000", "--sim-seed",
                  "7", "--mem-limit-per-uid", "8MiB", "--mux-interval-ms",
                  "2"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->socket, "/tmp/s");
  EXPECT_EQ(c->driver, "sim");
  EXPECT_EQ(c->sim_pmu, "icl");
  EXPECT_EQ(c->sim_cpus, 64);
  EXPECT_EQ(c->sim_tasks, 2000);
  EXPECT_EQ(c->sim_seed, 7u);
  EXPECT_EQ(c->mem_limit_per_uid, 8u << 20);
  EXPECT_EQ(c->mux_interval_ms, 2);
}

TEST(PfmdFlags, RefusesUnknownFlagNamingIt) {
  auto c = Parse({"--sim-cpus", "4", "--frobnicate"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("--frobnicate"), std::string::npos);
}

TEST(PfmdFlags, RefusesBadValues) {
  EXPECT_FALSE(Parse({"--driver", "gpu"}).ok());
  EXPECT_FALSE(Parse({"--sim-cpus", "0"}).ok());
  EXPECT_FALSE(Parse({"--sim-cpus", "four"}).ok());
  EXPECT_FALSE(Parse({"--mem-limit-per-uid", "lots"}).ok());
  EXPECT_FALSE(Parse({"--mux-interval-ms"}).ok());
  EXPECT_FALSE(Parse({"--socket-mode", "999"}).ok());
}

TEST(PfmdFlags, MetricsAreOffByDefaultAndLoopbackUnlessAnAddressIsGiven) {
  auto c = Parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->metrics_listen.empty());
  c = Parse({"--metrics-listen", "9464"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metrics_listen, "127.0.0.1:9464");
  c = Parse({"--metrics-listen=localhost:0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metrics_listen, "127.0.0.1:0");
  c = Parse({"--metrics-listen", "0.0.0.0:9464"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metrics_listen, "0.0.0.0:9464");
}

TEST(ListenAddress, SaysWhetherItIsLoopback) {
  absl::StatusOr<ListenAddress> a = ParseListenAddress("127.0.0.1:0");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->loopback);
  EXPECT_EQ(a->port, 0);
  a = ParseListenAddress("127.1.2.3:80");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->loopback);
  for (const char* other : {"0.0.0.0:9464", "10.0.0.1:9464", "192.168.1.1:1"}) {
    a = ParseListenAddress(other);
    ASSERT_TRUE(a.ok()) << other;
    EXPECT_FALSE(a->loopback) << other;
    EXPECT_EQ(a->ToString(), other);
  }
}

TEST(ListenAddress, RefusesWhatItCannotBindSayingWhy) {
  for (const char* bad : {"", ":", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                          "127.0.0.1:80x", "abc", "example.com:80", "1.2.3:80",
                          "[::1]:9464", "::1:9464"}) {
    absl::StatusOr<ListenAddress> a = ParseListenAddress(bad);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseListenAddress("[::1]:1").status().message().find("IPv6"), std::string::npos);
  absl::StatusOr<PfmdConfig> c = Parse({"--metrics-listen", "example.com:80"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--metrics-listen"), std::string::npos);
  EXPECT_NE(c.status().message().find("not an IPv4 address"), std::string::npos);
}

std::string WriteConfig(const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/pfmd-config-XXXXXX";
  const int fd = ::mkstemp(path.data());
  EXPECT_GE(fd, 0);
  ::close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(PfmdConfigFile, ReadsEveryKeyWithCommentsAndBlankLines) {
  const std::string path = WriteConfig(
      "# pfmd settings\n"
      "\n"
      "socket = /run/test.sock\n"
      "socket_mode = 0660   # group only\n"
      "driver=sim\n"
      "mem_limit_per_uid = 16MiB\n"
      "mem_limit_total = 256MiB\n"
      "mux_interval_ms = 8\n"
      "sim_pmu = icl\n"
      "sim_cpus = 2\n"
      "sim_tasks = 3\n"
      "sim_seed = 9\n"
      "sim_speed = 1000\n"
      "sim_paused = true\n"
      "metrics_listen = 127.0.0.1:9464\n");
  auto c = Parse({"--config", path});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config_file, path);
  EXPECT_EQ(c->socket, "/run/test.sock");
  EXPECT_EQ(c->socket_mode, 0660u);
  EXPECT_EQ(c->driver, "sim");
  EXPECT_EQ(c->mem_limit_per_uid, 16u << 20);
  EXPECT_EQ(c->mem_limit_total, 256u << 20);
  EXPECT_EQ(c->mux_interval_ms, 8);
  EXPECT_EQ(c->sim_pmu, "icl");
  EXPECT_EQ(c->sim_cpus, 2);
  EXPECT_EQ(c->sim_tasks, 3);
  EXPECT_EQ(c->sim_seed, 9u);
  EXPECT_EQ(c->sim_speed, 1000u);
  EXPECT_TRUE(c->sim_paused);
  EXPECT_EQ(c->metrics_listen, "127.0.0.1:9464");
}

TEST(PfmdFlags, ParsesTheLimitsAsFlagsAndAsFileKeys) {
  auto c = Parse({"--max-connections", "9", "--max-connections-per-uid", "8",
                  "--max-sessions-per-uid", "7", "--max-tracers-per-uid", "6",
                  "--max-perf-fds-per-uid", "5", "--max-consumers-per-uid", "4"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_connections, 9);
  EXPECT_EQ(c->max_connections_per_uid, 8);
  EXPECT_EQ(c->max_sessions_per_uid, 7);
  EXPECT_EQ(c->max_tracers_per_uid, 6);
  EXPECT_EQ(c->max_perf_fds_per_uid, 5);
  EXPECT_EQ(c->max_consumers_per_uid, 4);
  auto f = Parse({"--config", WriteConfig("max_consumers_per_uid = 3\n")});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->max_consumers_per_uid, 3);
  EXPECT_EQ(Parse({}).value().max_consumers_per_uid, 16);
  // At least one: a uid that may create a session may have a stream.
  auto zero = Parse({"--max-consumers-per-uid", "0"});
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("--max-consumers-per-uid"), std::string::npos);
}

// --soft-bts-cpu: bind by default, free on request, as a flag or a key;
// anything else is named.
TEST(PfmdFlags, SoftBtsCpuIsBindUnlessFree) {
  EXPECT_EQ(Parse({}).value().soft_bts_cpu, "bind");
  EXPECT_EQ(Parse({"--soft-bts-cpu", "free"}).value().soft_bts_cpu, "free");
  auto f = Parse({"--config", WriteConfig("soft_bts_cpu = free\n")});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->soft_bts_cpu, "free");
  auto bad = Parse({"--soft-bts-cpu", "pinned"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("bind or free"), std::string::npos) << bad.status();
}

TEST(PfmdConfigFile, FlagsOverrideTheFileWhereverTheyStand) {
  const std::string path =
      WriteConfig("mem_limit_per_uid = 16MiB\nsim_cpus = 2\ndriver = sim\n");
  auto c = Parse({"--mem-limit-per-uid", "1MiB", "--config=" + path});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mem_limit_per_uid, 1u << 20);
  EXPECT_EQ(c->sim_cpus, 2);  // from the file: no flag says otherwise
  EXPECT_EQ(c->driver, "sim");
}

TEST(PfmdConfigFile, RefusesUnknownKeyNamingTheLine) {
  const std::string path = WriteConfig("driver = sim\n\nmem_limit = 1MiB\n");
  auto c = Parse({"--config", path});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(path + ":3: unknown key 'mem_limit'"),
            std::string::npos)
      << c.status();
  // Flag-only and flag-spelled keys are not config keys.
  PfmdConfig cfg;
  EXPECT_FALSE(ParsePfmdConfigText("idle_exit_s = 5", "f", &cfg).ok());
  EXPECT_FALSE(ParsePfmdConfigText("sim-cpus = 5", "f", &cfg).ok());
  EXPECT_FALSE(ParsePfmdConfigText("--socket = /x", "f", &cfg).ok());
}

TEST(PfmdConfigFile, RefusesBadLinesAndValuesNamingTheLine) {
  PfmdConfig c;
  absl::Status s = ParsePfmdConfigText("driver = sim\nsim_cpus 4\n", "cfg", &c);
  EXPECT_NE(s.message().find("cfg:2: expected 'key = value'"), std::string::npos) << s;
  s = ParsePfmdConfigText("sim_cpus = 0\n", "cfg", &c);
  EXPECT_NE(s.message().find("cfg:1: sim_cpus = 0: --sim-cpus 0: expected an integer"),
            std::string::npos)
      << s;
  s = ParsePfmdConfigText("sim_paused = yes\n", "cfg", &c);
  EXPECT_FALSE(s.ok());
  s = ParsePfmdConfigText("mem_limit_total = lots\n", "cfg", &c);
  EXPECT_NE(s.message().find("cfg:1:"), std::string::npos) << s;
  auto missing = Parse({"--config", "/nonexistent/pfmd.conf"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/pfmd.conf"), std::string::npos);
  EXPECT_FALSE(Parse({"--config"}).ok());
}

TEST(ResolveSocketPath, FlagThenEnvironmentThenDefault) {
  ::unsetenv("PFMD_SOCKET");
  EXPECT_EQ(ResolveSocketPath(""), "/run/pfmd.sock");
  ::setenv("PFMD_SOCKET", "/tmp/env.sock", 1);
  EXPECT_EQ(ResolveSocketPath(""), "/tmp/env.sock");
  EXPECT_EQ(ResolveSocketPath("/tmp/flag.sock"), "/tmp/flag.sock");
  ::unsetenv("PFMD_SOCKET");
}

}  // namespace
}  // namespace pfm
