#include "userspace/pfmctl/commands.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "libpfm-bts/units.h"
#include "pfm/session_spec.h"
#include "userspace/pfmctl/render.h"

namespace pfm {
namespace {

namespace json = boost::json;

using Args = std::vector<std::string>;

absl::Status Usage(const std::string& what) {
  return absl::InvalidArgumentError(what);
}

// Prints one JSON document on stdout.
void PrintJson(const CliContext& ctx, const json::value& v) {
  *ctx.out << json::serialize(v) << "\n";
}

std::string Str(const json::value* v) {
  if (v == nullptr) return "-";
  if (v->is_string()) return std::string(v->as_string());
  return json::serialize(*v);
}

absl::StatusOr<int> Status(const CliContext& ctx, const Args& args) {
  if (args.size() > 1) return Usage("status takes no arguments");
  std::string path;
  absl::StatusOr<Client> c = ConnectOrStart(ctx, &path);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("status");
  if (!r.ok()) return r.status();
  if (ctx.json) {
    PrintJson(ctx, r->result);
    return 0;
  }
  const json::object& o = r->result.as_object();
  const json::object& m = o.at("machine").as_object();
  std::ostream& out = *ctx.out;
  out << "pfmd on " << path << " (driver " << Str(o.if_contains("driver"))
      << ")\n";
  out << "machine: " << Str(m.if_contains("cpus")) << " cpus, pmu "
      << Str(m.if_contains("pmu")) << " (" << Str(m.if_contains("pmu_desc"))
      << ")\n";
  out << "  counters: " << Str(m.if_contains("gp_counters")) << " general, "
      << Str(m.if_contains("fixed_counters")) << " fixed; debug registers: "
      << Str(m.if_contains("debug_registers")) << "\n";
  out << "  bts: " << Str(m.if_contains("bts"))
      << "  pebs: " << Str(m.if_contains("pebs"))
      << "  lbr: " << Str(m.if_contains("lbr"))
      << "  soft-bts (ptrace): " << Str(m.if_contains("soft_bts"))
      << "  software events: " << Str(m.if_contains("software_events"))
      << "\n";
  out << "  from: " << Str(m.if_contains("source")) << "\n";
  out << "sessions: " << Str(o.if_contains("sessions")) << "\n";
  const json::object& mem = o.at("memory").as_object();
  out << "memory: limit per uid "
      << FormatSize(mem.at("limit_per_uid").to_number<uint64_t>()) << "\n";
  for (const json::value& ch : mem.at("charged").as_array()) {
    const json::object& e = ch.as_object();
    out << "  uid " << Str(e.if_contains("uid")) << ": "
        << FormatSize(e.at("bytes").to_number<uint64_t>()) << "\n";
  }
  return 0;
}

absl::StatusOr<int> Shutdown(const CliContext& ctx, const Args& args) {
  std::string path;
  absl::StatusOr<Client> c = Client::Connect(ResolveSocketPath(
      ctx.socket_flag.empty() ? PrivateSocketPath() : ctx.socket_flag));
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("shutdown");
  if (!r.ok()) return r.status();
  if (ctx.json) PrintJson(ctx, r->result);
  return 0;
}


// Flag parsing for one command: "--flag value" / "--flag=value" / "--flag".
class Flags {
 public:
  Flags(const Args& args, size_t first) {
    for (size_t i = first; i < args.size(); ++i) rest_.push_back(args[i]);
  }
  // Takes every occurrence of a valued flag (repeatable ones).
  absl::StatusOr<std::vector<std::string>> TakeAll(const std::string& flag) {
    std::vector<std::string> values;
    std::vector<std::string> keep;
    for (size_t i = 0; i < rest_.size(); ++i) {
      const std::string& a = rest_[i];
      if (a == "--") {
        keep.insert(keep.end(), rest_.begin() + i, rest_.end());
        break;
      }
      if (a == flag) {
        if (i + 1 >= rest_.size())
          return Usage(absl::StrCat(flag, " needs a value"));
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
  absl::StatusOr<std::string> Take(const std::string& flag,
                                   const std::string& def = "") {
    absl::StatusOr<std::vector<std::string>> v = TakeAll(flag);
    if (!v.ok()) return v.status();
    if (v->size() > 1) return Usage(absl::StrCat(flag, " given more than once"));
    return v->empty() ? def : v->front();
  }
  bool TakeBool(const std::string& flag) {
    bool found = false;
    std::vector<std::string> keep;
    for (size_t i = 0; i < rest_.size(); ++i) {
      if (rest_[i] == "--") {
        keep.insert(keep.end(), rest_.begin() + i, rest_.end());
        break;
      }
      if (rest_[i] == flag) found = true; else keep.push_back(rest_[i]);
    }
    rest_ = keep;
    return found;
  }
  // What is left: positional arguments. Anything starting with "--" before a
  // "--" separator is an unknown flag.
  absl::StatusOr<std::vector<std::string>> Positional(const std::string& cmd) {
    std::vector<std::string> pos;
    for (size_t i = 0; i < rest_.size(); ++i) {
      if (rest_[i] == "--") {
        pos.insert(pos.end(), rest_.begin() + i, rest_.end());
        break;
      }
      if (rest_[i].rfind("--", 0) == 0 && rest_[i].size() > 2)
        return Usage(absl::StrCat(cmd, ": unknown flag '", rest_[i], "'"));
      pos.push_back(rest_[i]);
    }
    return pos;
  }

 private:
  std::vector<std::string> rest_;
};

absl::StatusOr<int> ParseIntArg(const std::string& what, const std::string& v,
                                int lo, int hi) {
  int n;
  if (!absl::SimpleAtoi(v, &n) || n < lo || n > hi)
    return Usage(absl::StrCat(what, " '", v, "': expected an integer in ", lo,
                              "..", hi));
  return n;
}

// Session flags shared by `session create` and `record`. The result is not
// validated yet: the caller sets the target, then calls Validate.
absl::StatusOr<SessionSpec> ParseSessionFlags(Flags& f) {
  SessionSpec s;
  absl::StatusOr<std::string> v;
#define PFM_TAKE(flag, dst)          \
  v = f.Take(flag, dst);             \
  if (!v.ok()) return v.status();    \
  dst = *v;
  PFM_TAKE("--role", s.role);
  PFM_TAKE("--bts", s.bts);
  PFM_TAKE("--filter", s.filter);
  PFM_TAKE("--format", s.format);
#undef PFM_TAKE
  if (v = f.Take("--pid"); !v.ok()) return v.status();
  if (!v->empty()) {
    absl::StatusOr<int> pid = ParseIntArg("--pid", *v, 1, 0x3fffffff);
    if (!pid.ok()) return pid.status();
    s.pid = *pid;
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
    if (!size.ok()) return Usage(absl::StrCat("--buffer: ", size.status().message()));
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
  all = f.TakeAll("--breakpoint");
  if (!all.ok()) return all.status();
  for (const std::string& b : *all) {
    absl::StatusOr<BreakpointSpec> bp = ParseBreakpoint(b);
    if (!bp.ok()) return bp.status();
    s.breakpoints.push_back(*bp);
  }
  s.pinned = f.TakeBool("--pinned");
  s.block = f.TakeBool("--block");
  f.TakeBool("--detached");  // pfmctl's sessions are always detached
  s.detached = true;
  return s;
}

absl::StatusOr<SessionSpec> Validate(const SessionSpec& s) {
  return SessionSpec::FromJson(s.ToJson());
}

absl::StatusOr<Client> Connect(const CliContext& ctx) {
  std::string path;
  return ConnectOrStart(ctx, &path);
}

absl::StatusOr<uint64_t> ParseSessionId(const std::string& v) {
  uint64_t id;
  if (!absl::SimpleAtoi(v, &id) || id == 0)
    return Usage(absl::StrCat("session id '", v, "': expected a positive integer"));
  return id;
}

std::string Ratio(const json::value* v) {
  if (v == nullptr || v->is_null()) return "not counted";
  return absl::StrFormat("%.1f%%", 100.0 * v->to_number<double>());
}

void PrintSessionLine(std::ostream& out, const json::object& s) {
  out << absl::StrFormat("%-4s %-6s %-9s %-12s %-9s %10s %10s %10s %6s\n",
                         Str(s.if_contains("id")), Str(s.if_contains("uid")),
                         Str(s.if_contains("role")), Str(s.if_contains("target")),
                         Str(s.if_contains("bts")),
                         FormatSize(s.at("buffer_bytes").to_number<uint64_t>()),
                         FormatSize(s.at("charged_bytes").to_number<uint64_t>()),
                         Str(s.if_contains("records")), Str(s.if_contains("lost")));
}

absl::StatusOr<int> SessionCreate(const CliContext& ctx, const Args& args) {
  Flags f(args, 2);
  absl::StatusOr<SessionSpec> spec = ParseSessionFlags(f);
  if (spec.ok()) spec = Validate(*spec);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("session create");
  if (!pos.ok()) return pos.status();
  if (!pos->empty()) return Usage(absl::StrCat("session create: unexpected '", pos->front(), "'"));
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("session_create", {{"spec", spec->ToJson()}});
  if (!r.ok()) return r.status();
  if (ctx.json) PrintJson(ctx, r->result);
  else *ctx.out << "session " << Str(r->result.as_object().if_contains("id")) << "\n";
  return 0;
}

absl::StatusOr<int> SessionList(const CliContext& ctx, const Args& args) {
  if (args.size() > 2) return Usage("session list takes no arguments");
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("session_list");
  if (!r.ok()) return r.status();
  if (ctx.json) {
    PrintJson(ctx, r->result);
    return 0;
  }
  *ctx.out << absl::StrFormat("%-4s %-6s %-9s %-12s %-9s %10s %10s %10s %6s\n", "ID",
                              "UID", "ROLE", "TARGET", "BTS", "BUFFER", "CHARGED",
                              "RECORDS", "LOST");
  for (const json::value& s : r->result.as_array()) PrintSessionLine(*ctx.out, s.as_object());
  return 0;
}

absl::StatusOr<int> SessionShow(const CliContext& ctx, const Args& args) {
  if (args.size() != 3) return Usage("usage: session show ID");
  absl::StatusOr<uint64_t> id = ParseSessionId(args[2]);
  if (!id.ok()) return id.status();
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("session_show", {{"id", *id}});
  if (!r.ok()) return r.status();
  if (ctx.json) {
    PrintJson(ctx, r->result);
    return 0;
  }
  const json::object& s = r->result.as_object();
  PrintSessionLine(*ctx.out, s);
  if (const json::value* cs = s.if_contains("counters"); cs && !cs->as_array().empty()) {
    *ctx.out << absl::StrFormat("  %-28s %16s %14s %14s %16s %12s\n", "COUNTER", "VALUE",
                                "ENABLED(ns)", "RUNNING(ns)", "SCALED", "RUNNING");
    for (const json::value& cv : cs->as_array()) {
      const json::object& co = cv.as_object();
      *ctx.out << absl::StrFormat("  %-28s %16s %14s %14s %16s %12s\n",
                                  Str(co.if_contains("event")), Str(co.if_contains("value")),
                                  Str(co.if_contains("time_enabled")),
                                  Str(co.if_contains("time_running")),
                                  Str(co.if_contains("scaled")), Ratio(co.if_contains("ratio")));
    }
  }
  if (const json::value* bs = s.if_contains("breakpoints"); bs && !bs->as_array().empty()) {
    for (const json::value& bv : bs->as_array()) {
      const json::object& bo = bv.as_object();
      *ctx.out << "  breakpoint " << Str(bo.if_contains("spec")) << " "
               << Str(bo.if_contains("state")) << ", running " << Ratio(bo.if_contains("ratio"))
               << "\n";
    }
  }
  return 0;
}

absl::StatusOr<int> SessionKill(const CliContext& ctx, const Args& args) {
  if (args.size() != 3) return Usage("usage: session kill ID");
  absl::StatusOr<uint64_t> id = ParseSessionId(args[2]);
  if (!id.ok()) return id.status();
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("session_kill", {{"id", *id}});
  if (!r.ok()) return r.status();
  if (ctx.json) PrintJson(ctx, r->result);
  return 0;
}

absl::StatusOr<int> Session(const CliContext& ctx, const Args& args) {
  if (args.size() < 2) return Usage("usage: session create|list|show|kill ...");
  const std::string& sub = args[1];
  if (sub == "create") return SessionCreate(ctx, args);
  if (sub == "list") return SessionList(ctx, args);
  if (sub == "show") return SessionShow(ctx, args);
  if (sub == "kill") return SessionKill(ctx, args);
  return Usage(absl::StrCat("unknown session command '", sub, "'"));
}

absl::StatusOr<int> Resources(const CliContext& ctx, const Args& args) {
  if (args.size() > 1) return Usage("resources takes no arguments");
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("resources");
  if (!r.ok()) return r.status();
  if (ctx.json) {
    PrintJson(ctx, r->result);
    return 0;
  }
  PrintResources(*ctx.out, r->result.as_object());
  return 0;
}

absl::StatusOr<int> Sim(const CliContext& ctx, const Args& args) {
  if (args.size() < 2) return Usage("usage: sim pause|resume|run NS|stats [PID]");
  json::object req{{"action", args[1]}};
  if (args[1] == "run") {
    uint64_t ns;
    if (args.size() != 3 || !absl::SimpleAtoi(args[2], &ns))
      return Usage("usage: sim run NS (virtual nanoseconds)");
    req["ns"] = ns;
  } else if (args[1] == "stats" && args.size() == 3) {
    absl::StatusOr<int> pid = ParseIntArg("pid", args[2], 1, 0x3fffffff);
    if (!pid.ok()) return pid.status();
    req["pid"] = *pid;
  } else if (args.size() != 2) {
    return Usage("usage: sim pause|resume|run NS|stats [PID]");
  }
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("sim", req);
  if (!r.ok()) return r.status();
  PrintJson(ctx, r->result);
  return 0;
}

}  // namespace

std::string PfmctlUsage() {
  return R"(usage: pfmctl [--socket PATH] [--json] COMMAND [ARGS]
commands:
  status                      the machine's PMU, sessions, memory charges
  session create [--role debugger|profiler] (--pid PID | --cpu N)
                 [--bts history|lossless] [--buffer SIZE] [--filter user|kernel|all]
                 [--format fixed|compact] [--block] [--pebs EVENT[:period]]
                 [--counter EVENT]... [--breakpoint ADDR:LEN:r|w|rw|x]... [--pinned]
                              a session (detached: it lives until `session kill`)
  session list | show ID | kill ID
  snapshot ID [-o FILE]       the records in a session's ring, oldest first
  stream ID -o FILE           lossless records to FILE until the session ends
  resources                   who holds which counter, debug register, BTS/PEBS
  record [session flags] -o FILE -- CMD ARGS...
                              run CMD traced; exit with CMD's status
  report FILE                 branches (symbolized), samples, switches, counters
  sim pause|resume|run NS|stats [PID]
                              control the simulated machine (--driver sim)
  shutdown                    stop the daemon (the embedded one by default)
global flags:
  --socket PATH   daemon socket (default $PFMD_SOCKET, /run/pfmd.sock, or an
                  embedded pfmd started on demand on $XDG_RUNTIME_DIR/pfmd/
                  pfmd.sock, else /tmp/pfmd-$UID/pfmd.sock)
  --json          one JSON document on stdout
  --driver host|sim, --sim-pmu NAME, --sim-cpus N, --sim-tasks N, --sim-seed N
                  how to start the embedded pfmd if none runs
)";
}

absl::StatusOr<int> RunCommand(const CliContext& ctx, const Args& args) {
  const std::string& cmd = args[0];
  if (cmd == "status") return Status(ctx, args);
  if (cmd == "shutdown") return Shutdown(ctx, args);
  if (cmd == "session") return Session(ctx, args);
  if (cmd == "resources") return Resources(ctx, args);
  if (cmd == "sim") return Sim(ctx, args);
  return Usage(absl::StrCat("unknown command '", cmd, "' (see pfmctl help)"));
}

}  // namespace pfm
