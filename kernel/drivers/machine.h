// Machine descriptions: what PMU a driver's machine has.
//
// The sim's machine comes from libpfm4's tables for a named PMU (the same
// tables LIBPFM_FORCE_PMU selects), so `--sim-pmu skl` has exactly the
// counters libpfm4 says a Skylake has. The host's comes from the machine
// itself (kernel/drivers/perf/capabilities.h).
#ifndef PFM_KERNEL_DRIVERS_MACHINE_H_
#define PFM_KERNEL_DRIVERS_MACHINE_H_

#include <perfmon/pfmlib.h>

#include <string>
#include <vector>

#include "kernel/drivers/driver.h"
#include "kernel/uapi/pfm_error.h"

namespace pfm {

// Debug registers on x86 (DR0-DR3): Intel SDM Vol. 3B, "Debug Registers".
inline constexpr int kX86DebugRegisters = 4;
inline constexpr int kMaxSimCpus = 1024;

// Fills `out` for a simulated machine with `cpus` CPUs and libpfm4's PMU
// `pmu_name` (e.g. "skl", "icl", "spr", "amd64_fam19h_zen3"). Returns 0, or
// -EINVAL naming the unknown PMU or bad CPU count.
int DescribeSimMachine(const std::string& pmu_name, int cpus,
                       MachineInfo* out, ErrorDetail* detail);

// Names of the core PMUs libpfm4 knows (for error messages and --help).
std::vector<std::string> LibpfmCorePmuNames();

// Every PMU libpfm4's tables describe (pfm_get_pmu_info succeeds), in table
// order, present on this machine or not (is_present says). The one walk of
// libpfm4's PMU table, for the machine descriptions here and for event
// names (libpfm-bts/events.cc). Does not initialise libpfm4: the callers do
// that themselves, each with its own error reporting; uninitialised, the
// list is empty. Not thread-safe against libpfm4's own (re)initialisation.
std::vector<pfm_pmu_info_t> LibpfmPmus();

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_MACHINE_H_
