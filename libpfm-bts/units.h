// Sizes as users write them: "4096", "64KiB", "8MiB", "1GiB" (also K/M/G,
// KB/MB/GB as powers of 1024, as perf does for --mmap-pages sizes).
#ifndef PFM_LIBPFM_BTS_UNITS_H_
#define PFM_LIBPFM_BTS_UNITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pfm {

absl::StatusOr<uint64_t> ParseSize(absl::string_view text);
std::string FormatSize(uint64_t bytes);  // "64KiB", "1.5MiB", "100B"

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_UNITS_H_
