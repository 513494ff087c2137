#include "userspace/pfmd/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <thread>
#include <utility>

#include <prometheus/client_metric.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_type.h>

#include "absl/strings/str_cat.h"
#include "pfm/client.h"

namespace pfm {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

MetricFamily Family(const char* name, const char* help, MetricType type) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

void Add(MetricFamily* f, Labels labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f->type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f->metric.push_back(std::move(m));
}

std::string Str(uint64_t v) { return absl::StrCat(v); }

}  // namespace

std::vector<MetricFamily> BuildMetricFamilies(const MetricsInfo& info,
                                              const RefusalCounts& refusals) {
  std::vector<MetricFamily> out;
  constexpr MetricType kGauge = MetricType::Gauge;
  constexpr MetricType kCounter = MetricType::Counter;

  // ---- sessions ----
  MetricFamily sessions = Family(
      "pfm_sessions",
      "Live sessions by role and owner uid; they sum to the session count of "
      "`pfmctl status`.",
      kGauge);
  std::map<std::pair<std::string, uid_t>, uint64_t> by_role_uid;
  for (const MetricsInfo::Session& s : info.sessions) ++by_role_uid[{Name(s.role), s.uid}];
  for (const auto& [key, n] : by_role_uid)
    Add(&sessions, {{"role", key.first}, {"uid", Str(key.second)}}, n);
  out.push_back(std::move(sessions));

  // ---- memory accounting ----
  MetricFamily charged = Family(
      "pfm_memory_charged_bytes",
      "Trace memory charged to a uid: its rings, its shares of shared DS "
      "buffers and tracer processes, and its sessions' bookkeeping.",
      kGauge);
  for (const auto& [uid, bytes] : info.charged) Add(&charged, {{"uid", Str(uid)}}, bytes);
  out.push_back(std::move(charged));
  MetricFamily limit = Family(
      "pfm_memory_limit_bytes",
      "Trace memory limits: scope=\"uid\" for each uid (--mem-limit-per-uid), "
      "scope=\"daemon\" for all uids together (--mem-limit-total).",
      kGauge);
  Add(&limit, {{"scope", "uid"}}, info.limit_per_uid);
  Add(&limit, {{"scope", "daemon"}}, info.limit_total);
  out.push_back(std::move(limit));
  MetricFamily allocated = Family(
      "pfm_memory_allocated_bytes",
      "Trace memory charged, all uids together (the sum of "
      "pfm_memory_charged_bytes).",
      kGauge);
  Add(&allocated, {}, info.allocated);
  out.push_back(std::move(allocated));
  MetricFamily held = Family(
      "pfm_memory_held_bytes",
      "Trace memory held: the core's rings and DS buffers as measured, plus "
      "the estimates charged for session bookkeeping and tracer processes. "
      "Equals pfm_memory_allocated_bytes when no request is in flight.",
      kGauge);
  Add(&held, {}, info.held);
  out.push_back(std::move(held));

  // ---- records per session (sessions with a ring) ----
  MetricFamily records = Family(
      "pfm_session_records_total",
      "Records written into a session's ring (branches, PEBS samples, "
      "switches and the other record types).",
      kCounter);
  MetricFamily lost = Family(
      "pfm_session_lost_records_total",
      "Records a session lost: a lossless ring was full, or the hardware "
      "buffer overflowed before it was drained.",
      kCounter);
  MetricFamily overwritten = Family(
      "pfm_session_overwritten_records_total",
      "Records a history ring overwrote with newer ones (by design: it keeps "
      "the newest).",
      kCounter);
  for (const MetricsInfo::Session& s : info.sessions) {
    if (!s.has_stream) continue;
    const Labels l = {{"session", Str(s.id)}, {"uid", Str(s.uid)}, {"role", Name(s.role)}};
    Add(&records, l, s.records);
    Add(&lost, l, s.lost);
    Add(&overwritten, l, s.overwritten);
  }
  out.push_back(std::move(records));
  out.push_back(std::move(lost));
  out.push_back(std::move(overwritten));

  // ---- refusals ----
  MetricFamily refused = Family(
      "pfm_refusals_total",
      "Error replies pfmd sent, by status code as clients see it (requests "
      "refused, malformed frames, connections over a cap).",
      kCounter);
  for (int c = 1; c < RefusalCounts::kCodes; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    Add(&refused, {{"code", StatusCodeName(code)}}, refusals.Of(code));
  }
  out.push_back(std::move(refused));

  // ---- the arbiter ----
  MetricFamily rotations = Family(
      "pfm_arbiter_rotations_total",
      "Multiplexing rotations: a context's flexible requests moving on to "
      "their next round (once per mux interval while oversubscribed).",
      kCounter);
  Add(&rotations, {}, info.rotations);
  out.push_back(std::move(rotations));
  MetricFamily ratio = Family(
      "pfm_request_running_ratio",
      "Share of its enabled time a counter or breakpoint request was on the "
      "hardware (1: never multiplexed out); requests never counted yet are "
      "absent.",
      kGauge);
  for (const MetricsInfo::Request& r : info.requests)
    Add(&ratio, {{"session", Str(r.session)}, {"request", Str(r.request)}, {"event", r.event}},
        r.ratio);
  out.push_back(std::move(ratio));
  struct Kind {
    const char* name;
    int per_cpu;
    int MetricsInfo::CpuSlots::*used;
  };
  const Kind kinds[] = {{"gp_counter", info.gp_counters, &MetricsInfo::CpuSlots::gp},
                        {"fixed_counter", info.fixed_counters, &MetricsInfo::CpuSlots::fixed},
                        {"debug_register", info.debug_registers, &MetricsInfo::CpuSlots::debug}};
  MetricFamily in_use = Family(
      "pfm_hw_slots_in_use",
      "Hardware slots holding a request now, by CPU and kind (gp_counter, "
      "fixed_counter, debug_register), as pfmd's arbiter schedules them; the "
      "host kernel's breakpoints, held per task, are "
      "pfm_host_breakpoints_on_hw.",
      kGauge);
  MetricFamily capacity = Family(
      "pfm_hw_slots_per_cpu",
      "Hardware slots each CPU has, by kind (gp_counter, fixed_counter, "
      "debug_register).",
      kGauge);
  for (const Kind& k : kinds) {
    if (k.per_cpu <= 0) continue;
    Add(&capacity, {{"kind", k.name}}, k.per_cpu);
    for (size_t cpu = 0; cpu < info.slots.size(); ++cpu)
      Add(&in_use, {{"cpu", Str(cpu)}, {"kind", k.name}}, info.slots[cpu].*k.used);
  }
  out.push_back(std::move(in_use));
  out.push_back(std::move(capacity));
  MetricFamily host_bps = Family(
      "pfm_host_breakpoints_on_hw",
      "Host driver: breakpoints holding a debug register of their task now "
      "(the kernel loads a task's registers on whichever CPU runs it); "
      "`pfmctl resources` shows them as \"on hw\".",
      kGauge);
  Add(&host_bps, {}, info.host_breakpoints_on);
  out.push_back(std::move(host_bps));

  // ---- soft-BTS tracers (host driver) ----
  MetricFamily tracers = Family(
      "pfm_tracer_processes",
      "Soft-BTS tracer processes running (one per traced pid; host driver).", kGauge);
  Add(&tracers, {}, info.tracers);
  out.push_back(std::move(tracers));
  MetricFamily bound = Family(
      "pfm_tracer_processes_bound",
      "Soft-BTS tracer processes whose tasks are bound to one CPU, by that CPU "
      "(pfmd spreads them: docs/host_drivers.md, \"One CPU\").", kGauge);
  for (const auto& [cpu, n] : info.tracers_bound) Add(&bound, {{"cpu", Str(cpu)}}, n);
  out.push_back(std::move(bound));
  MetricFamily steps = Family(
      "pfm_tracer_steps_total",
      "Stops soft-BTS tracers made their threads take since pfmd started: single "
      "steps plus branch stepping's int3 stops.", kCounter);
  Add(&steps, {}, info.tracer_steps);
  out.push_back(std::move(steps));
  MetricFamily branches = Family(
      "pfm_tracer_branches_total",
      "Taken branches soft-BTS tracers recorded since pfmd started.", kCounter);
  Add(&branches, {}, info.tracer_branches);
  out.push_back(std::move(branches));
  return out;
}

std::vector<MetricFamily> MetricsCollector::Collect() const {
  // The kernel lock is held inside Metrics() only; building the families
  // (strings, allocation) happens after it is released.
  const MetricsInfo info = sessions_->Metrics();
  return BuildMetricFamilies(info, *refusals_);
}

namespace {

// Why nothing can listen at `where`, for the error message: civetweb only
// says that it did not start. A probe bind with the options civetweb uses.
std::string WhyNoListen(const ListenAddress& where) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return strerror(errno);
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(where.port);
  (void)::inet_pton(AF_INET, where.host.c_str(), &a.sin_addr);
  std::string why = "the HTTP server did not start";
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(fd, 1) != 0)
    why = strerror(errno);
  ::close(fd);
  return why;
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<prometheus::Exposer> exposer,
                                 std::shared_ptr<prometheus::Collectable> collectable,
                                 const ListenAddress& bound)
    : exposer_(std::move(exposer)),
      collectable_(std::move(collectable)),
      address_(bound.ToString()),
      host_(bound.host),
      port_(bound.port),
      loopback_(bound.loopback) {}

MetricsEndpoint::~MetricsEndpoint() {
  // Stops civetweb: joins its threads (a scrape in progress finishes first)
  // and closes its sockets, before the collectable can go. Its accept loop
  // looks at the stop flag only when poll() returns, which it does every
  // 2 s when nobody connects: connecting to it wakes it at once, so pfmd
  // exits without that wait. Connections made before the flag is set are
  // served as ones that sent nothing; after the loop ends, refused.
  std::atomic<bool> stopped{false};
  std::thread waker([this, &stopped] {
    while (!stopped.load()) {
      WakeUp();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  exposer_.reset();
  stopped = true;
  waker.join();
}

void MetricsEndpoint::WakeUp() const {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port_));
  // Every interface (0.0.0.0) includes loopback.
  if (::inet_pton(AF_INET, host_.c_str(), &a.sin_addr) != 1 ||
      a.sin_addr.s_addr == htonl(INADDR_ANY))
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::close(fd);
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const ListenAddress& where, std::shared_ptr<prometheus::Collectable> collectable) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", where.ToString(),
        "num_threads", absl::StrCat(kMetricsThreads),
        "request_timeout_ms", absl::StrCat(kRequestTimeoutMs)});
  } catch (const std::exception&) {
    return absl::UnavailableError(absl::StrCat(
        "--metrics-listen ", where.ToString(), ": cannot listen: ", WhyNoListen(where)));
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty())
    return absl::UnavailableError(absl::StrCat(
        "--metrics-listen ", where.ToString(), ": the HTTP server reports no port"));
  exposer->RegisterCollectable(collectable);
  ListenAddress bound = where;
  bound.port = static_cast<uint16_t>(ports[0]);
  return std::unique_ptr<MetricsEndpoint>(
      new MetricsEndpoint(std::move(exposer), std::move(collectable), bound));
}

}  // namespace pfm
