#include "libpfm-bts/units.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pfm {

absl::StatusOr<uint64_t> ParseSize(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  size_t i = 0;
  while (i < t.size() && absl::ascii_isdigit(static_cast<unsigned char>(t[i])))
    ++i;
  uint64_t n = 0;
  if (i == 0 || !absl::SimpleAtoi(t.substr(0, i), &n))
    return absl::InvalidArgumentError(
        absl::StrCat("size '", text, "': expected e.g. 4096, 64KiB, 8MiB"));
  std::string unit = absl::AsciiStrToLower(t.substr(i));
  int shift = 0;
  if (unit == "kb" || unit == "mb" || unit == "gb") {
    // 1000s to some, 1024s to others: refused rather than guessed.
    return absl::InvalidArgumentError(absl::StrCat(
        "size '", text, "': '", t.substr(i), "' is ambiguous (1000 or 1024?); use ",
        absl::AsciiStrToUpper(unit.substr(0, 1)), "iB (1024s) or plain bytes"));
  }
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "k" || unit == "kib") {
    shift = 10;
  } else if (unit == "m" || unit == "mib") {
    shift = 20;
  } else if (unit == "g" || unit == "gib") {
    shift = 30;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "size '", text, "': unknown unit '", t.substr(i), "' (use KiB, MiB, GiB)"));
  }
  if (shift > 0 && n > (UINT64_MAX >> shift))
    return absl::InvalidArgumentError(absl::StrCat("size '", text, "' overflows"));
  return n << shift;
}

std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  uint64_t whole = bytes;
  while (u < 4 && whole >= 1024 && whole % 1024 == 0) {
    whole /= 1024;
    ++u;
  }
  if (u > 0 || bytes < 1024) return absl::StrCat(whole, kUnits[u]);
  double v = static_cast<double>(bytes);
  u = 0;
  while (u < 4 && v >= 1024) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f%s", v, kUnits[u]);
}

}  // namespace pfm
