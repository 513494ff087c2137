// pfmctl's commands. Each takes the parsed global context and its own
// arguments (the command word first) and returns the process exit status,
// or an error status that RunPfmctl prints as "pfmctl: CODE: message".
#ifndef PFM_USERSPACE_PFMCTL_COMMANDS_H_
#define PFM_USERSPACE_PFMCTL_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/pfmctl/cli.h"

namespace pfm {

std::string PfmctlUsage();
absl::StatusOr<int> RunCommand(const CliContext& ctx,
                               const std::vector<std::string>& args);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_COMMANDS_H_
