// pfmd's clock, injected (Perfetto's way, SessionManagerDeps): the host
// driver's time; the sim driver's is the simulator's virtual clock, which
// is what the session manager's unit tests drive. The kernel core reads no
// clock: times are arguments.
#ifndef PFM_USERSPACE_PFMD_CLOCK_H_
#define PFM_USERSPACE_PFMD_CLOCK_H_

#include <cstdint>

#include "kernel/drivers/clock.h"

namespace pfm {

class Clock {
 public:
  virtual ~Clock() = default;
  // Nanoseconds on CLOCK_MONOTONIC's scale (the host tracers' and perf's).
  virtual uint64_t NowNs() const = 0;
};

class MonotonicClock : public Clock {
 public:
  uint64_t NowNs() const override { return MonotonicNs(); }
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_CLOCK_H_
