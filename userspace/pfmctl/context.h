// What every pfmctl command is handed: the global options RunPfmctl parsed
// and where to print. A command returns the process exit status, or an error
// that RunPfmctl prints as the one line "pfmctl: <CODE>: <message>".
#ifndef PFM_USERSPACE_PFMCTL_CONTEXT_H_
#define PFM_USERSPACE_PFMCTL_CONTEXT_H_

#include <ostream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/statusor.h"
#include "userspace/pfmd/config.h"

namespace pfm {

struct CliContext {
  std::string socket_flag;  // --socket, if given
  bool json = false;        // --json: one JSON document on stdout
  PfmdConfig embedded;      // how to start an embedded daemon
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
};

// A command's words and arguments, the command word first ("session",
// "create", "--pid", "42"); global options already taken out.
using CommandArgs = std::vector<std::string>;

using CommandFn = absl::StatusOr<int> (*)(const CliContext& ctx,
                                          const CommandArgs& args);

// Prints one JSON document on stdout.
inline void PrintJson(const CliContext& ctx, const boost::json::value& v) {
  *ctx.out << boost::json::serialize(v) << "\n";
}

// A command that a signal ended (record, stream, stat after SIGINT, SIGTERM
// or SIGHUP) finishes its output, returns its status, and asks to die of
// that signal: main() then re-raises it with the default action, as perf
// record and perf stat do at exit, so that a shell running pfmctl sees a
// signal death (a script stops as it does for a ^C'd program) and not an
// exit status of 128 + N. 0: exit normally. Set on the command's thread.
inline int g_exit_signal = 0;
inline void SetExitSignal(int sig) { g_exit_signal = sig; }
inline int ExitSignal() { return g_exit_signal; }

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_CONTEXT_H_
