// A session request as pfmd's session manager takes it: the wire's
// SessionSpec (strings, libpfm-bts/include/pfm/session_spec.h) converted
// once, at the RPC boundary, into enums. Nothing past that boundary compares
// strings to decide what to do.
#ifndef PFM_USERSPACE_PFMD_TYPED_SPEC_H_
#define PFM_USERSPACE_PFMD_TYPED_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernel/uapi/pfm_uapi.h"
#include "pfm/session_spec.h"

namespace pfm {

enum class Role { kDebugger, kProfiler };
enum class BtsMode { kOff, kHistory, kLossless };
enum class TraceFilter { kUser, kKernel, kAll };
enum class RecordFormat { kFixed, kCompact };

// The names the wire and the CLI use ("debugger", "lossless", ...).
const char* Name(Role r);
const char* Name(BtsMode m);
const char* Name(TraceFilter f);
const char* Name(RecordFormat f);

// The uapi values of the same choices.
pfm_bts_mode ToUapi(BtsMode m);
pfm_filter ToUapi(TraceFilter f);
pfm_format ToUapi(RecordFormat f);

struct TypedSpec {
  Role role = Role::kProfiler;
  int32_t pid = -1;  // task target, or
  int32_t tid = 0;   // with pid: only this thread of it (0: every thread)
  int cpu = -1;      // CPU target (catch-all)
  BtsMode bts = BtsMode::kOff;
  uint64_t buffer_bytes = 0;  // ring size; 0 = default for the mode
  TraceFilter filter = TraceFilter::kUser;
  RecordFormat format = RecordFormat::kFixed;
  bool block = false;
  std::string pebs_event;  // empty = none
  uint64_t pebs_period = 0;
  std::vector<std::string> counters;
  std::vector<BreakpointSpec> breakpoints;
  bool pinned = false;
  bool detached = false;
  bool inherit = false;
  bool debug = false;  // run control for a debugger (session_debug)
  // Address filters (SessionSpec::address_filters, start), parsed.
  std::vector<std::pair<uint64_t, uint64_t>> filter_ranges;
  std::vector<std::string> filter_files;
  uint64_t start_at = 0;
  bool address_filtered() const {
    return !filter_ranges.empty() || !filter_files.empty() || start_at != 0;
  }

  bool task() const { return pid >= 0; }
  // A consumer of the context's Debug Store stream (a ring).
  bool consumer() const { return bts != BtsMode::kOff || !pebs_event.empty(); }

  // INVALID_ARGUMENT for a value the enums do not name (SessionSpec::FromJson
  // has checked them already; this is the one conversion).
  static absl::StatusOr<TypedSpec> From(const SessionSpec& s);
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_TYPED_SPEC_H_
