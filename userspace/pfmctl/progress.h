// The one-line progress `record` and `stream` show on a terminal while they
// copy a session's ring into a file: elapsed time, the tracer's single
// steps, branches and bytes written, records lost. Redrawn in place with
// '\r' at most every kProgressIntervalNs, erased when the copy ends, so the
// command's own last line stands alone. Nothing at all when stderr is not a
// terminal (a pipe, a file, a test), unless forced by $PFMCTL_PROGRESS.
#ifndef PFM_USERSPACE_PFMCTL_PROGRESS_H_
#define PFM_USERSPACE_PFMCTL_PROGRESS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>

namespace pfm {

// 4 redraws a second at most.
inline constexpr uint64_t kProgressIntervalNs = 250'000'000;

struct ProgressCounts {
  std::optional<uint64_t> steps;  // soft BTS's single steps; unknown without
  uint64_t branches = 0;          // branch records written
  uint64_t bytes = 0;             // bytes of the trace file
  uint64_t lost = 0;              // records lost (LOST records' counts)
};

// Whether to show the line: $PFMCTL_PROGRESS "1" forces it on and "0" off
// (tests, scripts that want it either way); otherwise whether fd 2 is a
// terminal.
bool ProgressWanted();

// Not thread-safe. Writes to `out` only when enabled.
class ProgressLine {
 public:
  // `now_ns`: a monotonic clock in ns (steady_clock unless a test gives
  // its own). The elapsed time counts from construction.
  ProgressLine(std::ostream* out, bool enabled, std::function<uint64_t()> now_ns = nullptr);
  ~ProgressLine();  // Clear()
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Whether a redraw is due: the first at once, then every
  // kProgressIntervalNs. Callers gather what costs (the step count is an
  // RPC) only then. Always false when disabled.
  bool Due() const;
  // Draws the line (and restarts the interval).
  void Show(const ProgressCounts& counts);
  // Erases the line, if one is shown.
  void Clear();

 private:
  std::ostream* out_;
  bool enabled_;
  std::function<uint64_t()> now_ns_;
  uint64_t start_ns_ = 0;
  std::optional<uint64_t> last_ns_;
  bool shown_ = false;
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_PROGRESS_H_
