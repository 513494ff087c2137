// `session create|list|show|kill`: one session at a time, by id.
#ifndef PFM_USERSPACE_PFMCTL_SESSION_COMMANDS_H_
#define PFM_USERSPACE_PFMCTL_SESSION_COMMANDS_H_

#include "absl/status/statusor.h"
#include "userspace/pfmctl/context.h"

namespace pfm {

// Dispatches on args[1]: `create` (the session flags; the session is
// detached: it lives until `session kill`), `list`, `show ID`, `kill ID`.
absl::StatusOr<int> SessionCommand(const CliContext& ctx, const CommandArgs& args);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_SESSION_COMMANDS_H_
