// Error replies pfmd has sent, by status code, since it started: what
// /metrics reports as pfm_refusals_total{code}. The transport counts every
// error frame it sends (server.cc: a request's error reply, a malformed or
// oversized frame, a connection over a cap), so the counts are what clients
// were told, under the names pfmctl prints.
//
// Thread safety: Count and Of may be called from any thread (relaxed
// atomics: each count is exact, no order between codes is promised).
#ifndef PFM_USERSPACE_PFMD_REFUSALS_H_
#define PFM_USERSPACE_PFMD_REFUSALS_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"

namespace pfm {

class RefusalCounts {
 public:
  // absl's codes are 0 (OK) .. 16 (UNAUTHENTICATED); anything else counts
  // as UNKNOWN. OK is never counted.
  static constexpr int kCodes = 17;

  void Count(absl::StatusCode code) {
    if (code == absl::StatusCode::kOk) return;
    by_code_[Index(code)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t Of(absl::StatusCode code) const {
    return by_code_[Index(code)].load(std::memory_order_relaxed);
  }

 private:
  static size_t Index(absl::StatusCode code) {
    const int i = static_cast<int>(code);
    return i >= 0 && i < kCodes ? static_cast<size_t>(i)
                                : static_cast<size_t>(absl::StatusCode::kUnknown);
  }
  std::array<std::atomic<uint64_t>, kCodes> by_code_{};
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_REFUSALS_H_
