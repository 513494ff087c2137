// pfmd's clock, injected (Perfetto's way) so the session manager is tested
// with a fake one. The kernel core reads no clock: times are arguments.
#ifndef PFM_USERSPACE_PFMD_CLOCK_H_
#define PFM_USERSPACE_PFMD_CLOCK_H_

#include "kernel/drivers/clock.h"

#include <atomic>
#include <cstdint>

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

// For tests: time moves only when told to.
class FakeClock : public Clock {
 public:
  explicit FakeClock(uint64_t start_ns = 1) : now_(start_ns) {}
  uint64_t NowNs() const override { return now_.load(); }
  void Advance(uint64_t ns) { now_.fetch_add(ns); }

 private:
  std::atomic<uint64_t> now_;
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_CLOCK_H_
