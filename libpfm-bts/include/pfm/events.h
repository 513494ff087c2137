// Event names -> perf_event_attr fields, through libpfm4.
//
// libpfm4 state is process-wide: pfm_initialize() runs once per process
// (later calls return the first result), and it reads LIBPFM_FORCE_PMU only
// then. With a forced PMU libpfm4 activates that PMU *alone*: its generic
// "perf" PMU (cycles, task-clock, ...) is inactive, and PMUs after the forced
// one in libpfm4's internal table are not even listed by pfm_get_pmu_info().
// kernel/drivers/machine.cc also calls pfm_initialize(); whichever runs first
// decides the tables for both.
//
// Thread-safety: the functions here serialise among themselves; they cannot
// serialise with other direct libpfm4 callers in the process, so call
// ForcePmu (if at all) from main() before starting threads.
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_EVENTS_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_EVENTS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pfm {

struct EncodedEvent {
  // Canonical name: libpfm4's "pmu::EVENT:UMASK" without the attribute=value
  // modifiers, e.g. "perf::PERF_COUNT_HW_CPU_CYCLES",
  // "skl::MEM_LOAD_RETIRED:L3_MISS".
  std::string name;
  // libpfm4's full string, every attribute spelled out
  // ("skl::MEM_LOAD_RETIRED:L3_MISS:e=0:i=0:...:u=1:k=0:..."); diagnostics.
  std::string fstr;
  std::string pmu;  // libpfm4 PMU name: "perf", "skl", ...
  uint32_t type = 0;  // perf_event_attr.type (PERF_TYPE_*)
  uint64_t config = 0, config1 = 0, config2 = 0;
  // Needs a CPU PMU to count: false for perf software, tracepoint and
  // breakpoint events.
  bool hardware = false;
  // libpfm4 marks the event (or, when umasks were given, one of them) as
  // precise-capable (PEBS on Intel). False when libpfm4 does not say.
  bool precise_ok = false;
  // Privilege filter from the modifiers (":u" counts user only, ":k" kernel
  // only); with none, user and kernel are both counted, hypervisor is not.
  bool exclude_user = false, exclude_kernel = false, exclude_hv = false;
  uint32_t precise_ip = 0;  // ":precise=N"
};

// Encodes one event name with pfm_get_os_event_encoding(PFM_OS_PERF_EVENT_EXT):
// perf generic names ("cycles", "instructions", "task-clock",
// "context-switches", "page-faults"), PMU events with '.' or ':' before the
// umask ("MEM_LOAD_RETIRED.L3_MISS", "skl::INST_RETIRED:ANY_P"), and modifiers
// (":u", ":k", ":precise=2"). Initialises libpfm4 on first use.
//
// Under a forced PMU (ForcePmu or LIBPFM_FORCE_PMU) libpfm4 no longer knows
// the perf generic names, so plain generic hardware/software names (with
// only u/k/h modifiers) are then encoded from a small table of the perf ABI
// constants (linux/perf_event.h) instead; `pmu` is "perf" for those too.
//
// Note: libpfm4 4.13 has no "INST_RETIRED.ANY" for Intel cores (that is the
// fixed-counter event; libpfm4 calls it INSTRUCTION_RETIRED, the
// general-purpose one INST_RETIRED:ANY_P).
//
// Errors: INVALID_ARGUMENT naming `name` and libpfm4's reason for an unknown
// or malformed name; FAILED_PRECONDITION if libpfm4 fails to initialise.
absl::StatusOr<EncodedEvent> EncodeEvent(const std::string& name);

// Makes libpfm4 describe PMU `pmu` (a libpfm4 name like "skl", "icl",
// "amd64_fam19h_zen3") as if this machine had it, by setting
// LIBPFM_FORCE_PMU (left set, so child processes inherit it) and
// initialising libpfm4. Must run before anything else in the process
// initialises libpfm4 (EncodeEvent, kernel/drivers/machine.cc).
//
// OK if `pmu` is now active (including a repeated call, or libpfm4 already
// initialised on a machine that has it). FAILED_PRECONDITION if libpfm4 was
// already initialised without it (libpfm4 cannot be re-forced cleanly:
// pfm_terminate() leaves stale "present" flags). INVALID_ARGUMENT if libpfm4
// has no PMU of exactly that name (checked before forcing, since libpfm4
// itself matches a prefix); libpfm4 is then left uninitialised and
// LIBPFM_FORCE_PMU restored, so a later plain initialisation still works.
// INTERNAL if libpfm4 still activated another PMU (an earlier table entry
// whose name starts with `pmu`); the process stays with that PMU.
absl::Status ForcePmu(const std::string& pmu);

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_EVENTS_H_
