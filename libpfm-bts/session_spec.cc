#include "pfm/session_spec.h"

#include <algorithm>
#include <iterator>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "kernel/uapi/pfm_uapi.h"

namespace pfm {
namespace {

namespace json = boost::json;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(what);
}

bool OneOf(const std::string& v, std::initializer_list<const char*> set) {
  for (const char* s : set)
    if (v == s) return true;
  return false;
}

absl::Status GetString(const json::object& o, const char* key,
                       std::string* out) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) return Bad(absl::StrCat("\"", key, "\" must be a string"));
  *out = std::string(v->as_string());
  return absl::OkStatus();
}

template <typename T>
absl::Status GetInt(const json::object& o, const char* key, T lo, T hi,
                    T* out) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return absl::OkStatus();
  if (v->is_int64()) {
    const int64_t n = v->as_int64();
    if (n >= 0 ? static_cast<uint64_t>(n) <= static_cast<uint64_t>(hi) &&
                     static_cast<int64_t>(lo) <= n
               : static_cast<int64_t>(lo) <= n) {
      *out = static_cast<T>(n);
      return absl::OkStatus();
    }
  } else if (v->is_uint64()) {
    const uint64_t n = v->as_uint64();
    if (n <= static_cast<uint64_t>(hi)) {
      *out = static_cast<T>(n);
      return absl::OkStatus();
    }
  }
  return Bad(absl::StrCat("\"", key, "\" must be an integer in ", lo, "..", hi,
                          ", got ", json::serialize(*v)));
}

absl::Status GetBool(const json::object& o, const char* key, bool* out) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_bool()) return Bad(absl::StrCat("\"", key, "\" must be true or false"));
  *out = v->as_bool();
  return absl::OkStatus();
}

}  // namespace

std::string BreakpointSpec::ToString() const {
  if (!resolved())
    return len == 1 && access == "x" ? name : absl::StrFormat("%s:%u:%s", name, len, access);
  std::string out = absl::StrFormat("0x%x:%u:%s", addr, len, access);
  if (!name.empty()) absl::StrAppend(&out, " (", name, ")");
  return out;
}

namespace {

bool IsDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// LEN and ACCESS, and the x86 rules on them (Intel SDM Vol. 3B, "Debug
// Registers"): an execute breakpoint has length 1.
absl::Status CheckLenAccess(const std::string& text, const std::string& len,
                            const std::string& access, BreakpointSpec* b) {
  if (!absl::SimpleAtoi(len, &b->len) ||
      !(b->len == 1 || b->len == 2 || b->len == 4 || b->len == 8))
    return Bad(absl::StrCat("breakpoint '", text, "': length must be 1, 2, 4 or 8"));
  b->access = access;
  if (!OneOf(b->access, {"r", "w", "rw", "x"}))
    return Bad(absl::StrCat("breakpoint '", text, "': access must be r, w, rw or x"));
  if (b->access == "x" && b->len != 1)
    return Bad(absl::StrCat("breakpoint '", text, "': execute breakpoints have length 1"));
  return absl::OkStatus();
}

absl::Status CheckName(const std::string& text, const std::string& name) {
  if (name.empty()) return Bad(absl::StrCat("breakpoint '", text, "': no name"));
  if (name.size() > kMaxBreakpointNameBytes)
    return Bad(absl::StrCat("breakpoint name of ", name.size(), " bytes: at most ",
                            kMaxBreakpointNameBytes));
  for (char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f)
      return Bad(absl::StrCat("breakpoint '", text,
                              "': spaces and control characters are not part of a name"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BreakpointSpec> ParseBreakpoint(const std::string& text) {
  BreakpointSpec b;
  std::string spec = text;
  // "ADDR:LEN:ACCESS (NAME)": names have no spaces, so the first " (" ends
  // the address part.
  if (const size_t open = text.find(" ("); open != std::string::npos) {
    if (text.back() != ')' || text.size() < open + 3)
      return Bad(absl::StrCat("breakpoint '", text, "': expected ADDR:LEN:ACCESS (NAME)"));
    b.name = text.substr(open + 2, text.size() - open - 3);
    if (absl::Status s = CheckName(text, b.name); !s.ok()) return s;
    spec = text.substr(0, open);
    if (spec.empty() || spec[0] < '0' || spec[0] > '9')
      return Bad(absl::StrCat("breakpoint '", text, "': a name in parentheses follows an address"));
  }
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  if (!spec.empty() && spec[0] >= '0' && spec[0] <= '9') {
    // An address.
    if (parts.size() != 3 && parts.size() != 1)
      return Bad(absl::StrCat("breakpoint '", text, "': expected ADDR:LEN:r|w|rw|x"));
    const std::string& a = parts[0];
    bool ok = a.rfind("0x", 0) == 0 || a.rfind("0X", 0) == 0
                  ? absl::SimpleHexAtoi(a.substr(2), &b.addr)
                  : absl::SimpleAtoi(a, &b.addr);
    if (!ok) return Bad(absl::StrCat("breakpoint '", text, "': bad address '", a, "'"));
    if (parts.size() == 3)
      if (absl::Status s = CheckLenAccess(text, parts[1], parts[2], &b); !s.ok()) return s;
    if (b.addr == 0 && !b.name.empty())
      return Bad(absl::StrCat("breakpoint '", text, "': a name resolves to an address, not 0"));
    // A data breakpoint's address is aligned to its length.
    if (b.addr % b.len != 0)
      return Bad(absl::StrCat("breakpoint '", text, "': address not aligned to its length"));
    return b;
  }
  // A name: LOCATION[:LEN:ACCESS]. A location may hold ':' ("prog.c:42",
  // "ns::f"), but never ends in ":DIGITS:ACCESS".
  if (parts.size() >= 3 && OneOf(parts.back(), {"r", "w", "rw", "x"}) &&
      IsDigits(parts[parts.size() - 2])) {
    if (absl::Status s = CheckLenAccess(text, parts[parts.size() - 2], parts.back(), &b);
        !s.ok())
      return s;
    spec.resize(spec.size() - parts.back().size() - parts[parts.size() - 2].size() - 2);
  }
  b.name = spec;
  if (absl::Status s = CheckName(text, b.name); !s.ok()) return s;
  return b;
}

absl::Status ParsePebs(const std::string& text, std::string* event,
                       uint64_t* period) {
  size_t colon = text.rfind(':');
  *period = 0;
  *event = text;
  if (colon != std::string::npos) {
    uint64_t p;
    // libpfm4 names contain ':' for modifiers (e.g. "inst_retired:any_p"):
    // only a purely numeric tail is a period.
    if (absl::SimpleAtoi(text.substr(colon + 1), &p)) {
      if (p == 0) return Bad(absl::StrCat("pebs '", text, "': period must be > 0"));
      *period = p;
      *event = text.substr(0, colon);
    }
  }
  if (event->empty()) return Bad(absl::StrCat("pebs '", text, "': no event name"));
  return absl::OkStatus();
}

json::object SessionSpec::ToJson() const {
  json::object o{{"role", role},     {"bts", bts},       {"filter", filter},
                 {"format", format}, {"block", block},   {"pinned", pinned},
                 {"detached", detached}};
  if (inherit) o["inherit"] = true;
  if (debug) o["debug"] = true;
  if (!address_filters.empty()) {
    json::array a;
    for (const std::string& f : address_filters) a.push_back(json::value(f));
    o["address_filters"] = std::move(a);
  }
  if (!start.empty()) o["start"] = start;
  if (pid >= 0) o["pid"] = pid;
  if (tid > 0) o["tid"] = tid;
  if (cpu >= 0) o["cpu"] = cpu;
  if (buffer_bytes) o["buffer_bytes"] = buffer_bytes;
  if (!pebs_event.empty()) {
    o["pebs_event"] = pebs_event;
    if (pebs_period) o["pebs_period"] = pebs_period;
  }
  json::array c;
  for (const std::string& e : counters) c.push_back(json::value(e));
  o["counters"] = std::move(c);
  json::array b;
  for (const BreakpointSpec& bp : breakpoints) b.push_back(json::value(bp.ToString()));
  o["breakpoints"] = std::move(b);
  return o;
}

bool SessionSpec::HasUnresolvedNames() const {
  if (HasUnresolvedBreakpoints()) return true;
  for (const std::string& f : address_filters) {
    absl::StatusOr<AddressFilter> a = ParseAddressFilter(f);
    if (a.ok() && !a->resolved()) return true;
  }
  absl::StatusOr<uint64_t> s = ParseStart(start);
  return !start.empty() && s.ok() && *s == 0;
}

namespace {
bool ParseAddr(absl::string_view t, uint64_t* v) {
  if (absl::StartsWith(t, "0x") || absl::StartsWith(t, "0X"))
    return !t.substr(2).empty() && absl::SimpleHexAtoi(t.substr(2), v);
  return absl::SimpleAtoi(t, v);
}
// "TEXT (label)" -> TEXT.
absl::string_view Unlabelled(absl::string_view t) {
  const size_t sp = t.find(" (");
  return sp != absl::string_view::npos && absl::EndsWith(t, ")") ? t.substr(0, sp) : t;
}
bool IsName(absl::string_view t) {
  if (t.empty() || t.size() > kMaxBreakpointNameBytes) return false;
  if (absl::ascii_isdigit(static_cast<unsigned char>(t[0]))) return false;
  for (char c : t)
    if (c <= ' ' || c == 0x7f) return false;
  return true;
}
}  // namespace

absl::StatusOr<AddressFilter> ParseAddressFilter(const std::string& text) {
  AddressFilter f;
  absl::string_view t = text;
  if (absl::StartsWith(t, "@")) {
    t = absl::StripLeadingAsciiWhitespace(t.substr(1));
    if (t.empty() || t[0] != '/')
      return Bad(absl::StrCat("address filter '", text, "': '@ FILE' needs an absolute path"));
    f.file = std::string(t);
    return f;
  }
  const bool range_word = absl::StartsWith(t, "range ");
  if (range_word) t = absl::StripLeadingAsciiWhitespace(t.substr(6));
  t = Unlabelled(t);
  const size_t dash = t.find('-');
  if (dash != absl::string_view::npos && (range_word || absl::StartsWith(t, "0x"))) {
    if (!ParseAddr(absl::StripAsciiWhitespace(t.substr(0, dash)), &f.lo) ||
        !ParseAddr(absl::StripAsciiWhitespace(t.substr(dash + 1)), &f.hi) || f.lo >= f.hi ||
        f.hi > PFM_X86_USER_ADDR_END)
      return Bad(absl::StrCat("address filter '", text,
                              "': a range is LO-HI with LO < HI, user addresses"));
    return f;
  }
  if (range_word || !IsName(t))
    return Bad(absl::StrCat("address filter '", text,
                            "': expected a function name, 'range LO-HI' or '@ /path/to/file'"));
  f.name = std::string(t);
  return f;
}

absl::StatusOr<uint64_t> ParseStart(const std::string& text) {
  absl::string_view t = Unlabelled(text);
  uint64_t a = 0;
  if (!t.empty() && absl::ascii_isdigit(static_cast<unsigned char>(t[0]))) {
    if (!ParseAddr(t, &a) || a == 0 || a >= PFM_X86_USER_ADDR_END)
      return Bad(absl::StrCat("start '", text, "': expected a user address or a name"));
    return a;
  }
  if (!IsName(t)) return Bad(absl::StrCat("start '", text, "': expected an address or a name"));
  return 0;
}

bool SessionSpec::HasUnresolvedBreakpoints() const {
  for (const BreakpointSpec& b : breakpoints)
    if (!b.resolved()) return true;
  return false;
}

absl::StatusOr<SessionSpec> SessionSpec::FromJson(const json::object& o,
                                                  UnresolvedNames names) {
  SessionSpec s;
  absl::Status st;
  // A key the spec does not have is refused, not ignored: a misspelt one
  // ("buffer" for "buffer_bytes") would otherwise silently get the default.
  static constexpr std::string_view kKeys[] = {
      "role",  "pid",         "tid",        "cpu",         "bts",    "buffer_bytes", "filter",
      "format", "block",      "pebs_event", "pebs_period", "pinned", "detached",     "inherit",
      "debug", "start",       "address_filters", "counters", "breakpoints"};
  for (const auto& kv : o) {
    if (std::find(std::begin(kKeys), std::end(kKeys), std::string_view(kv.key())) ==
        std::end(kKeys))
      return Bad(absl::StrCat("unknown spec key \"", std::string(kv.key()),
                              "\" (docs/pfmd.md, \"Sessions\", names the keys)"));
  }
  if (!(st = GetString(o, "role", &s.role)).ok()) return st;
  if (!(st = GetInt(o, "pid", -1, 0x3fffffff, &s.pid)).ok()) return st;
  if (!(st = GetInt(o, "tid", 0, 0x3fffffff, &s.tid)).ok()) return st;
  if (!(st = GetInt(o, "cpu", -1, 65535, &s.cpu)).ok()) return st;
  if (!(st = GetString(o, "bts", &s.bts)).ok()) return st;
  if (!(st = GetInt<uint64_t>(o, "buffer_bytes", 0, UINT64_MAX, &s.buffer_bytes)).ok()) return st;
  if (!(st = GetString(o, "filter", &s.filter)).ok()) return st;
  if (!(st = GetString(o, "format", &s.format)).ok()) return st;
  if (!(st = GetBool(o, "block", &s.block)).ok()) return st;
  if (!(st = GetString(o, "pebs_event", &s.pebs_event)).ok()) return st;
  if (!(st = GetInt<uint64_t>(o, "pebs_period", 0, UINT64_MAX, &s.pebs_period)).ok()) return st;
  if (!(st = GetBool(o, "pinned", &s.pinned)).ok()) return st;
  if (!(st = GetBool(o, "detached", &s.detached)).ok()) return st;
  if (!(st = GetBool(o, "inherit", &s.inherit)).ok()) return st;
  if (!(st = GetBool(o, "debug", &s.debug)).ok()) return st;
  if (!(st = GetString(o, "start", &s.start)).ok()) return st;
  if (!s.start.empty()) {
    absl::StatusOr<uint64_t> a = ParseStart(s.start);
    if (!a.ok()) return a.status();
    if (*a == 0 && names == UnresolvedNames::kRefuse)
      return Bad(absl::StrCat("start '", s.start,
                              "' is a name: resolve it to an address first"));
  }
  if (const json::value* f = o.if_contains("address_filters")) {
    if (!f->is_array()) return Bad("\"address_filters\" must be an array of strings");
    if (f->as_array().size() > kMaxAddressFilters)
      return Bad(absl::StrCat("at most ", kMaxAddressFilters, " address filters"));
    for (const json::value& e : f->as_array()) {
      if (!e.is_string()) return Bad("\"address_filters\" must be an array of strings");
      absl::StatusOr<AddressFilter> a = ParseAddressFilter(std::string(e.as_string()));
      if (!a.ok()) return a.status();
      if (!a->resolved() && names == UnresolvedNames::kRefuse)
        return Bad(absl::StrCat("address filter '", a->name,
                                "' is a name: resolve it to an address range first"));
      s.address_filters.emplace_back(e.as_string());
    }
  }
  if (const json::value* c = o.if_contains("counters")) {
    if (!c->is_array()) return Bad("\"counters\" must be an array of event names");
    for (const json::value& e : c->as_array()) {
      if (!e.is_string() || e.as_string().empty())
        return Bad("\"counters\" must hold non-empty event names");
      s.counters.emplace_back(e.as_string());
    }
  }
  if (const json::value* b = o.if_contains("breakpoints")) {
    if (!b->is_array()) return Bad("\"breakpoints\" must be an array");
    for (const json::value& e : b->as_array()) {
      if (!e.is_string()) return Bad("\"breakpoints\" must hold ADDR:LEN:ACCESS strings");
      absl::StatusOr<BreakpointSpec> bp = ParseBreakpoint(std::string(e.as_string()));
      if (!bp.ok()) return bp.status();
      if (!bp->resolved() && names == UnresolvedNames::kRefuse)
        return Bad(absl::StrCat("breakpoint '", bp->name,
                                "' is a name: resolve it to an address first (pfmctl "
                                "resolves names against the target's maps)"));
      s.breakpoints.push_back(*bp);
    }
  }
  // Combinations.
  if (!OneOf(s.role, {"debugger", "profiler"}))
    return Bad(absl::StrCat("role '", s.role, "': expected debugger or profiler"));
  if ((s.pid >= 0) == (s.cpu >= 0))
    return Bad("give exactly one target: --pid PID or --cpu N");
  if (s.tid > 0 && s.pid < 0)
    return Bad(absl::StrCat("tid ", s.tid, ": a thread of a --pid target (not with --cpu)"));
  if (s.tid > 0 && s.inherit)
    return Bad("--tid traces one thread: not with --inherit (its children)");
  if (!OneOf(s.bts, {"off", "history", "lossless"}))
    return Bad(absl::StrCat("bts '", s.bts, "': expected history or lossless"));
  if (!OneOf(s.filter, {"user", "kernel", "all"}))
    return Bad(absl::StrCat("filter '", s.filter, "': expected user, kernel or all"));
  if (!OneOf(s.format, {"fixed", "compact"}))
    return Bad(absl::StrCat("format '", s.format, "': expected fixed or compact"));
  if (s.buffer_bytes != 0 &&
      (s.buffer_bytes < kMinRingBytes || s.buffer_bytes > kMaxRingBytes))
    return Bad(absl::StrCat("buffer ", s.buffer_bytes, " bytes: must be ",
                            kMinRingBytes, "..", kMaxRingBytes));
  if (s.block && s.bts != "lossless")
    return Bad("block applies to --bts lossless only");
  if (s.block && s.cpu >= 0)
    return Bad("block cannot hold a whole CPU: use it on a --pid session");
  if (s.counters.size() > kMaxCountersPerSession)
    return Bad(absl::StrCat(s.counters.size(), " counters: at most ",
                            kMaxCountersPerSession, " per session"));
  if (s.breakpoints.size() > kMaxBreakpointsPerSession)
    return Bad(absl::StrCat(s.breakpoints.size(), " breakpoints: at most ",
                            kMaxBreakpointsPerSession, " per session"));
  if (s.debug && (s.role != "debugger" || s.pid < 0))
    return Bad("debug (run control) needs role debugger and a --pid target");
  if (s.bts == "off" && s.pebs_event.empty() && s.counters.empty() &&
      s.breakpoints.empty() && !s.debug)
    return Bad("the session asks for nothing: give --bts, --pebs, --counter or --breakpoint");
  if (!s.pebs_event.empty() && s.pebs_period == 0) s.pebs_period = kDefaultPebsPeriod;
  return s;
}

}  // namespace pfm
