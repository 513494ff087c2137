// `pfmctl stat`: counters of a command or a running process, printed as
// `perf stat` prints them (value, event, and the share of the time it was on
// the hardware when multiplexed), through a pfmd session of counters only
// (no branch tracing: the command runs at full speed).
//
//   pfmctl stat [-e EVENT]... -- CMD ARGS...   run CMD, count until it exits
//   pfmctl stat [-e EVENT]... -p PID           count PID until it exits or ^C
//
// Without -e: perf stat's default set. The software events always; the
// hardware ones (cycles, instructions, branches, branch-misses) where the
// machine has a CPU PMU, else listed as "<not supported>" as perf does.
// Exit status: CMD's (as `perf stat`), 0 for -p, or pfmctl's error.
#ifndef PFM_USERSPACE_PFMCTL_STAT_COMMAND_H_
#define PFM_USERSPACE_PFMCTL_STAT_COMMAND_H_

#include <locale.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/pfmctl/context.h"

namespace pfm {

absl::StatusOr<int> StatCommand(const CliContext& ctx, const CommandArgs& args);

// One counter as `stat` prints it.
struct StatCounter {
  std::string event;     // as asked ("cycles", "task-clock", "cycles:u", ...)
  bool counted = false;  // false: "<not counted>"
  uint64_t value = 0;    // scaled to the whole time (perf stat's count)
  double ratio = 1.0;    // its share of the time on the hardware
};

// The counter lines of `stat`, in perf stat's layout (Debian bookworm's
// perf 6.1: the value in 18 columns, "msec" for the clocks, the event in
// 32, then "# " and perf's derived metric, then "(62.50%)" when
// multiplexed), with perf's metrics (tools/perf/util/stat-shadow.c):
// "CPUs utilized" for task-clock or cpu-clock (its time over
// `elapsed_s`), "GHz" for cycles (over the clock's time), "insn per
// cycle" for instructions (over cycles), "of all branches" for
// branch-misses (over branches), "of all cache refs" for cache-misses
// (over cache-references), each over the one counted with the same
// modifiers ("instructions:u" over "cycles:u"), and for any other event
// its rate per second of the clock's time ("/sec", "K/sec", "M/sec",
// "G/sec") when a clock was counted. Names match in any case. Numbers as
// perf prints them in the locale `numeric` (LC_NUMERIC; null: C): counts
// and the clock's msec with its digit grouping (perf's "%'"), every
// fraction with its decimal point ("1,456" and "49.89 msec" in
// en_US.UTF-8, "18,71 msec" and "0,950" in de_DE.UTF-8). Trailing blanks
// are left out.
std::string StatCounterLines(const std::vector<StatCounter>& counters, double elapsed_s,
                             locale_t numeric = nullptr);

// The user's LC_NUMERIC (LC_ALL, LC_NUMERIC, LANG), as perf stat's
// setlocale(LC_ALL, "") takes it; null (C) when it names no locale this
// system has. Process-wide, made once.
locale_t UserNumericLocale();

// printf under `numeric` (null: C): "%'d" groups digits as it says.
std::string LocaleFormat(locale_t numeric, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_STAT_COMMAND_H_
