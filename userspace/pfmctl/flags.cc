#include "userspace/pfmctl/flags.h"

#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "libpfm-bts/units.h"

namespace pfm {

absl::Status UsageError(absl::string_view what) {
  return absl::InvalidArgumentError(what);
}

absl::StatusOr<CommandArgs> ParseGlobalFlags(const std::vector<std::string>& args,
                                             CliContext* ctx) {
  CommandArgs rest;
  std::vector<std::string> embedded_flags;
  bool after_dashdash = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (after_dashdash) {
      rest.push_back(a);
      continue;
    }
    if (a == "--") {
      after_dashdash = true;
      rest.push_back(a);
      continue;
    }
    std::string flag = a, value;
    bool has_value = false;
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    if (flag == "--json") {
      ctx->json = true;
      continue;
    }
    const bool is_socket = flag == "--socket";
    const bool is_embedded = flag == "--driver" || flag == "--sim-pmu" ||
                             flag == "--sim-cpus" || flag == "--sim-tasks" ||
                             flag == "--sim-seed" || flag == "--sim-speed";
    if (!is_socket && !is_embedded) {
      rest.push_back(a);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return UsageError(absl::StrCat(flag, " needs a value"));
      value = args[++i];
    }
    if (is_socket) {
      ctx->socket_flag = value;
    } else {
      embedded_flags.push_back(flag);
      embedded_flags.push_back(value);
    }
  }
  bool help = false;
  absl::StatusOr<PfmdConfig> embedded = ParsePfmdFlags(embedded_flags, &help);
  // Whatever pfmd's parser calls it, a bad embedded flag is the user's.
  if (!embedded.ok()) return UsageError(embedded.status().message());
  ctx->embedded = *embedded;
  return rest;
}

CommandFlags::CommandFlags(const CommandArgs& args, size_t first) {
  for (size_t i = first; i < args.size(); ++i) rest_.push_back(args[i]);
}

absl::StatusOr<std::vector<std::string>> CommandFlags::TakeAll(
    const std::string& flag) {
  std::vector<std::string> values;
  std::vector<std::string> keep;
  for (size_t i = 0; i < rest_.size(); ++i) {
    const std::string& a = rest_[i];
    if (a == "--") {
      keep.insert(keep.end(), rest_.begin() + i, rest_.end());
      break;
    }
    if (a == flag) {
      if (i + 1 >= rest_.size()) return UsageError(absl::StrCat(flag, " needs a value"));
      values.push_back(rest_[++i]);
    } else if (a.rfind(flag + "=", 0) == 0) {
      values.push_back(a.substr(flag.size() + 1));
    } else {
      keep.push_back(a);
    }
  }
  rest_ = keep;
  return values;
}

absl::StatusOr<std::string> CommandFlags::Take(const std::string& flag,
                                               const std::string& def) {
  absl::StatusOr<std::vector<std::string>> v = TakeAll(flag);
  if (!v.ok()) return v.status();
  if (v->size() > 1) return UsageError(absl::StrCat(flag, " given more than once"));
  return v->empty() ? def : v->front();
}

bool CommandFlags::TakeBool(const std::string& flag) {
  bool found = false;
  std::vector<std::string> keep;
  for (size_t i = 0; i < rest_.size(); ++i) {
    if (rest_[i] == "--") {
      keep.insert(keep.end(), rest_.begin() + i, rest_.end());
      break;
    }
    if (rest_[i] == flag) {
      found = true;
    } else {
      keep.push_back(rest_[i]);
    }
  }
  rest_ = keep;
  return found;
}

absl::StatusOr<std::vector<std::string>> CommandFlags::Positional(
    const std::string& cmd) {
  std::vector<std::string> pos;
  for (size_t i = 0; i < rest_.size(); ++i) {
    if (rest_[i] == "--") {
      pos.insert(pos.end(), rest_.begin() + i, rest_.end());
      break;
    }
    if (rest_[i].rfind("--", 0) == 0 && rest_[i].size() > 2)
      return UsageError(absl::StrCat(cmd, ": unknown flag '", rest_[i], "'"));
    pos.push_back(rest_[i]);
  }
  return pos;
}

absl::StatusOr<int> ParseIntArg(const std::string& what, const std::string& v,
                                int lo, int hi) {
  int n;
  if (!absl::SimpleAtoi(v, &n) || n < lo || n > hi)
    return UsageError(absl::StrCat(what, " '", v, "': expected an integer in ", lo,
                                   "..", hi));
  return n;
}

absl::StatusOr<ThreadTarget> ParseThreadArg(const std::string& v) {
  absl::StatusOr<int> tid = ParseIntArg("-t", v, 1, 0x3fffffff);
  if (!tid.ok()) return tid.status();
  std::ifstream in(absl::StrCat("/proc/", *tid, "/status"));
  std::string line;
  while (in && std::getline(in, line)) {
    int tgid;
    if (line.rfind("Tgid:", 0) == 0 && absl::SimpleAtoi(line.substr(5), &tgid) && tgid > 0)
      return ThreadTarget{tgid, *tid};
  }
  return absl::NotFoundError(absl::StrCat("-t ", *tid, ": no thread with that id"));
}

absl::StatusOr<uint64_t> ParseSessionId(const std::string& v) {
  uint64_t id;
  if (!absl::SimpleAtoi(v, &id) || id == 0)
    return UsageError(absl::StrCat("session id '", v, "': expected a positive integer"));
  return id;
}

absl::StatusOr<SessionSpec> ParseSessionFlags(CommandFlags& f) {
  SessionSpec s;
  absl::StatusOr<std::string> role = f.Take("--role", "");
  if (!role.ok()) return role.status();
  for (auto [flag, dst] : {std::pair{"--bts", &s.bts},
                           std::pair{"--format", &s.format}}) {
    absl::StatusOr<std::string> v = f.Take(flag, *dst);
    if (!v.ok()) return v.status();
    *dst = *v;
  }
  // A small history of recent branches is what a debugger keeps; a
  // lossless stream is a profiler's.
  if (!role->empty()) {
    s.role = *role;
  } else if (s.bts == "history") {
    s.role = "debugger";
  }
  absl::StatusOr<std::string> v = f.Take("--pid");
  if (!v.ok()) return v.status();
  if (!v->empty()) {
    absl::StatusOr<int> pid = ParseIntArg("--pid", *v, 1, 0x3fffffff);
    if (!pid.ok()) return pid.status();
    s.pid = *pid;
  }
  if (v = f.Take("--tid"); !v.ok()) return v.status();
  if (!v->empty()) {
    absl::StatusOr<int> tid = ParseIntArg("--tid", *v, 1, 0x3fffffff);
    if (!tid.ok()) return tid.status();
    s.tid = *tid;
  }
  if (v = f.Take("--cpu"); !v.ok()) return v.status();
  if (!v->empty()) {
    absl::StatusOr<int> cpu = ParseIntArg("--cpu", *v, 0, 65535);
    if (!cpu.ok()) return cpu.status();
    s.cpu = *cpu;
  }
  if (v = f.Take("--buffer"); !v.ok()) return v.status();
  if (!v->empty()) {
    absl::StatusOr<uint64_t> size = ParseSize(*v);
    if (!size.ok()) return UsageError(absl::StrCat("--buffer: ", size.status().message()));
    // 0 would mean "the default" on the wire: say so instead of taking it.
    if (*size == 0)
      return UsageError("--buffer 0: a buffer needs bytes (leave --buffer out for the default)");
    s.buffer_bytes = *size;
  }
  if (v = f.Take("--pebs"); !v.ok()) return v.status();
  if (!v->empty()) {
    if (absl::Status st = ParsePebs(*v, &s.pebs_event, &s.pebs_period); !st.ok())
      return st;
  }
  absl::StatusOr<std::vector<std::string>> all = f.TakeAll("--counter");
  if (!all.ok()) return all.status();
  s.counters = *all;
  // perf's spelling of the same.
  if (all = f.TakeAll("-e"); !all.ok()) return all.status();
  s.counters.insert(s.counters.end(), all->begin(), all->end());
  all = f.TakeAll("--breakpoint");
  if (!all.ok()) return all.status();
  for (const std::string& b : *all) {
    absl::StatusOr<BreakpointSpec> bp = ParseBreakpoint(b);
    if (!bp.ok()) return bp.status();
    s.breakpoints.push_back(*bp);
  }
  // --filter: user|kernel|all (privilege), or an address filter (a
  // function, 'range LO-HI', '@ FILE'), repeatable.
  all = f.TakeAll("--filter");
  if (!all.ok()) return all.status();
  bool privilege = false;
  for (const std::string& v : *all) {
    if (v == "user" || v == "kernel" || v == "all") {
      if (privilege) return UsageError("--filter user|kernel|all given twice");
      privilege = true;
      s.filter = v;
      continue;
    }
    absl::StatusOr<AddressFilter> a = ParseAddressFilter(v);
    if (!a.ok()) return a.status();
    if (!a->file.empty()) {
      // As /proc/PID/maps names it: /bin/ls is /usr/bin/ls on Debian.
      char real[PATH_MAX];
      if (::realpath(a->file.c_str(), real) == nullptr)
        return absl::NotFoundError(absl::StrCat("--filter '", v, "': ", a->file, ": ",
                                                std::strerror(errno)));
      s.address_filters.push_back(absl::StrCat("@ ", real));
      continue;
    }
    s.address_filters.push_back(a->name.empty() ? absl::StrFormat("0x%x-0x%x", a->lo, a->hi)
                                                : a->name);
  }
  if (v = f.Take("--start"); !v.ok()) return v.status();
  s.start = *v;
  s.pinned = f.TakeBool("--pinned");
  s.block = f.TakeBool("--block");
  s.inherit = f.TakeBool("--inherit");
  f.TakeBool("--detached");  // pfmctl's sessions are always detached
  s.detached = true;
  return s;
}

absl::StatusOr<SessionSpec> ValidateSpec(const SessionSpec& s) {
  // Names are resolved later, against the target (breakpoint_names.h).
  return SessionSpec::FromJson(s.ToJson(), SessionSpec::UnresolvedNames::kAllow);
}

}  // namespace pfm
