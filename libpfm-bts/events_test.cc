#include "pfm/events.h"

#include <linux/perf_event.h>

#include <cstdio>
#include <cstdlib>

#include <gtest/gtest.h>

namespace pfm {
namespace {

bool Contains(absl::string_view hay, absl::string_view needle) {
  return hay.find(needle) != absl::string_view::npos;
}

TEST(EncodeEvent, GenericHardwareNamesAreHardwareEvents) {
  auto c = EncodeEvent("cycles");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->type, PERF_TYPE_HARDWARE);
  EXPECT_EQ(c->config, PERF_COUNT_HW_CPU_CYCLES);
  EXPECT_TRUE(c->hardware);
  EXPECT_EQ(c->name, "perf::PERF_COUNT_HW_CPU_CYCLES");
  EXPECT_EQ(c->pmu, "perf");
  EXPECT_FALSE(c->exclude_user);
  EXPECT_FALSE(c->exclude_kernel);

  auto i = EncodeEvent("instructions");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->type, PERF_TYPE_HARDWARE);
  EXPECT_EQ(i->config, PERF_COUNT_HW_INSTRUCTIONS);
}

TEST(EncodeEvent, SoftwareNamesNeedNoCpuPmu) {
  struct {
    const char* name;
    uint64_t config;
  } cases[] = {{"task-clock", PERF_COUNT_SW_TASK_CLOCK},
               {"context-switches", PERF_COUNT_SW_CONTEXT_SWITCHES},
               {"page-faults", PERF_COUNT_SW_PAGE_FAULTS}};
  for (const auto& c : cases) {
    auto e = EncodeEvent(c.name);
    ASSERT_TRUE(e.ok()) << c.name << ": " << e.status();
    EXPECT_EQ(e->type, PERF_TYPE_SOFTWARE) << c.name;
    EXPECT_EQ(e->config, c.config) << c.name;
    EXPECT_FALSE(e->hardware) << c.name;
  }
}

TEST(EncodeEvent, UserModifierExcludesKernel) {
  auto e = EncodeEvent("cycles:u");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE(e->exclude_user);
  EXPECT_TRUE(e->exclude_kernel);
  EXPECT_EQ(e->name, "perf::PERF_COUNT_HW_CPU_CYCLES");
}

TEST(EncodeEvent, RefusesUnknownNameNamingItAndTheReason) {
  auto e = EncodeEvent("no_such_event_xyz");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(e.status().message(), "no_such_event_xyz")) << e.status();
  EXPECT_TRUE(Contains(e.status().message(), "event not found")) << e.status();

  auto bad_mod = EncodeEvent("cycles:nonsense");
  ASSERT_FALSE(bad_mod.ok());
  EXPECT_TRUE(Contains(bad_mod.status().message(), "cycles:nonsense"));
}

TEST(ForcePmu, RefusedOnceLibpfmIsInitialisedWithoutIt) {
  ASSERT_TRUE(EncodeEvent("task-clock").ok());  // initialises libpfm4
  // netburst (Pentium 4) is not this machine's PMU, whatever it is.
  absl::Status s = ForcePmu("netburst");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

// libpfm4 is initialised once per process, so the forced-PMU checks run in a
// fresh process: gtest's "threadsafe" death-test style re-executes this
// binary for the child. The child exits with the number of the first failed
// check (0 = all passed) and says which on stderr.
int ForcedSkylakeChecks() {
  int step = 0;
  auto fail = [&step](const std::string& why) {
    std::fprintf(stderr, "check %d failed: %s\n", step, why.c_str());
    return step;
  };
  ++step;  // 1: an unknown PMU is refused and leaves libpfm4 usable
  absl::Status s = ForcePmu("no_such_pmu");
  if (s.code() != absl::StatusCode::kInvalidArgument ||
      !Contains(s.message(), "no_such_pmu"))
    return fail(s.ToString());
  ++step;  // 2: forcing skl works, twice
  s = ForcePmu("skl");
  if (!s.ok()) return fail(s.ToString());
  s = ForcePmu("skl");
  if (!s.ok()) return fail("second call: " + s.ToString());
  ++step;  // 3: another PMU cannot replace it
  s = ForcePmu("icl");
  if (s.code() != absl::StatusCode::kFailedPrecondition) return fail(s.ToString());
  ++step;  // 4: INST_RETIRED.ANY_P is event 0xC0 umask 0x00 (Intel SDM)
  auto e = EncodeEvent("INST_RETIRED.ANY_P");
  if (!e.ok()) return fail(e.status().ToString());
  if (e->pmu != "skl" || e->type != PERF_TYPE_RAW || e->config != 0xc0 ||
      !e->hardware || e->precise_ok || e->name != "skl::INST_RETIRED:ANY_P")
    return fail("INST_RETIRED.ANY_P -> " + e->fstr);
  ++step;  // 5: MEM_LOAD_RETIRED.L3_MISS is event 0xD1 umask 0x20, PEBS
  e = EncodeEvent("skl::MEM_LOAD_RETIRED.L3_MISS:u");
  if (!e.ok()) return fail(e.status().ToString());
  if (e->config != 0x20d1 || !e->precise_ok || !e->exclude_kernel ||
      e->name != "skl::MEM_LOAD_RETIRED:L3_MISS")
    return fail("MEM_LOAD_RETIRED.L3_MISS -> " + e->fstr);
  ++step;  // 6: libpfm4 4.13 has no INST_RETIRED.ANY (the fixed counter's name)
  e = EncodeEvent("INST_RETIRED.ANY");
  if (e.ok() || !Contains(e.status().message(), "INST_RETIRED.ANY"))
    return fail("INST_RETIRED.ANY was not refused by name");
  ++step;  // 7: generic names still encode although libpfm4's perf PMU is off
  e = EncodeEvent("cycles");
  if (!e.ok() || e->type != PERF_TYPE_HARDWARE || e->config != PERF_COUNT_HW_CPU_CYCLES ||
      !e->hardware)
    return fail(e.ok() ? e->fstr : e.status().ToString());
  e = EncodeEvent("task-clock:u");
  if (!e.ok() || e->type != PERF_TYPE_SOFTWARE || e->config != PERF_COUNT_SW_TASK_CLOCK ||
      e->hardware || !e->exclude_kernel || e->exclude_user)
    return fail(e.ok() ? e->fstr : e.status().ToString());
  ++step;  // 8: unknown names are still refused
  e = EncodeEvent("cycles:bogus");
  if (e.ok()) return fail("cycles:bogus encoded");
  e = EncodeEvent("no_such_event_xyz");
  if (e.ok()) return fail("no_such_event_xyz encoded");
  return 0;
}

TEST(ForcePmu, SkylakeEncodesItsEventsInAFreshProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(ForcedSkylakeChecks()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace pfm
