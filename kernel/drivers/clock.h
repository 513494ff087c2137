// The host's monotonic clock in nanoseconds, for the code that reads a
// clock: the host drivers (they stamp records on CLOCK_MONOTONIC, the clock
// perf_event_open is told to use, so their times and perf's compare), pfmd's
// real clock, benchmarks. The arbitration core (kernel/ds, kernel/pmu_arbiter)
// reads no clock: times are its callers' arguments, so the sim can drive it
// in virtual time.
#ifndef PFM_KERNEL_DRIVERS_CLOCK_H_
#define PFM_KERNEL_DRIVERS_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace pfm {

// CLOCK_MONOTONIC now, in ns (through the vDSO: no system call).
inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_CLOCK_H_
