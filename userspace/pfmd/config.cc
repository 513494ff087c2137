#include "userspace/pfmd/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "libpfm-bts/units.h"
#include "pfm/client.h"

namespace pfm {
namespace {

absl::Status BadValue(const std::string& flag, const std::string& value,
                      const std::string& want) {
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " ", value, ": ", want));
}

template <typename T>
absl::Status ParseInt(const std::string& flag, const std::string& v, T lo,
                      T hi, T* out) {
  T n;
  if (!absl::SimpleAtoi(v, &n) || n < lo || n > hi)
    return BadValue(flag, v, absl::StrCat("expected an integer in ", lo, "..", hi));
  *out = n;
  return absl::OkStatus();
}

}  // namespace

std::string PfmdUsage() {
  return R"(usage: pfmd [flags]
  --config FILE              'key = value' settings (keys: the flags below with '_'
                             for '-', e.g. mem_limit_per_uid = 16MiB); flags win
  --socket PATH              Unix socket (default $PFMD_SOCKET or /run/pfmd.sock)
  --socket-mode OCTAL        permissions of the socket file (default 0666)
  --driver host|sim          host = perf_event_open + ptrace (default); sim = simulated PMU
  --sim-pmu NAME             libpfm4 PMU for the sim (default skl)
  --sim-cpus N               simulated CPUs (default 4)
  --sim-tasks N              simulated tasks, pids 1000, 1001, ... (default 8)
  --sim-seed N               seed of the simulated machine (default 1)
  --sim-speed NS             virtual ns per real ms (default 1000000 = real time)
  --sim-paused               start the simulated machine stopped (pfmctl sim run)
  --mem-limit-per-uid SIZE   trace memory per uid (default 64MiB)
  --mem-limit-total SIZE     trace memory for the whole daemon (default 1GiB)
  --mux-interval-ms N        multiplexing rotation interval (default 4)
  --idle-exit-s N            exit when idle this long (default 0 = never)
  --admin-group NAME|GID     members are privileged like root (default: none)
  --max-connections N        open connections, all uids (default 1024)
  --max-connections-per-uid N  open connections of one uid (default 64)
  --max-sessions-per-uid N   live sessions of one uid (default 256)
  --max-tracers-per-uid N    soft-BTS tracer processes of one uid (default 16)
  --max-perf-fds-per-uid N   host perf_event fds of one uid (default 256)
  --max-consumers-per-uid N  Debug Store consumers (BTS/PEBS streams) one uid
                             holds on one task (default 16, of the 64 a task
                             has); privileged clients are not capped
  --soft-bts-stepping branch|single  how host soft-BTS tracers step: stop at each
                             basic block's branch (default) or single-step every
                             instruction (docs/host_drivers.md)
  --soft-bts-cpu bind|free   host soft-BTS tracers run on one CPU with their
                             traced tasks (default: bind; 5x the stops per
                             second on a VM) or wherever the scheduler puts
                             them (free); docs/host_drivers.md, "One CPU"
  --metrics-listen ADDR      serve Prometheus /metrics over HTTP at ADDR: PORT or
                             IPV4:PORT (PORT 0: any free one); PORT alone is
                             127.0.0.1. Default: off. A non-loopback address
                             shows uids and session ids to whoever reaches it
)";
}

namespace {

// The valued flags; a config file's keys are these without "--" and with
// '_' for '-' (idle-exit-s excepted: it is for pfmctl's embedded daemon).
constexpr const char* kValued[] = {
    "--socket",   "--socket-mode",      "--driver",          "--sim-pmu",
    "--sim-cpus", "--sim-tasks",        "--sim-seed",        "--sim-speed",
    "--mem-limit-per-uid", "--mem-limit-total", "--mux-interval-ms",
    "--idle-exit-s", "--admin-group", "--max-connections",
    "--max-connections-per-uid", "--max-sessions-per-uid",
    "--max-tracers-per-uid", "--max-perf-fds-per-uid",
    "--max-consumers-per-uid", "--metrics-listen",
    "--soft-bts-stepping", "--soft-bts-cpu"};

bool IsValued(const std::string& flag) {
  for (const char* k : kValued)
    if (flag == k) return true;
  return false;
}

// Sets what `flag` names to `value`; the one place values are checked.
absl::Status Apply(const std::string& flag, const std::string& value,
                   PfmdConfig* c) {
  if (flag == "--sim-paused") {
    if (value != "true" && value != "false")
      return BadValue(flag, value, "expected true or false");
    c->sim_paused = value == "true";
    return absl::OkStatus();
  }
  if (flag == "--socket") {
    if (value.empty()) return BadValue(flag, "''", "must not be empty");
    c->socket = value;
  } else if (flag == "--socket-mode") {
    char* end = nullptr;
    unsigned long m = std::strtoul(value.c_str(), &end, 8);
    if (value.empty() || *end != '\0' || m > 0777)
      return BadValue(flag, value, "expected octal permissions like 0660");
    c->socket_mode = static_cast<uint32_t>(m);
  } else if (flag == "--driver") {
    if (value != "host" && value != "sim")
      return BadValue(flag, value, "expected host or sim");
    c->driver = value;
  } else if (flag == "--sim-pmu") {
    c->sim_pmu = value;
  } else if (flag == "--sim-cpus") {
    return ParseInt(flag, value, 1, 1024, &c->sim_cpus);
  } else if (flag == "--sim-tasks") {
    return ParseInt(flag, value, 0, 100000, &c->sim_tasks);
  } else if (flag == "--sim-seed") {
    return ParseInt<uint64_t>(flag, value, 0, UINT64_MAX, &c->sim_seed);
  } else if (flag == "--sim-speed") {
    return ParseInt<uint64_t>(flag, value, 1, uint64_t{1} << 40, &c->sim_speed);
  } else if (flag == "--mux-interval-ms") {
    return ParseInt(flag, value, 1, 10000, &c->mux_interval_ms);
  } else if (flag == "--admin-group") {
    if (value.empty()) return BadValue(flag, "''", "expected a group name or gid");
    c->admin_group = value;
  } else if (flag == "--max-connections") {
    return ParseInt(flag, value, 1, 1 << 20, &c->max_connections);
  } else if (flag == "--max-connections-per-uid") {
    return ParseInt(flag, value, 1, 1 << 20, &c->max_connections_per_uid);
  } else if (flag == "--max-sessions-per-uid") {
    return ParseInt(flag, value, 1, 1 << 20, &c->max_sessions_per_uid);
  } else if (flag == "--max-tracers-per-uid") {
    return ParseInt(flag, value, 0, 1 << 16, &c->max_tracers_per_uid);
  } else if (flag == "--max-perf-fds-per-uid") {
    return ParseInt(flag, value, 0, 1 << 20, &c->max_perf_fds_per_uid);
  } else if (flag == "--max-consumers-per-uid") {
    return ParseInt(flag, value, 1, 1 << 20, &c->max_consumers_per_uid);
  } else if (flag == "--soft-bts-stepping") {
    if (value != "branch" && value != "single")
      return BadValue(flag, value, "expected branch or single");
    c->soft_bts_stepping = value;
  } else if (flag == "--soft-bts-cpu") {
    if (value != "bind" && value != "free")
      return BadValue(flag, value, "expected bind or free");
    c->soft_bts_cpu = value;
  } else if (flag == "--metrics-listen") {
    absl::StatusOr<ListenAddress> a = ParseListenAddress(value);
    if (!a.ok()) return BadValue(flag, value, std::string(a.status().message()));
    c->metrics_listen = a->ToString();
  } else if (flag == "--idle-exit-s") {
    return ParseInt(flag, value, 0, 86400 * 365, &c->idle_exit_s);
  } else if (flag == "--mem-limit-per-uid" || flag == "--mem-limit-total") {
    absl::StatusOr<uint64_t> size = ParseSize(value);
    if (!size.ok()) return BadValue(flag, value, std::string(size.status().message()));
    (flag == "--mem-limit-per-uid" ? c->mem_limit_per_uid : c->mem_limit_total) = *size;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParsePfmdConfigText(const std::string& text,
                                 const std::string& source, PfmdConfig* c) {
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const std::string where = absl::StrCat(source, ":", line_no, ": ");
    if (size_t hash = line.find('#'); hash != absl::string_view::npos)
      line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos)
      return absl::InvalidArgumentError(
          absl::StrCat(where, "expected 'key = value', got '", line, "'"));
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, eq)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    const bool known = key.find('-') == std::string::npos &&
                       flag != "--idle-exit-s" &&
                       (IsValued(flag) || flag == "--sim-paused");
    if (!known)
      return absl::InvalidArgumentError(absl::StrCat(
          where, "unknown key '", key,
          "' (known: socket, socket_mode, driver, mem_limit_per_uid, "
          "mem_limit_total, mux_interval_ms, sim_pmu, sim_cpus, sim_tasks, "
          "sim_seed, sim_speed, sim_paused, admin_group, max_connections, "
          "max_connections_per_uid, max_sessions_per_uid, "
          "max_tracers_per_uid, max_perf_fds_per_uid, max_consumers_per_uid, "
          "metrics_listen, "
          "soft_bts_stepping, soft_bts_cpu)"));
    if (absl::Status s = Apply(flag, value, c); !s.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(where, key, " = ", value, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PfmdConfig> ParsePfmdFlags(const std::vector<std::string>& args,
                                          bool* help) {
  PfmdConfig c;
  *help = false;
  // The file first, wherever --config stands: flags override it.
  for (size_t i = 0; i < args.size(); ++i) {
    std::string file;
    if (args[i] == "--config") {
      if (i + 1 >= args.size())
        return absl::InvalidArgumentError("--config needs a value");
      file = args[i + 1];
    } else if (absl::StartsWith(args[i], "--config=")) {
      file = args[i].substr(9);
    } else {
      continue;
    }
    std::ifstream in(file);
    if (!in)
      return absl::InvalidArgumentError(absl::StrCat(
          "--config ", file, ": cannot read it: ", strerror(errno)));
    std::stringstream text;
    text << in.rdbuf();
    if (absl::Status s = ParsePfmdConfigText(text.str(), file, &c); !s.ok()) return s;
    c.config_file = file;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_value = false;
    if (size_t eq = flag.find('='); absl::StartsWith(flag, "--") && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    if (flag == "--help" || flag == "-h") {
      *help = true;
      return c;
    }
    if (flag == "--sim-paused") {
      c.sim_paused = true;
      continue;
    }
    if (flag == "--config") {
      if (!has_value) ++i;  // read above
      continue;
    }
    if (!IsValued(flag))
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", args[i], "'"));
    if (!has_value) {
      if (i + 1 >= args.size())
        return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      value = args[++i];
    }
    if (absl::Status s = Apply(flag, value, &c); !s.ok()) return s;
  }
  return c;
}

std::string ListenAddress::ToString() const { return absl::StrCat(host, ":", port); }

absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& text) {
  std::string host = "127.0.0.1";
  std::string port = text;
  if (!text.empty() && text[0] == '[')
    return absl::InvalidArgumentError(
        "IPv6 is not supported: the HTTP server pfmd embeds (civetweb, as "
        "Debian builds it) has no IPv6; give an IPv4 address");
  if (const size_t colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host == "localhost") host = "127.0.0.1";
  }
  uint32_t p = 0;
  if (port.empty() || !absl::SimpleAtoi(port, &p) || p > 65535 ||
      port.find_first_not_of("0123456789") != std::string::npos)
    return absl::InvalidArgumentError(
        "expected PORT or IPV4:PORT with PORT 0..65535 (0: any free port)");
  in_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "'", host, "' is not an IPv4 address (host names are not resolved; "
        "use 127.0.0.1, or 0.0.0.0 for every interface)"));
  ListenAddress out;
  out.host = host;
  out.port = static_cast<uint16_t>(p);
  out.loopback = (ntohl(a.s_addr) >> 24) == 127;
  return out;
}

std::string ResolveSocketPath(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv(kSocketEnv); env != nullptr && *env != '\0')
    return env;
  return kDefaultSocket;
}

}  // namespace pfm
