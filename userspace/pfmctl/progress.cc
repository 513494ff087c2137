#include "userspace/pfmctl/progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "libpfm-bts/units.h"

namespace pfm {
namespace {

// Back to the start of the line, and erase to its end (ANSI EL), so a
// shorter line leaves nothing of a longer one behind.
constexpr char kRedraw[] = "\r\033[K";

uint64_t SteadyNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

bool ProgressWanted() {
  if (const char* v = std::getenv("PFMCTL_PROGRESS"); v != nullptr && *v != '\0')
    return std::strcmp(v, "0") != 0;
  return ::isatty(STDERR_FILENO) == 1;
}

ProgressLine::ProgressLine(std::ostream* out, bool enabled, std::function<uint64_t()> now_ns)
    : out_(out), enabled_(enabled && out != nullptr),
      now_ns_(now_ns ? std::move(now_ns) : SteadyNs) {
  start_ns_ = now_ns_();
}

ProgressLine::~ProgressLine() { Clear(); }

bool ProgressLine::Due() const {
  return enabled_ && (!last_ns_ || now_ns_() - *last_ns_ >= kProgressIntervalNs);
}

void ProgressLine::Show(const ProgressCounts& c) {
  if (!enabled_) return;
  const uint64_t now = now_ns_();
  last_ns_ = now;
  const std::string steps = c.steps ? absl::StrCat(*c.steps) : "-";
  *out_ << kRedraw
        << absl::StrFormat("pfmctl: %.1fs  steps %s  branches %u  written %s  lost %u",
                           static_cast<double>(now - start_ns_) / 1e9, steps, c.branches,
                           FormatSize(c.bytes), c.lost)
        << std::flush;
  shown_ = true;
}

void ProgressLine::Clear() {
  if (!shown_) return;
  *out_ << kRedraw << std::flush;
  shown_ = false;
}

}  // namespace pfm
