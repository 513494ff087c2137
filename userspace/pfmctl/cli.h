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
absl::StatusOr<Client> ConnectOrStart(const CliContext& ctx,
                                      std::string* path_used);

// The per-user private socket of the embedded daemon.
std::string PrivateSocketPath();

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_CLI_H_
