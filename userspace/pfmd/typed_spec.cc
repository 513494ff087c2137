#include "userspace/pfmd/typed_spec.h"

#include "absl/strings/str_cat.h"

namespace pfm {

const char* Name(Role r) { return r == Role::kDebugger ? "debugger" : "profiler"; }

const char* Name(BtsMode m) {
  switch (m) {
    case BtsMode::kOff:
      return "off";
    case BtsMode::kHistory:
      return "history";
    case BtsMode::kLossless:
      return "lossless";
  }
  return "?";
}

const char* Name(TraceFilter f) {
  switch (f) {
    case TraceFilter::kUser:
      return "user";
    case TraceFilter::kKernel:
      return "kernel";
    case TraceFilter::kAll:
      return "all";
  }
  return "?";
}

const char* Name(RecordFormat f) { return f == RecordFormat::kFixed ? "fixed" : "compact"; }

pfm_bts_mode ToUapi(BtsMode m) {
  switch (m) {
    case BtsMode::kOff:
      return PFM_BTS_OFF;
    case BtsMode::kHistory:
      return PFM_BTS_HISTORY;
    case BtsMode::kLossless:
      return PFM_BTS_LOSSLESS;
  }
  return PFM_BTS_OFF;
}

pfm_filter ToUapi(TraceFilter f) {
  switch (f) {
    case TraceFilter::kUser:
      return PFM_FILTER_USER;
    case TraceFilter::kKernel:
      return PFM_FILTER_KERNEL;
    case TraceFilter::kAll:
      return PFM_FILTER_ALL;
  }
  return PFM_FILTER_USER;
}

pfm_format ToUapi(RecordFormat f) {
  return f == RecordFormat::kFixed ? PFM_FORMAT_FIXED : PFM_FORMAT_COMPACT;
}

namespace {

template <typename E, size_t N>
absl::StatusOr<E> Parse(const char* what, const std::string& v,
                        const std::pair<const char*, E> (&names)[N]) {
  for (const auto& [name, e] : names)
    if (v == name) return e;
  std::string known;
  for (const auto& [name, e] : names) absl::StrAppend(&known, known.empty() ? "" : ", ", name);
  return absl::InvalidArgumentError(
      absl::StrCat(what, " '", v, "': expected one of ", known));
}

}  // namespace

absl::StatusOr<TypedSpec> TypedSpec::From(const SessionSpec& s) {
  static const std::pair<const char*, Role> kRoles[] = {
      {"debugger", Role::kDebugger}, {"profiler", Role::kProfiler}};
  static const std::pair<const char*, BtsMode> kModes[] = {
      {"off", BtsMode::kOff}, {"history", BtsMode::kHistory}, {"lossless", BtsMode::kLossless}};
  static const std::pair<const char*, TraceFilter> kFilters[] = {
      {"user", TraceFilter::kUser}, {"kernel", TraceFilter::kKernel}, {"all", TraceFilter::kAll}};
  static const std::pair<const char*, RecordFormat> kFormats[] = {
      {"fixed", RecordFormat::kFixed}, {"compact", RecordFormat::kCompact}};
  TypedSpec t;
  absl::StatusOr<Role> role = Parse("role", s.role, kRoles);
  if (!role.ok()) return role.status();
  absl::StatusOr<BtsMode> bts = Parse("bts", s.bts, kModes);
  if (!bts.ok()) return bts.status();
  absl::StatusOr<TraceFilter> filter = Parse("filter", s.filter, kFilters);
  if (!filter.ok()) return filter.status();
  absl::StatusOr<RecordFormat> format = Parse("format", s.format, kFormats);
  if (!format.ok()) return format.status();
  t.role = *role;
  t.bts = *bts;
  t.filter = *filter;
  t.format = *format;
  t.pid = s.pid;
  t.tid = s.tid;
  t.cpu = s.cpu;
  t.buffer_bytes = s.buffer_bytes;
  t.block = s.block;
  t.pebs_event = s.pebs_event;
  t.pebs_period = s.pebs_period;
  t.counters = s.counters;
  t.breakpoints = s.breakpoints;
  t.pinned = s.pinned;
  t.detached = s.detached;
  t.inherit = s.inherit;
  t.debug = s.debug;
  for (const std::string& f : s.address_filters) {
    absl::StatusOr<AddressFilter> a = ParseAddressFilter(f);
    if (!a.ok()) return a.status();
    if (!a->resolved())
      return absl::InvalidArgumentError(absl::StrCat("address filter '", f, "' is a name"));
    if (!a->file.empty())
      t.filter_files.push_back(a->file);
    else
      t.filter_ranges.emplace_back(a->lo, a->hi);
  }
  if (!s.start.empty()) {
    absl::StatusOr<uint64_t> a = ParseStart(s.start);
    if (!a.ok()) return a.status();
    if (*a == 0) return absl::InvalidArgumentError(absl::StrCat("start '", s.start, "' is a name"));
    t.start_at = *a;
  }
  return t;
}

}  // namespace pfm
