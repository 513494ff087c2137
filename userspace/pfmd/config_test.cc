#include "userspace/pfmd/config.h"

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
