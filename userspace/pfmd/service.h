// pfmd's service logic: requests in, replies out. No sockets here (the
// transport is server.h); the peer's credentials come in with each request.
#ifndef PFM_USERSPACE_PFMD_SERVICE_H_
#define PFM_USERSPACE_PFMD_SERVICE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kernel/drivers/driver.h"
#include "pfm/unique_fd.h"
#include "userspace/pfmd/config.h"

namespace pfm {

using ConnectionId = uint64_t;

// Who is asking, from SO_PEERCRED on the connection.
struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  uint64_t caps = 0;  // effective capabilities when it connected
  // CAP_PERFMON or CAP_SYS_ADMIN: may see and control every session.
  bool privileged() const { return (caps >> 38 & 1) || (caps >> 21 & 1); }
};

struct ServiceReply {
  absl::Status status;
  boost::json::value result;
  std::vector<UniqueFd> fds;  // sent with the reply, closed after
};

class Service {
 public:
  Service(PfmdConfig config, MachineInfo machine);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  ServiceReply Handle(ConnectionId conn, const Peer& peer,
                      const boost::json::object& request);
  // The connection closed: its non-detached sessions end.
  void Disconnected(ConnectionId conn);
  // True when no session exists (for the embedded daemon's idle exit).
  bool Idle() const;

  const MachineInfo& machine() const { return machine_; }
  // Called (on the server's thread) when a peer asks the daemon to stop.
  void set_shutdown_hook(std::function<void()> hook) {
    shutdown_hook_ = std::move(hook);
  }

 private:
  using Handler = ServiceReply (Service::*)(ConnectionId, const Peer&,
                                            const boost::json::object&);
  ServiceReply Status(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply Ping(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply Shutdown(ConnectionId, const Peer&, const boost::json::object&);

  const PfmdConfig config_;
  const MachineInfo machine_;
  std::map<std::string, Handler> handlers_;
  std::function<void()> shutdown_hook_;
  mutable absl::Mutex mu_;
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_SERVICE_H_
