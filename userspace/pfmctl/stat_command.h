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

#include "absl/status/statusor.h"
#include "userspace/pfmctl/context.h"

namespace pfm {

absl::StatusOr<int> StatCommand(const CliContext& ctx, const CommandArgs& args);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_STAT_COMMAND_H_
