// The estimate of a multiplexed counter, as Linux perf makes it (perf stat):
// a counter that was on the hardware for time_running of the time_enabled
// its context ran counts value * time_enabled / time_running. One definition
// for every place that turns a reading into an estimate: the arbiter's
// readings (kernel/pmu_arbiter), pfmd's host perf_event counters, a client
// reading PFM_REC_COUNTER records.
//
// A counter that never ran (time_running 0) has no estimate: it is "not
// counted", never 0 (DESIGN §4). Pure; thread-safe.
#ifndef PFM_KERNEL_UAPI_COUNTER_SCALE_H_
#define PFM_KERNEL_UAPI_COUNTER_SCALE_H_

#include <cstdint>

namespace pfm {

struct CounterScale {
  bool counted = false;  // it ran: ratio and scaled mean something
  double ratio = 0;      // time_running / time_enabled, in (0, 1]
  double scaled = 0;     // value / ratio; 0 when not counted
};

// Running time beyond enabled time (clock skew between CPUs, or a reading
// from elsewhere that does not guarantee it) counts as enabled time, so the
// ratio never exceeds 1 and a zero enabled time never divides.
inline CounterScale ScaleCounter(uint64_t value, uint64_t time_enabled,
                                 uint64_t time_running) {
  CounterScale s;
  if (time_running > time_enabled) time_running = time_enabled;
  s.counted = time_running > 0;
  if (s.counted) {
    s.ratio = static_cast<double>(time_running) /
              static_cast<double>(time_enabled);
    s.scaled = static_cast<double>(value) / s.ratio;
  }
  return s;
}

}  // namespace pfm

#endif  // PFM_KERNEL_UAPI_COUNTER_SCALE_H_
