// pfmctl's logic as a library (main.cc is thin). DESIGN §9 is the contract.
//
// Global flags, accepted anywhere before "--": --socket PATH, --json, and,
// for the embedded daemon pfmctl starts when none answers: --driver
// host|sim, --sim-pmu, --sim-cpus, --sim-tasks, --sim-seed.
// Errors print one line "pfmctl: <CODE>: <message>" on stderr; the exit
// status is 2 for usage errors, 1 for other failures.
#ifndef PFM_USERSPACE_PFMCTL_CLI_H_
#define PFM_USERSPACE_PFMCTL_CLI_H_

#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pfm/client.h"
#include "userspace/pfmd/config.h"

namespace pfm {

struct CliContext {
  std::string socket_flag;  // --socket, if given
  bool json = false;
  PfmdConfig embedded;      // how to start an embedded daemon
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
};

int RunPfmctl(const std::vector<std::string>& args, std::ostream& out,
              std::ostream& err);

// Connects to the daemon: the --socket flag or $PFMD_SOCKET if given
// (UNAVAILABLE if nothing answers there); otherwise /run/pfmd.sock, then the
// per-user private socket, starting an embedded pfmd there if none answers.
// Every connection passes Client::Connect's check of the server's uid; the
// private socket is used only once PrivateSocketPath accepted it.
absl::StatusOr<Client> ConnectOrStart(const CliContext& ctx,
                                      std::string* path_used);

// The per-user private socket of the embedded daemon:
// $XDG_RUNTIME_DIR/pfmd/pfmd.sock, else /tmp/pfmd-$UID/pfmd.sock. Before
// anything connects there or starts a daemon there, its directory is checked
// with lstat (created 0700 if missing): it must be a real directory owned by
// getuid() with no group or other permission bits, and the socket, if it
// exists, a socket owned by getuid(). Otherwise PERMISSION_DENIED naming the
// file, the owner and the mode found: someone else could be serving a fake
// daemon there.
absl::StatusOr<std::string> PrivateSocketPath();

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_CLI_H_
