// The perf tool's generic event names ("cycles", "task-clock", "cs", ...)
// and the perf ABI constants they stand for (enum perf_hw_id / perf_sw_ids in
// linux/perf_event.h). One table for the perf driver (SoftwareEventByName)
// and for libpfm-bts's event encoding, which needs it when a forced libpfm4
// PMU leaves libpfm4's own "perf" PMU inactive.
#ifndef PFM_KERNEL_DRIVERS_PERF_PERF_EVENT_NAMES_H_
#define PFM_KERNEL_DRIVERS_PERF_PERF_EVENT_NAMES_H_

#include <linux/perf_event.h>
#include <strings.h>

#include <cstdint>

namespace pfm {

struct PerfGenericEvent {
  const char* alias;      // as the perf tool spells it
  const char* canonical;  // libpfm4's "perf" PMU name for it
  uint32_t type;          // PERF_TYPE_HARDWARE or PERF_TYPE_SOFTWARE
  uint64_t config;
};

inline constexpr PerfGenericEvent kPerfGenericEvents[] = {
    {"cycles", "PERF_COUNT_HW_CPU_CYCLES", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
    {"cpu-cycles", "PERF_COUNT_HW_CPU_CYCLES", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
    {"instructions", "PERF_COUNT_HW_INSTRUCTIONS", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
    {"cache-references", "PERF_COUNT_HW_CACHE_REFERENCES", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES},
    {"cache-misses", "PERF_COUNT_HW_CACHE_MISSES", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
    {"branches", "PERF_COUNT_HW_BRANCH_INSTRUCTIONS", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
    {"branch-instructions", "PERF_COUNT_HW_BRANCH_INSTRUCTIONS", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
    {"branch-misses", "PERF_COUNT_HW_BRANCH_MISSES", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
    {"bus-cycles", "PERF_COUNT_HW_BUS_CYCLES", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BUS_CYCLES},
    {"ref-cycles", "PERF_COUNT_HW_REF_CPU_CYCLES", PERF_TYPE_HARDWARE, PERF_COUNT_HW_REF_CPU_CYCLES},
    {"cpu-clock", "PERF_COUNT_SW_CPU_CLOCK", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK},
    {"task-clock", "PERF_COUNT_SW_TASK_CLOCK", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK},
    {"page-faults", "PERF_COUNT_SW_PAGE_FAULTS", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
    {"faults", "PERF_COUNT_SW_PAGE_FAULTS", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
    {"context-switches", "PERF_COUNT_SW_CONTEXT_SWITCHES", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
    {"cs", "PERF_COUNT_SW_CONTEXT_SWITCHES", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
    {"cpu-migrations", "PERF_COUNT_SW_CPU_MIGRATIONS", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
    {"migrations", "PERF_COUNT_SW_CPU_MIGRATIONS", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
    {"minor-faults", "PERF_COUNT_SW_PAGE_FAULTS_MIN", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN},
    {"major-faults", "PERF_COUNT_SW_PAGE_FAULTS_MAJ", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ},
    {"alignment-faults", "PERF_COUNT_SW_ALIGNMENT_FAULTS", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_ALIGNMENT_FAULTS},
    {"emulation-faults", "PERF_COUNT_SW_EMULATION_FAULTS", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_EMULATION_FAULTS},
    {"dummy", "PERF_COUNT_SW_DUMMY", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY},
};

// The entry for `alias` (ASCII case ignored), or null.
inline const PerfGenericEvent* FindPerfGenericEvent(const char* alias) {
  for (const PerfGenericEvent& e : kPerfGenericEvents)
    if (strcasecmp(alias, e.alias) == 0) return &e;
  return nullptr;
}

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_PERF_PERF_EVENT_NAMES_H_
