// Commands about the daemon and its machine rather than one session:
// `status`, `resources`, `sim` (the simulated machine) and `shutdown`.
#ifndef PFM_USERSPACE_PFMCTL_DAEMON_COMMANDS_H_
#define PFM_USERSPACE_PFMCTL_DAEMON_COMMANDS_H_

#include "absl/status/statusor.h"
#include "userspace/pfmctl/context.h"

namespace pfm {

// `status`: the machine's PMU, the sessions, the memory charges.
absl::StatusOr<int> StatusCommand(const CliContext& ctx, const CommandArgs& args);
// `resources`: who holds which counter, debug register, BTS/PEBS.
absl::StatusOr<int> ResourcesCommand(const CliContext& ctx, const CommandArgs& args);
// `sim pause|resume|run NS|stats [PID]|exit PID`: prints pfmd's reply as JSON.
absl::StatusOr<int> SimCommand(const CliContext& ctx, const CommandArgs& args);
// `shutdown`: stops the daemon --socket names, else the embedded one; never
// starts one.
absl::StatusOr<int> ShutdownCommand(const CliContext& ctx, const CommandArgs& args);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_DAEMON_COMMANDS_H_
