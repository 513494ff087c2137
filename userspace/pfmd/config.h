// pfmd's configuration: command-line flags (DESIGN §9) and defaults.
#ifndef PFM_USERSPACE_PFMD_CONFIG_H_
#define PFM_USERSPACE_PFMD_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pfm {

struct PfmdConfig {
  std::string socket;  // empty: $PFMD_SOCKET, else /run/pfmd.sock
  uint32_t socket_mode = 0666;  // access is decided per request (SO_PEERCRED)
  std::string driver = "host";  // host | sim
  std::string sim_pmu = "skl";
  int sim_cpus = 4;
  int sim_tasks = 8;
  uint64_t sim_seed = 1;
  // Virtual ns the simulated machine advances per real ms (1e6 = real time).
  uint64_t sim_speed = 1000000;
  bool sim_paused = false;  // start with the simulated machine stopped
  uint64_t mem_limit_per_uid = 64ull << 20;
  uint64_t mem_limit_total = 1ull << 30;
  int mux_interval_ms = 4;
  // Exit after this many seconds with no session and no connection
  // (0 = never). pfmctl's embedded daemon sets it.
  int idle_exit_s = 0;
  std::string config_file;  // the --config file read, if any

  // Authorization and fair service (docs/security.md, docs/pfmd.md).
  // A group (name or numeric gid) whose members are privileged like root:
  // they see and control every session and may trace kernel mode and CPUs.
  // Empty: only uid 0 is privileged.
  std::string admin_group;
  int max_connections = 1024;          // open connections, all uids
  int max_connections_per_uid = 64;    // open connections of one uid
  int max_sessions_per_uid = 256;      // live sessions of one uid
  int max_tracers_per_uid = 16;        // soft-BTS tracer processes of one uid
  int max_perf_fds_per_uid = 256;      // host perf_event fds of one uid
  // Debug Store consumers (sessions with a BTS or PEBS stream) one uid holds
  // on one task context, out of its DsLimits::max_consumers_per_context
  // (64): so at least four uids can always attach to a task anyone may
  // trace (the sim's). CPU contexts are for privileged clients, not capped.
  int max_consumers_per_uid = 16;

  // How host soft-BTS tracers step (docs/host_drivers.md): "branch" (stop
  // at each block's branch, SoftBtsOptions::branch_step) or "single"
  // (every instruction).
  std::string soft_bts_stepping = "branch";
  // Whether host soft-BTS tracers run on one CPU with their tasks
  // (SoftBtsOptions::bind_cpu): "bind" or "free".
  std::string soft_bts_cpu = "bind";

  // Prometheus /metrics over HTTP (docs/pfmd.md, "Metrics"): "IPV4:PORT",
  // as ParseListenAddress normalized it. Empty: not served.
  std::string metrics_listen;
};

// Where --metrics-listen binds. Accepted: "PORT" (loopback, 127.0.0.1),
// "localhost:PORT" (likewise), "A.B.C.D:PORT"; PORT 0..65535, 0 = a free
// port chosen at bind. IPv6 is refused: the HTTP server pfmd embeds
// (civetweb, as Debian builds it) has no IPv6. Host names are refused: the
// address must not depend on a resolver. INVALID_ARGUMENT saying why.
struct ListenAddress {
  std::string host;  // dotted IPv4
  uint16_t port = 0;
  bool loopback = false;  // 127.0.0.0/8
  std::string ToString() const;  // "127.0.0.1:9464"
};
absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& text);

// Parses pfmd's flags ("--flag value" or "--flag=value"). An unknown flag or
// a bad value is INVALID_ARGUMENT naming it; `--help` is NOT_FOUND-free:
// it sets *help.
absl::StatusOr<PfmdConfig> ParsePfmdFlags(const std::vector<std::string>& args,
                                          bool* help);
std::string PfmdUsage();

// `--config FILE`: one `key = value` per line; '#' starts a comment. Keys
// are the valued flags' names with '_' for '-' (socket, socket_mode, driver,
// mem_limit_per_uid, mem_limit_total, mux_interval_ms, sim_pmu, sim_cpus,
// sim_tasks, sim_seed, sim_speed, metrics_listen, ...) and sim_paused =
// true|false. An unknown key, a line without '=', or a bad value is
// INVALID_ARGUMENT naming "SOURCE:LINE". ParsePfmdFlags reads the file before the flags, so flags
// override it; *c is partly updated on error.
absl::Status ParsePfmdConfigText(const std::string& text,
                                 const std::string& source, PfmdConfig* c);

// The socket path to use: the flag, else $PFMD_SOCKET, else the default.
std::string ResolveSocketPath(const std::string& flag);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_CONFIG_H_
