#include "userspace/pfmd/service.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace pfm {
namespace {

ServiceReply Ok(boost::json::value result) {
  ServiceReply r;
  r.result = std::move(result);
  return r;
}

ServiceReply Error(absl::Status s) {
  ServiceReply r;
  r.status = std::move(s);
  return r;
}

}  // namespace

Service::Service(PfmdConfig config, MachineInfo machine)
    : config_(std::move(config)), machine_(std::move(machine)) {
  handlers_["status"] = &Service::Status;
  handlers_["ping"] = &Service::Ping;
  handlers_["shutdown"] = &Service::Shutdown;
}

Service::~Service() = default;

ServiceReply Service::Handle(ConnectionId conn, const Peer& peer,
                             const boost::json::object& request) {
  const boost::json::value* op = request.if_contains("op");
  if (op == nullptr || !op->is_string())
    return Error(absl::InvalidArgumentError(
        "request has no \"op\" string naming the command"));
  auto it = handlers_.find(std::string(op->as_string()));
  if (it == handlers_.end())
    return Error(absl::InvalidArgumentError(
        absl::StrCat("unknown command '", std::string(op->as_string()), "'")));
  return (this->*(it->second))(conn, peer, request);
}

void Service::Disconnected(ConnectionId conn) {}

bool Service::Idle() const { return true; }

ServiceReply Service::Ping(ConnectionId, const Peer& peer,
                           const boost::json::object&) {
  return Ok(boost::json::object{{"pid", ::getpid()},
                                {"peer_uid", peer.uid},
                                {"peer_pid", peer.pid}});
}

ServiceReply Service::Shutdown(ConnectionId, const Peer& peer,
                               const boost::json::object&) {
  if (peer.uid != ::geteuid() && !peer.privileged())
    return Error(absl::PermissionDeniedError(absl::StrCat(
        "uid ", peer.uid, " may not stop a pfmd run by uid ", ::geteuid())));
  if (shutdown_hook_) shutdown_hook_();
  return Ok(boost::json::object{{"stopping", true}});
}

ServiceReply Service::Status(ConnectionId, const Peer&,
                             const boost::json::object&) {
  const MachineInfo& m = machine_;
  boost::json::object machine{
      {"cpus", m.cpus},
      {"pmu", m.pmu},
      {"pmu_desc", m.pmu_desc},
      {"gp_counters", m.gp_counters},
      {"fixed_counters", m.fixed_counters},
      {"debug_registers", m.debug_registers},
      {"bts", m.bts},
      {"pebs", m.pebs},
      {"lbr", m.lbr},
      {"pt", m.pt},
      {"software_events", m.software_events},
      {"soft_bts", m.soft_bts},
      {"source", m.source},
  };
  boost::json::object memory{
      {"limit_per_uid", config_.mem_limit_per_uid},
      {"limit_total", config_.mem_limit_total},
      {"charged", boost::json::array{}},
  };
  return Ok(boost::json::object{{"driver", config_.driver},
                                {"machine", std::move(machine)},
                                {"sessions", 0},
                                {"memory", std::move(memory)}});
}

}  // namespace pfm
