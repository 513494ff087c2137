// pfmd's RPC layer: the only place that knows op names and JSON. It decodes
// each request, calls the typed session manager (session_manager.h) and
// encodes the reply; the transport (server.h) moves frames and fds.
#ifndef PFM_USERSPACE_PFMD_SERVICE_H_
#define PFM_USERSPACE_PFMD_SERVICE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "pfm/unique_fd.h"
#include "userspace/pfmd/auth.h"
#include "userspace/pfmd/config.h"
#include "userspace/pfmd/refusals.h"
#include "userspace/pfmd/session_manager.h"

namespace pfm {

struct ServiceReply {
  absl::Status status;
  boost::json::value result;
  std::vector<UniqueFd> fds;  // sent with the reply, closed after
};

class Service {
 public:
  // `auth` says who is privileged (MakeAuthPolicy of --admin-group).
  Service(PfmdConfig config, MachineInfo machine, AuthPolicy auth = {},
          SessionManagerDeps deps = {});
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  ServiceReply Handle(ConnectionId conn, const Peer& peer,
                      const boost::json::object& request);
  // The connection closed: its non-detached sessions end.
  void Disconnected(ConnectionId conn) { sessions_.Disconnected(conn); }
  // True when no session exists (for the embedded daemon's idle exit).
  bool Idle() const { return sessions_.Idle(); }
  // Periodic work (the host's breakpoint rotation). True: call again after
  // the mux interval; false: nothing is due until a request changes things.
  bool Tick();

  const MachineInfo& machine() const { return sessions_.machine(); }
  const AuthPolicy& auth_policy() const { return auth_policy_; }
  // Called (on the server's thread) when a peer asks the daemon to stop.
  void set_shutdown_hook(std::function<void()> hook) { shutdown_hook_ = std::move(hook); }

  // For /metrics (metrics.h): the typed logic it reads at scrape time, and
  // the error replies the transport counts (any thread).
  SessionManager& session_manager() { return sessions_; }
  RefusalCounts& refusals() { return refusals_; }
  // Where /metrics is served ("127.0.0.1:9464"), reported by `status`; set
  // once before the socket accepts (RunPfmd). Empty: no metrics endpoint.
  void set_metrics_address(std::string address) { metrics_address_ = std::move(address); }

 private:
  using Handler = ServiceReply (Service::*)(ConnectionId, const Peer&,
                                            const boost::json::object&);
  ServiceReply Status(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply Ping(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply Shutdown(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply SessionCreate(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply SessionList(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply SessionShow(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply SessionMaps(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply SessionKill(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply SessionRing(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply SessionDebug(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply SessionBreakpoint(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply Resources(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply Sim(ConnectionId, const Peer&, const boost::json::object&);

  const AuthPolicy auth_policy_;
  SessionManager sessions_;
  std::map<std::string, Handler> handlers_;
  std::function<void()> shutdown_hook_;
  RefusalCounts refusals_;
  std::string metrics_address_;
};

// A session as the wire shows it (`session list`, `session show`).
boost::json::object SessionToJson(const SessionInfo& s, bool detail);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_SERVICE_H_
