#include "pfm/events.h"

#include <linux/perf_event.h>
#include <perfmon/pfmlib_perf_event.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernel/drivers/machine.h"
#include "kernel/drivers/perf/perf_event_names.h"

namespace pfm {
namespace {

std::mutex& LibpfmMutex() {
  static std::mutex* m = new std::mutex;
  return *m;
}

// pfm_find_event checks initialisation before anything else, so this tells
// "not yet initialised" without initialising (libpfm4 has no direct query).
bool LibpfmInitialised() { return pfm_find_event("") != PFM_ERR_NOINIT; }

bool PmuActive(const std::string& name) {
  for (const pfm_pmu_info_t& info : LibpfmPmus())
    if (info.is_present && absl::EqualsIgnoreCase(name, info.name))
      return true;
  return false;
}

// A generic name with only u/k/h modifiers; nullopt if it is not one.
std::optional<EncodedEvent> EncodeGeneric(const std::string& name) {
  std::vector<std::string> parts = absl::StrSplit(name, ':');
  const PerfGenericEvent* g = FindPerfGenericEvent(parts[0].c_str());
  if (g == nullptr) return std::nullopt;
  bool u = false, k = false, h = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string m = absl::AsciiStrToLower(parts[i]);
    if (m == "u") u = true;
    else if (m == "k") k = true;
    else if (m == "h") h = true;
    else return std::nullopt;
  }
  EncodedEvent ev;
  ev.name = absl::StrCat("perf::", g->canonical);
  ev.fstr = ev.name;
  for (size_t i = 1; i < parts.size(); ++i) absl::StrAppend(&ev.fstr, ":", parts[i]);
  ev.pmu = "perf";
  ev.type = g->type;
  ev.config = g->config;
  ev.hardware = g->type == PERF_TYPE_HARDWARE;
  // Same default as libpfm4 with PFM_PLM0|PFM_PLM3: user and kernel.
  const bool any = u || k || h;
  ev.exclude_user = any && !u;
  ev.exclude_kernel = any && !k;
  ev.exclude_hv = !h;
  return ev;
}

// Whether libpfm4 says the event, or one of the umasks named in `fstr`, can
// be precise. fstr is "pmu::EVENT:UMASK:...:attr=val:...".
bool PreciseOk(int idx, const std::string& fstr) {
  pfm_event_info_t info;
  std::memset(&info, 0, sizeof(info));
  info.size = sizeof(info);
  if (pfm_get_event_info(idx, PFM_OS_PERF_EVENT_EXT, &info) != PFM_SUCCESS)
    return false;
  std::vector<std::string> tokens = absl::StrSplit(fstr, ':', absl::SkipEmpty());
  bool any_umask = false, umask_precise = false;
  for (int a = 0; a < info.nattrs; ++a) {
    pfm_event_attr_info_t ai;
    std::memset(&ai, 0, sizeof(ai));
    ai.size = sizeof(ai);
    if (pfm_get_event_attr_info(idx, a, PFM_OS_PERF_EVENT_EXT, &ai) != PFM_SUCCESS ||
        ai.type != PFM_ATTR_UMASK)
      continue;
    for (const std::string& t : tokens) {
      if (absl::EqualsIgnoreCase(t, ai.name)) {
        any_umask = true;
        umask_precise |= ai.is_precise != 0;
      }
    }
  }
  return any_umask ? umask_precise : info.is_precise != 0;
}

// "pmu::EVENT:UMASK:a=1:b=0" -> "pmu::EVENT:UMASK".
std::string CanonicalName(const std::string& fstr) {
  std::string out;
  size_t start = 0;
  const size_t sep = fstr.find("::");
  if (sep != std::string::npos) {
    out = fstr.substr(0, sep + 2);
    start = sep + 2;
  }
  bool first = true;
  for (absl::string_view t : absl::StrSplit(absl::string_view(fstr).substr(start), ':')) {
    if (t.find('=') != absl::string_view::npos) continue;
    if (!first) out += ':';
    absl::StrAppend(&out, t);
    first = false;
  }
  return out;
}

}  // namespace

absl::StatusOr<EncodedEvent> EncodeEvent(const std::string& name) {
  std::lock_guard<std::mutex> lock(LibpfmMutex());
  const int init = pfm_initialize();
  if (init != PFM_SUCCESS)
    return absl::FailedPreconditionError(
        absl::StrCat("libpfm4 failed to initialise: ", pfm_strerror(init)));

  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  pfm_perf_encode_arg_t arg;
  std::memset(&arg, 0, sizeof(arg));
  arg.size = sizeof(arg);
  arg.attr = &attr;
  char* fstr = nullptr;
  arg.fstr = &fstr;
  const int ret = pfm_get_os_event_encoding(name.c_str(), PFM_PLM0 | PFM_PLM3,
                                            PFM_OS_PERF_EVENT_EXT, &arg);
  if (ret != PFM_SUCCESS) {
    free(fstr);
    // A forced PMU leaves libpfm4's generic "perf" PMU inactive.
    if (ret == PFM_ERR_NOTFOUND && !PmuActive("perf")) {
      if (std::optional<EncodedEvent> g = EncodeGeneric(name)) return *g;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "event '", name, "': libpfm4 says: ", pfm_strerror(ret)));
  }
  EncodedEvent ev;
  ev.fstr = fstr != nullptr ? fstr : name;
  free(fstr);
  ev.name = CanonicalName(ev.fstr);
  const size_t sep = ev.fstr.find("::");
  if (sep != std::string::npos) ev.pmu = ev.fstr.substr(0, sep);
  ev.type = attr.type;
  ev.config = attr.config;
  ev.config1 = attr.config1;
  ev.config2 = attr.config2;
  ev.hardware = attr.type != PERF_TYPE_SOFTWARE &&
                attr.type != PERF_TYPE_TRACEPOINT &&
                attr.type != PERF_TYPE_BREAKPOINT;
  ev.precise_ok = PreciseOk(arg.idx, ev.fstr);
  ev.exclude_user = attr.exclude_user;
  ev.exclude_kernel = attr.exclude_kernel;
  ev.exclude_hv = attr.exclude_hv;
  ev.precise_ip = attr.precise_ip;
  return ev;
}

absl::Status ForcePmu(const std::string& pmu) {
  std::lock_guard<std::mutex> lock(LibpfmMutex());
  if (pmu.empty() || pmu.find(',') != std::string::npos)
    return absl::InvalidArgumentError(
        absl::StrCat("PMU name '", pmu, "' is empty or has a ','"));
  if (LibpfmInitialised()) {
    if (PmuActive(pmu)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot force PMU '", pmu,
        "': libpfm4 was already initialised without it (force it before the "
        "first event encoding or machine description)"));
  }
  const char* old = std::getenv("LIBPFM_FORCE_PMU");
  const std::optional<std::string> previous =
      old != nullptr ? std::optional<std::string>(old) : std::nullopt;
  auto restore_env = [&previous] {
    if (previous) ::setenv("LIBPFM_FORCE_PMU", previous->c_str(), 1);
    else ::unsetenv("LIBPFM_FORCE_PMU");
  };

  // libpfm4 activates the first PMU whose name *starts with* the forced
  // string, and pfm_terminate() does not clear a PMU's "active" flag, so a
  // wrong guess cannot be undone cleanly. Check the exact name first: forcing
  // a name no PMU starts with activates nothing but still lists every PMU.
  ::setenv("LIBPFM_FORCE_PMU", "-", 1);
  const int probe = pfm_initialize();
  bool known = false;
  if (probe == PFM_SUCCESS) {
    for (const pfm_pmu_info_t& info : LibpfmPmus())
      if (absl::EqualsIgnoreCase(pmu, info.name)) known = true;
  }
  pfm_terminate();  // nothing was activated: leaves no state behind
  if (probe != PFM_SUCCESS || !known) {
    restore_env();
    if (probe != PFM_SUCCESS)
      return absl::FailedPreconditionError(absl::StrCat(
          "libpfm4 failed to initialise: ", pfm_strerror(probe)));
    return absl::InvalidArgumentError(
        absl::StrCat("libpfm4 has no PMU named '", pmu, "'"));
  }

  ::setenv("LIBPFM_FORCE_PMU", pmu.c_str(), 1);
  const int init = pfm_initialize();
  if (init == PFM_SUCCESS && PmuActive(pmu)) return absl::OkStatus();
  // A PMU listed earlier in libpfm4's table has `pmu` as a prefix of its
  // name (e.g. "hsw" vs "hsw_ep"), or its init failed. Left initialised:
  // terminating would leave a stale "present" PMU for later readers.
  return absl::InternalError(absl::StrCat(
      "libpfm4 did not activate PMU '", pmu, "' when forced (",
      pfm_strerror(init), "); restart without forcing it"));
}

}  // namespace pfm
