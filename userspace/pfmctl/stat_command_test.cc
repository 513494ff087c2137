#include "userspace/pfmctl/stat_command.h"

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

}  // namespace
}  // namespace pfm
