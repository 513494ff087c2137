// pfmctl's logic as a library (main.cc is thin). DESIGN §9 is the contract.
//
// Global flags, accepted anywhere before "--": --socket PATH, --json, and,
// for the embedded daemon pfmctl starts when none answers: --driver
// host|sim, --sim-pmu, --sim-cpus, --sim-tasks, --sim-seed.
// Errors print one line "pfmctl: <CODE>: <message>" on stderr; the exit
// status is 2 for usage errors, 1 for other failures. Nothing escapes as an
// exception: whatever throws becomes "pfmctl: INTERNAL: ..." and status 1.
#ifndef PFM_USERSPACE_PFMCTL_CLI_H_
#define PFM_USERSPACE_PFMCTL_CLI_H_

#include <iosfwd>
#include <string>
#include <vector>

namespace pfm {

// Runs one pfmctl invocation (`args` without the program name); returns the
// process exit status.
int RunPfmctl(const std::vector<std::string>& args, std::ostream& out,
              std::ostream& err);

// The text of `pfmctl help`.
std::string PfmctlUsage();

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_CLI_H_
