// Peak memory of this process while a piece of test code runs, from
// /proc/self/status: for tests that a reader holds what its input needs,
// not what a hostile or large input claims (trace_file_test,
// ring_reader_test, timeline_test).
#ifndef PFM_LIBPFM_BTS_TESTING_PEAK_RSS_H_
#define PFM_LIBPFM_BTS_TESTING_PEAK_RSS_H_

#include <cstring>
#include <fstream>
#include <functional>
#include <string>

namespace pfm::testing {

// A field of /proc/self/status in KiB ("VmHWM:", "VmRSS:"), -1 if absent.
inline long StatusKib(const char* key) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::strlen(key)));
  return -1;
}

// How far this process's peak RSS rose above its RSS while `fn` ran, in
// KiB; -1 when the peak cannot be reset (/proc/self/clear_refs).
inline long PeakRssGrowthKib(const std::function<void()>& fn) {
  {
    std::ofstream reset("/proc/self/clear_refs");
    reset << "5";
    reset.close();
    if (!reset) return -1;
  }
  const long before = StatusKib("VmRSS:");
  fn();
  const long peak = StatusKib("VmHWM:");
  return before < 0 || peak < 0 ? -1 : peak - before;
}

}  // namespace pfm::testing

#endif  // PFM_LIBPFM_BTS_TESTING_PEAK_RSS_H_
