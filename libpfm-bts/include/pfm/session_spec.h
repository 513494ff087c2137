// What a client asks for when it creates a session (DESIGN §9), in one
// validated struct, with its JSON form for the wire. pfmctl builds it from
// flags; pfmd parses it from JSON. Parsing checks everything it can without
// the machine (syntax, ranges, combinations) and names what is wrong.
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_SESSION_SPEC_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_SESSION_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/statusor.h"
#include "kernel/uapi/ring_format.h"

namespace pfm {

struct BreakpointSpec {
  uint64_t addr = 0;
  uint32_t len = 1;           // 1, 2, 4, 8
  std::string access = "x";   // r | w | rw | x
  std::string ToString() const;  // "0x401000:1:x"
};

struct SessionSpec {
  std::string role = "profiler";  // debugger | profiler
  int pid = -1;                   // task target, or
  int cpu = -1;                   // CPU target (catch-all)
  std::string bts = "off";        // off | history | lossless
  uint64_t buffer_bytes = 0;      // ring size; 0 = default for the role
  std::string filter = "user";    // user | kernel | all
  std::string format = "fixed";   // fixed | compact
  bool block = false;             // lossless: hold the task instead of losing
  std::string pebs_event;         // empty = none
  uint64_t pebs_period = 0;       // 0 = default
  std::vector<std::string> counters;
  std::vector<BreakpointSpec> breakpoints;
  bool pinned = false;
  bool detached = false;

  boost::json::object ToJson() const;
  static absl::StatusOr<SessionSpec> FromJson(const boost::json::object& o);
};

// Sizes and limits of the spec (named so a refusal can quote them).
inline constexpr uint64_t kMinRingBytes = 64;  // one fixed record (history)
inline constexpr uint64_t kMaxRingBytes = kMaxRingDataBytes;  // the ring's
inline constexpr uint64_t kDefaultHistoryRingBytes = 64 * 64;    // 64 records
inline constexpr uint64_t kDefaultLosslessRingBytes = 4ull << 20;
inline constexpr uint64_t kDefaultPebsPeriod = 100003;
inline constexpr size_t kMaxCountersPerSession = 64;
inline constexpr size_t kMaxBreakpointsPerSession = 32;

// "ADDR:LEN:r|w|rw|x"; ADDR in hex (0x...) or decimal.
absl::StatusOr<BreakpointSpec> ParseBreakpoint(const std::string& text);
// "EVENT[:period]"; the event name itself is checked by libpfm4 later.
absl::Status ParsePebs(const std::string& text, std::string* event,
                       uint64_t* period);

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_SESSION_SPEC_H_
