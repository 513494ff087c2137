// pfmctl's command-line parsing: the global options, one command's own flags,
// and the session flags that `session create` and `record` share.
//
// Every refusal is INVALID_ARGUMENT, which RunPfmctl reports with exit
// status 2 (a usage error).
#ifndef PFM_USERSPACE_PFMCTL_FLAGS_H_
#define PFM_USERSPACE_PFMCTL_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pfm/session_spec.h"
#include "userspace/pfmctl/context.h"

namespace pfm {

absl::Status UsageError(absl::string_view what);

// Takes the global options out of `args`, wherever they are before a "--":
// --socket PATH, --json, and the embedded daemon's --driver, --sim-pmu,
// --sim-cpus, --sim-tasks, --sim-seed, --sim-speed ("--flag value" or
// "--flag=value"). Sets ctx->socket_flag, ctx->json and ctx->embedded;
// returns the rest (the command and its arguments) in order.
absl::StatusOr<CommandArgs> ParseGlobalFlags(const std::vector<std::string>& args,
                                             CliContext* ctx);

// One command's flags: "--flag value", "--flag=value" or a bare "--flag".
// Nothing after a "--" separator is a flag. Take* remove what they return;
// Positional is what is left.
class CommandFlags {
 public:
  // The arguments from args[first] on (after the command words).
  CommandFlags(const CommandArgs& args, size_t first);

  // Every occurrence of a valued flag (repeatable ones), in order.
  absl::StatusOr<std::vector<std::string>> TakeAll(const std::string& flag);
  // A valued flag given at most once; `def` when absent.
  absl::StatusOr<std::string> Take(const std::string& flag,
                                   const std::string& def = "");
  // Whether a flag without a value was given.
  bool TakeBool(const std::string& flag);
  // The positional arguments left, then "--" and what follows it, if given.
  // Anything else starting with "--" is an unknown flag of `cmd`.
  absl::StatusOr<std::vector<std::string>> Positional(const std::string& cmd);

 private:
  std::vector<std::string> rest_;
};

// An integer in [lo, hi]; `what` names it in the refusal.
absl::StatusOr<int> ParseIntArg(const std::string& what, const std::string& v,
                                int lo, int hi);

// `-t TID` (perf's), as typed: {its process (the Tgid in
// /proc/TID/status), TID}. A usage error for a bad number, NOT_FOUND when no
// thread has that id.
struct ThreadTarget {
  int pid = 0;
  int tid = 0;
};
absl::StatusOr<ThreadTarget> ParseThreadArg(const std::string& v);

// A session id as the user typed it: a positive integer.
absl::StatusOr<uint64_t> ParseSessionId(const std::string& v);

// The session flags (--role, --pid, --tid, --cpu, --bts, --buffer, --filter,
// --format, --pebs, --counter..., --breakpoint..., --pinned, --block,
// --detached). Sessions pfmctl creates are always detached; `record` turns
// that off. Not validated yet: the caller may still set the target, then
// calls ValidateSpec.
absl::StatusOr<SessionSpec> ParseSessionFlags(CommandFlags& f);

// The spec as pfmd will judge its shape (SessionSpec::FromJson), so usage
// errors are caught before anything is started. Breakpoint names (`main`,
// `prog.c:42`) pass: they are resolved against the target once it is known
// (breakpoint_names.h), and the resolved spec is checked again then.
absl::StatusOr<SessionSpec> ValidateSpec(const SessionSpec& s);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_FLAGS_H_
