#include "userspace/pfmctl/stat_command.h"

#include <locale.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace pfm {
namespace {

// perf stat's lines (Debian bookworm's perf 6.1, as it printed them for
// `perf stat -- python3 -c pass`, trailing blanks left out): the value in
// 18 columns, the event in 32, then "# " and the metric.
TEST(StatCounterLines, PerfStatsLayoutAndMetrics) {
  const std::vector<StatCounter> c = {
      {"task-clock", true, 200'000'000, 1.0},      // 200 ms of CPU
      {"context-switches", true, 138, 1.0},        // 690 a second of it
      {"page-faults", true, 9317, 1.0},            // 46.585 K a second
      {"cycles", true, 600'000'000, 1.0},          // 3 GHz
      {"instructions", true, 900'000'000, 0.625},  // 1.5 per cycle, multiplexed
      {"branches", true, 3'000'000'000, 1.0},      // 15 G a second
      {"branch-misses", true, 30'000'000, 1.0},    // 1% of them
      {"cpu-migrations", false, 0, 1.0},
  };
  EXPECT_EQ(StatCounterLines(c, 0.5),
            "            200.00 msec task-clock                       #    0.400 CPUs utilized\n"
            "               138      context-switches                 #  690.000 /sec\n"
            "              9317      page-faults                      #   46.585 K/sec\n"
            "         600000000      cycles                           #    3.000 GHz\n"
            "         900000000      instructions                     #    1.50  insn per cycle"
            "           (62.50%)\n"
            "        3000000000      branches                         #   15.000 G/sec\n"
            "          30000000      branch-misses                    #    1.00% of all branches\n"
            "     <not counted>      cpu-migrations\n");
}

// Without a clock, no rates and no GHz; without cycles or branches of
// the same modifiers, no ratios of them (instructions:u over cycles:u,
// not over cycles); a multiplexed event keeps its share after the empty
// metric column; names in any case.
TEST(StatCounterLines, MetricsNeedWhatTheyDivideBy) {
  const std::vector<StatCounter> c = {
      {"page-faults", true, 12, 0.5},
      {"cycles:u", true, 100, 1.0},
      {"branch-misses", true, 5, 1.0},
      {"instructions", true, 80, 1.0},
      {"Instructions:u", true, 50, 1.0},
      {"cache-references", true, 400, 1.0},
      {"cache-misses", true, 10, 1.0},
  };
  EXPECT_EQ(StatCounterLines(c, 1.0),
            "                12      page-faults"
            "                                                          (50.00%)\n"
            "               100      cycles:u\n"
            "                 5      branch-misses\n"
            "                80      instructions\n"
            "                50      Instructions:u                   #    0.50  insn per cycle\n"
            "               400      cache-references\n"
            "                10      cache-misses                     #    2.500 % of all cache refs\n");
  // A clock in capitals is still the clock.
  EXPECT_EQ(StatCounterLines({{"Task-Clock", true, 5'000'000, 1.0}}, 0.01),
            "              5.00 msec Task-Clock                       #    0.500 CPUs utilized\n");
}

// The locale's digit grouping and decimal point, as perf stat prints under
// it (perf 6.1 in en_US.UTF-8: "1,456      context-switches", "49.89 msec";
// in de_DE.UTF-8: "18,71 msec", "#    0,950 CPUs utilized", "#  374,190
// /sec"). The locales are compiled here with localedef into the test's
// directory (LOCPATH), as the system may have only C.
locale_t CompiledLocale(const std::string& name, const std::string& source) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/locales";
  const std::string cmd = "mkdir -p '" + dir + "' && localedef -i " + source +
                          " -f UTF-8 '" + dir + "/" + name + "' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return nullptr;
  ::setenv("LOCPATH", dir.c_str(), 1);
  locale_t loc = newlocale(LC_NUMERIC_MASK, name.c_str(), static_cast<locale_t>(nullptr));
  ::unsetenv("LOCPATH");
  return loc;
}

TEST(StatCounterLines, NumbersInTheUsersLocaleAsPerfPrintsThem) {
  const std::vector<StatCounter> c = {{"task-clock", true, 1'234'567'890, 1.0},
                                      {"context-switches", true, 1'456, 1.0},
                                      {"page-faults", true, 1'234'567, 0.5}};
  const locale_t en = CompiledLocale("en_US.UTF-8", "en_US");
  const locale_t de = CompiledLocale("de_DE.UTF-8", "de_DE");
  ASSERT_NE(en, nullptr) << "localedef en_US (Debian's locales package)";
  ASSERT_NE(de, nullptr);
  EXPECT_EQ(StatCounterLines(c, 2.0, en),
            "          1,234.57 msec task-clock                       #    0.617 CPUs utilized\n"
            "             1,456      context-switches                 #    1.179 K/sec\n"
            "         1,234,567      page-faults                      #  999.999 K/sec"
            "                    (50.00%)\n");
  EXPECT_EQ(StatCounterLines(c, 2.0, de),
            "          1.234,57 msec task-clock                       #    0,617 CPUs utilized\n"
            "             1.456      context-switches                 #    1,179 K/sec\n"
            "         1.234.567      page-faults                      #  999,999 K/sec"
            "                    (50,00%)\n");
  // C (and null): no grouping.
  EXPECT_EQ(StatCounterLines(c, 2.0, nullptr).substr(0, 40),
            "           1234.57 msec task-clock      ");
  EXPECT_EQ(LocaleFormat(de, "%'llu|%.2f", 1234567ULL, 0.5), "1.234.567|0,50");
  // The process's own locale is untouched.
  EXPECT_EQ(LocaleFormat(nullptr, "%.1f", 0.5), "0.5");
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.1f", 0.5);
  EXPECT_STREQ(buf, "0.5");
  freelocale(en);
  freelocale(de);
}

}  // namespace
}  // namespace pfm
