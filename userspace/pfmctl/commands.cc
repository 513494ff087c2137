#include "userspace/pfmctl/commands.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "libpfm-bts/units.h"

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

}  // namespace

std::string PfmctlUsage() {
  return R"(usage: pfmctl [--socket PATH] [--json] COMMAND [ARGS]
commands:
  status                      the machine's PMU, sessions, memory charges
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
  return Usage(absl::StrCat("unknown command '", cmd, "' (see pfmctl help)"));
}

}  // namespace pfm
