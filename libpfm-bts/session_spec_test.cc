#include "pfm/session_spec.h"

#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace pfm {
namespace {

TEST(SessionSpec, RoundTripsThroughJson) {
  SessionSpec s;
  s.role = "debugger";
  s.pid = 1000;
  s.tid = 1003;
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

TEST(SessionSpec, ATidIsAThreadOfAPidTarget) {
  auto r = SessionSpec::FromJson({{"cpu", 0}, {"tid", 5}, {"bts", "lossless"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tid 5: a thread of a --pid target"), std::string::npos)
      << r.status();
  r = SessionSpec::FromJson({{"pid", 4}, {"tid", 5}, {"bts", "lossless"}, {"inherit", true}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--inherit"), std::string::npos) << r.status();
  EXPECT_FALSE(SessionSpec::FromJson({{"pid", 4}, {"tid", -2}, {"bts", "lossless"}}).ok());
  r = SessionSpec::FromJson({{"pid", 4}, {"tid", 5}, {"bts", "lossless"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tid, 5);
  // No tid: every thread, and no "tid" on the wire.
  r = SessionSpec::FromJson({{"pid", 4}, {"bts", "lossless"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tid, 0);
  EXPECT_EQ(r->ToJson().if_contains("tid"), nullptr);
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
  EXPECT_FALSE(ParseBreakpoint("0xzz:1:x").ok());
  EXPECT_FALSE(ParseBreakpoint("0x1000:1:q").ok());
  // A bare address is an execute breakpoint.
  b = ParseBreakpoint("0x401000");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ToString(), "0x401000:1:x");
}

TEST(ParseBreakpoint, NamesWaitForAnAddress) {
  for (const auto& [text, name, len, access] :
       std::vector<std::tuple<std::string, std::string, uint32_t, std::string>>{
           {"main", "main", 1, "x"},
           {"prog.c:42", "prog.c:42", 1, "x"},
           {"sym+0x10", "sym+0x10", 1, "x"},
           {"pfm::Foo", "pfm::Foo", 1, "x"},
           {"counter:8:w", "counter:8:w", 8, "w"},
           {"prog.c:42:1:x", "prog.c:42", 1, "x"},
           {"ns::counter:4:rw", "ns::counter", 4, "rw"}}) {
    absl::StatusOr<BreakpointSpec> b = ParseBreakpoint(text);
    ASSERT_TRUE(b.ok()) << text << ": " << b.status();
    EXPECT_EQ(b->name, name == "counter:8:w" ? "counter" : name) << text;
    EXPECT_EQ(b->len, len) << text;
    EXPECT_EQ(b->access, access) << text;
    EXPECT_FALSE(b->resolved()) << text;
    EXPECT_EQ(b->ToString(), text == "prog.c:42:1:x" ? "prog.c:42" : text);
  }
  EXPECT_FALSE(ParseBreakpoint("main:8:x").ok());      // execute is length 1
  EXPECT_FALSE(ParseBreakpoint("two words").ok());
  EXPECT_FALSE(ParseBreakpoint(std::string(kMaxBreakpointNameBytes + 1, 'f')).ok());
  EXPECT_FALSE(ParseBreakpoint("0x1000:1:x ()").ok());
  EXPECT_FALSE(ParseBreakpoint("main (main)").ok());  // a name names an address
}

TEST(ParseBreakpoint, ResolvedNameRoundTripsAndPfmdRefusesUnresolved) {
  absl::StatusOr<BreakpointSpec> b = ParseBreakpoint("main");
  ASSERT_TRUE(b.ok());
  b->addr = 0x5555555551b9;
  EXPECT_EQ(b->ToString(), "0x5555555551b9:1:x (main)");
  absl::StatusOr<BreakpointSpec> back = ParseBreakpoint(b->ToString());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->addr, 0x5555555551b9u);
  EXPECT_EQ(back->name, "main");
  EXPECT_TRUE(back->resolved());

  SessionSpec s;
  s.pid = 1;
  s.breakpoints = {*ParseBreakpoint("main"), *ParseBreakpoint("0x401000:1:x")};
  EXPECT_TRUE(s.HasUnresolvedBreakpoints());
  absl::StatusOr<SessionSpec> refused = SessionSpec::FromJson(s.ToJson());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'main' is a name"), std::string::npos)
      << refused.status();
  absl::StatusOr<SessionSpec> allowed =
      SessionSpec::FromJson(s.ToJson(), SessionSpec::UnresolvedNames::kAllow);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_EQ(allowed->breakpoints[0].name, "main");
  s.breakpoints[0] = *back;
  EXPECT_FALSE(s.HasUnresolvedBreakpoints());
  absl::StatusOr<SessionSpec> ok = SessionSpec::FromJson(s.ToJson());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->breakpoints[0].ToString(), "0x5555555551b9:1:x (main)");
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
