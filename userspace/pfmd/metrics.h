// pfmd's Prometheus metrics (docs/pfmd.md, "Metrics"): a collector that
// reads the session manager at scrape time, and the HTTP endpoint that
// serves it (prometheus-cpp's Exposer).
//
// Why at scrape time rather than gauges updated on a timer: every value is
// current when Prometheus reads it, an ended session's series are gone from
// the next scrape with nothing to unregister (no label set can outlive its
// session), and pfmd runs no extra thread and takes no lock between scrapes.
// A scrape holds the kernel lock once, for O(sessions + requests), as
// `pfmctl session list` does; the exposition is built after it is released.
#ifndef PFM_USERSPACE_PFMD_METRICS_H_
#define PFM_USERSPACE_PFMD_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "absl/status/statusor.h"
#include "userspace/pfmd/config.h"
#include "userspace/pfmd/refusals.h"
#include "userspace/pfmd/session_manager.h"

namespace prometheus {
class Exposer;
}

namespace pfm {

// The families built from one MetricsInfo and the refusal counts: every
// name starts with "pfm_", has a HELP text, and carries its unit. Exposed
// for tests; the collector below is what the endpoint uses.
std::vector<prometheus::MetricFamily> BuildMetricFamilies(
    const MetricsInfo& info, const RefusalCounts& refusals);

// A prometheus-cpp Collectable over pfmd's live state. Collect() may run on
// any thread (the HTTP server's); it takes the kernel lock briefly through
// SessionManager::Metrics(). `sessions` and `refusals` must outlive it.
class MetricsCollector : public prometheus::Collectable {
 public:
  MetricsCollector(SessionManager* sessions, const RefusalCounts* refusals)
      : sessions_(sessions), refusals_(refusals) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  SessionManager* const sessions_;
  const RefusalCounts* const refusals_;
};

// Serves a collectable at http://ADDRESS/metrics: civetweb's listening
// thread and kMetricsThreads workers, which call Collect(). Their lifetime
// is this object's: the destructor stops the server, joins its threads and
// closes its sockets (all opened close-on-exec, so pfmd's tracer helpers
// inherit none of them), within milliseconds.
class MetricsEndpoint {
 public:
  static constexpr int kMetricsThreads = 2;
  // A request whose headers do not arrive within this is dropped, so a slow
  // client holds a worker for at most this long.
  static constexpr int kRequestTimeoutMs = 10000;

  // Binds `where` (port 0: a free one). UNAVAILABLE naming the address and
  // the reason if it cannot listen there.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const ListenAddress& where, std::shared_ptr<prometheus::Collectable> collectable);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // "IPV4:PORT" with the port actually bound.
  const std::string& address() const { return address_; }
  bool loopback() const { return loopback_; }

 private:
  MetricsEndpoint(std::unique_ptr<prometheus::Exposer> exposer,
                  std::shared_ptr<prometheus::Collectable> collectable,
                  const ListenAddress& bound);
  // One connection to the endpoint (to wake civetweb's accept loop).
  void WakeUp() const;

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Collectable> collectable_;  // the Exposer's is weak
  const std::string address_;
  const std::string host_;
  const int port_;
  const bool loopback_;
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_METRICS_H_
