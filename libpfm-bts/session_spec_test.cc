#include "pfm/session_spec.h"

#include <gtest/gtest.h>

namespace pfm {
namespace {

TEST(SessionSpec, RoundTripsThroughJson) {
  SessionSpec s;
  s.role = "debugger";
  s.pid = 1000;
  s.bts = "history";
  s.buffer_bytes = 8192;
  s.filter = "all";
  s.format = "compact";
  s.pebs_event = "mem_load_retired:l3_miss";
  s.pebs_period = 1000;
  s.counters = {"instructions", "cycles"};
  s.breakpoints = {*ParseBreakpoint("0x401000:1:x"), *ParseBreakpoint("0x601008:8:rw")};
  s.pinned = true;
  auto back = SessionSpec::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), s.ToJson());
}

TEST(SessionSpec, RefusesTwoTargetsOrNone) {
  EXPECT_FALSE(SessionSpec::FromJson({{"bts", "history"}}).ok());
  EXPECT_FALSE(SessionSpec::FromJson({{"bts", "history"}, {"pid", 1}, {"cpu", 0}}).ok());
}

TEST(SessionSpec, RefusesBadValuesNamingThem) {
  auto r = SessionSpec::FromJson({{"pid", 1}, {"bts", "sometimes"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sometimes"), std::string::npos);
  EXPECT_FALSE(SessionSpec::FromJson({{"pid", 1}, {"bts", "history"}, {"buffer_bytes", 12}}).ok());
  EXPECT_FALSE(SessionSpec::FromJson({{"pid", "one"}, {"bts", "history"}}).ok());
  EXPECT_FALSE(SessionSpec::FromJson({{"pid", 1}, {"bts", "history"}, {"block", true}}).ok());
  EXPECT_FALSE(SessionSpec::FromJson({{"cpu", 0}, {"bts", "lossless"}, {"block", true}}).ok());
  EXPECT_FALSE(SessionSpec::FromJson({{"pid", 1}}).ok());  // asks for nothing
  EXPECT_FALSE(SessionSpec::FromJson({{"pid", 1}, {"counters", "cycles"}}).ok());
}

TEST(ParseBreakpoint, ChecksSyntaxLengthAndAlignment) {
  auto b = ParseBreakpoint("0x1000:4:w");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->addr, 0x1000u);
  EXPECT_EQ(b->len, 4u);
  EXPECT_FALSE(ParseBreakpoint("0x1000:3:w").ok());
  EXPECT_FALSE(ParseBreakpoint("0x1002:4:w").ok());
  EXPECT_FALSE(ParseBreakpoint("0x1000:4:x").ok());
  EXPECT_FALSE(ParseBreakpoint("0x1000:4").ok());
  EXPECT_FALSE(ParseBreakpoint("zz:1:x").ok());
  EXPECT_FALSE(ParseBreakpoint("0x1000:1:q").ok());
}

TEST(ParsePebs, SplitsANumericPeriodOnly) {
  std::string ev;
  uint64_t period;
  ASSERT_TRUE(ParsePebs("inst_retired:any_p:2000", &ev, &period).ok());
  EXPECT_EQ(ev, "inst_retired:any_p");
  EXPECT_EQ(period, 2000u);
  ASSERT_TRUE(ParsePebs("inst_retired:any_p", &ev, &period).ok());
  EXPECT_EQ(ev, "inst_retired:any_p");
  EXPECT_EQ(period, 0u);
  EXPECT_FALSE(ParsePebs("cycles:0", &ev, &period).ok());
  EXPECT_FALSE(ParsePebs(":100", &ev, &period).ok());
}

}  // namespace
}  // namespace pfm
