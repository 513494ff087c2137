#include "kernel/drivers/machine.h"

#include <perfmon/pfmlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace pfm {
namespace {

// Reads libpfm4's tables, so the test does not restate the numbers it checks.
pfm_pmu_info_t LibpfmInfo(const char* name) {
  pfm_pmu_info_t found;
  std::memset(&found, 0, sizeof(found));
  for (const pfm_pmu_info_t& info : LibpfmPmus())
    if (std::strcmp(info.name, name) == 0) found = info;
  return found;
}

TEST(LibpfmPmus, ListsLibpfmsCorePmusByTheirNames) {
  const std::vector<std::string> core = LibpfmCorePmuNames();  // initialises
  const std::vector<pfm_pmu_info_t> all = LibpfmPmus();
  ASSERT_FALSE(core.empty());
  EXPECT_GT(all.size(), core.size());  // uncore, perf, ... too
  size_t n_core = 0;
  for (const pfm_pmu_info_t& info : all) {
    EXPECT_NE(info.name, nullptr);
    n_core += info.type == PFM_PMU_TYPE_CORE;
  }
  EXPECT_EQ(n_core, core.size());
  for (const char* want : {"skl", "icl", "amd64_fam19h_zen3"})
    EXPECT_NE(std::find(core.begin(), core.end(), want), core.end()) << want;
}

TEST(DescribeSimMachine, SkylakeHasLibpfmCountersAndDebugStore) {
  MachineInfo m;
  ErrorDetail d;
  ASSERT_EQ(DescribeSimMachine("skl", 4, &m, &d), 0) << d.message;
  pfm_pmu_info_t info = LibpfmInfo("skl");
  ASSERT_GT(info.num_cntrs, 0);
  EXPECT_EQ(m.cpus, 4);
  EXPECT_EQ(m.pmu, "skl");
  EXPECT_EQ(m.gp_counters, info.num_cntrs);
  EXPECT_EQ(m.fixed_counters, info.num_fixed_cntrs);
  EXPECT_EQ(m.debug_registers, 4);
  EXPECT_TRUE(m.bts);
  EXPECT_TRUE(m.pebs);
}

TEST(DescribeSimMachine, AmdZen3HasNoDebugStore) {
  MachineInfo m;
  ASSERT_EQ(DescribeSimMachine("amd64_fam19h_zen3", 2, &m, nullptr), 0);
  EXPECT_FALSE(m.bts);
  EXPECT_FALSE(m.pebs);
  EXPECT_EQ(m.fixed_counters, 0);
  EXPECT_GT(m.gp_counters, 0);
}

TEST(DescribeSimMachine, RefusesUnknownPmuNamingIt) {
  MachineInfo m;
  m.cpus = 7;
  ErrorDetail d;
  EXPECT_EQ(DescribeSimMachine("nosuchpmu", 4, &m, &d), -EINVAL);
  EXPECT_NE(std::strstr(d.message, "nosuchpmu"), nullptr);
  EXPECT_EQ(m.cpus, 7);  // untouched on failure
}

TEST(DescribeSimMachine, RefusesZeroCpus) {
  MachineInfo m;
  EXPECT_EQ(DescribeSimMachine("skl", 0, &m, nullptr), -EINVAL);
}

}  // namespace
}  // namespace pfm
