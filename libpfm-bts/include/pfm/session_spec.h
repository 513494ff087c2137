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
  // The name it was given by (--breakpoint main, prog.c:42, write+0x10,
  // counter:8:w), empty for an address. A named breakpoint has no address
  // (0) until pfmctl resolves it against the target's maps
  // (pfm/symbolizer.h ResolveLocation); pfmd refuses one without.
  std::string name;

  bool resolved() const { return name.empty() || addr != 0; }
  // "0x401000:1:x"; resolved from a name: "0x5555555551b9:1:x (main)";
  // not yet resolved: "main", "counter:8:w". ParseBreakpoint reads each
  // back.
  std::string ToString() const;
};

struct SessionSpec {
  std::string role = "profiler";  // debugger | profiler
  int pid = -1;                   // task target, or
  // With pid: only this thread of it (perf's -t TID): its branches,
  // switches and exit, counters and breakpoints on it alone; the session
  // ends when it exits. 0 = every thread.
  int tid = 0;
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
  // Host tracing of a pid: also trace the processes it creates (threads
  // are always traced).
  bool inherit = false;
  // Run control of the pid for a debugger (pfmctl gdbserver, docs/gdb.md):
  // the session's client may ask for a debug channel (session_debug).
  // Host driver, a pid, role debugger.
  bool debug = false;
  // Address filters of host branch tracing (docs/pfmctl.md, "Address
  // filters"): "0xLO-0xHI" or "0xLO-0xHI (label)" (a range of the
  // program as it is when the session starts), "@ /abs/path" (every
  // executable mapping of that file, in every traced process); not yet
  // resolved: a function's name. See ParseAddressFilter.
  std::vector<std::string> address_filters;
  // Nothing is traced before the pid's first thread reaches this: "0xADDR"
  // or "0xADDR (label)"; unresolved: a name. Empty: from the start.
  std::string start;

  boost::json::object ToJson() const;
  // pfmd parses with kRefuse: it has no way to resolve a name. pfmctl
  // checks a spec's shape with kAllow before it resolves the names.
  enum class UnresolvedNames { kRefuse, kAllow };
  static absl::StatusOr<SessionSpec> FromJson(
      const boost::json::object& o, UnresolvedNames names = UnresolvedNames::kRefuse);

  bool HasUnresolvedBreakpoints() const;
  // Breakpoints, address filters or the start given by name.
  bool HasUnresolvedNames() const;
};

inline constexpr size_t kMaxAddressFilters = 16;

// One address filter, parsed: a range [lo, hi), or a file, or (neither) a
// name still to resolve.
struct AddressFilter {
  uint64_t lo = 0, hi = 0;
  std::string file;
  std::string name;
  bool resolved() const { return hi != 0 || !file.empty(); }
};
// "0xLO-0xHI[ (label)]", "range LO-HI" (hex 0x... or decimal), "@ /path"
// (absolute), or a name (no spaces). INVALID_ARGUMENT for anything else or
// an empty range.
absl::StatusOr<AddressFilter> ParseAddressFilter(const std::string& text);
// "0xADDR[ (label)]" -> ADDR; a name -> 0 (unresolved).
absl::StatusOr<uint64_t> ParseStart(const std::string& text);

// Sizes and limits of the spec (named so a refusal can quote them).
inline constexpr uint64_t kMinRingBytes = 64;  // one fixed record (history)
inline constexpr uint64_t kMaxRingBytes = kMaxRingDataBytes;  // the ring's
inline constexpr uint64_t kDefaultHistoryRingBytes = 64 * 64;    // 64 records
inline constexpr uint64_t kDefaultLosslessRingBytes = 4ull << 20;
inline constexpr uint64_t kDefaultPebsPeriod = 100003;
inline constexpr size_t kMaxCountersPerSession = 64;
inline constexpr size_t kMaxBreakpointsPerSession = 32;

inline constexpr size_t kMaxBreakpointNameBytes = 512;

// "ADDR:LEN:r|w|rw|x" (ADDR in hex 0x... or decimal), a bare "ADDR"
// (1:x), "ADDR:LEN:ACCESS (NAME)" (ToString of a resolved name), or a name
// "LOCATION[:LEN:ACCESS]" (LOCATION not starting with a digit, at most
// kMaxBreakpointNameBytes, no spaces or control characters; LEN:ACCESS
// default to 1:x). Which names exist is for the resolver to say.
absl::StatusOr<BreakpointSpec> ParseBreakpoint(const std::string& text);
// "EVENT[:period]"; the event name itself is checked by libpfm4 later.
absl::Status ParsePebs(const std::string& text, std::string* event,
                       uint64_t* period);

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_SESSION_SPEC_H_
