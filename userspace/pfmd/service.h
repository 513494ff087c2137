// pfmd's service logic: requests in, replies out. No sockets here (the
// transport is server.h); the peer's credentials come in with each request.
#ifndef PFM_USERSPACE_PFMD_SERVICE_H_
#define PFM_USERSPACE_PFMD_SERVICE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/base/thread_annotations.h"
#include "kernel/drivers/driver.h"
#include "kernel/drivers/perf/perf_events.h"
#include "pfm/session_spec.h"
#include "pfm/unique_fd.h"
#include "userspace/pfmd/accounting.h"
#include "userspace/pfmd/auth.h"
#include "userspace/pfmd/config.h"

namespace pfm {

using ConnectionId = uint64_t;

// The kernel lock (see kernel/pfm_kernel.h for its rules). A std::mutex,
// i.e. pthreads, which ThreadSanitizer intercepts, rather than absl::Mutex:
// Debian's absl is not built with TSan, so TSan could not see absl's
// ordering and would report false races. Annotated for clang's
// -Wthread-safety like absl::Mutex.
class ABSL_LOCKABLE KernelLock {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { m_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { m_.unlock(); }

 private:
  std::mutex m_;
};

class ABSL_SCOPED_LOCKABLE KernelLockGuard {
 public:
  explicit KernelLockGuard(KernelLock* l) ABSL_EXCLUSIVE_LOCK_FUNCTION(l)
      : l_(l) {
    l_->Lock();
  }
  ~KernelLockGuard() ABSL_UNLOCK_FUNCTION() { l_->Unlock(); }
  KernelLockGuard(const KernelLockGuard&) = delete;
  KernelLockGuard& operator=(const KernelLockGuard&) = delete;

 private:
  KernelLock* l_;
};

struct ServiceReply {
  absl::Status status;
  boost::json::value result;
  std::vector<UniqueFd> fds;  // sent with the reply, closed after
};

class Kernel;
class SimMachine;
class TracerProcess;

class Service {
 public:
  // Builds the kernel core for `machine` and, for --driver sim, the simulated
  // machine and the thread that runs it in (scaled) real time.
  // `auth` says who is privileged (MakeAuthPolicy of --admin-group).
  Service(PfmdConfig config, MachineInfo machine, AuthPolicy auth = {});
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
  // How the transport decides who is privileged (--admin-group).
  const AuthPolicy& auth_policy() const { return auth_policy_; }
  // Called (on the server's thread) when a peer asks the daemon to stop.
  void set_shutdown_hook(std::function<void()> hook) {
    shutdown_hook_ = std::move(hook);
  }

 private:
  struct Session;
  using Handler = ServiceReply (Service::*)(ConnectionId, const Peer&,
                                            const boost::json::object&);
  ServiceReply Status(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply Ping(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply Shutdown(ConnectionId, const Peer&, const boost::json::object&);
  ServiceReply SessionCreate(ConnectionId, const Peer&,
                             const boost::json::object&);
  ServiceReply SessionList(ConnectionId, const Peer&,
                           const boost::json::object&);
  ServiceReply SessionShow(ConnectionId, const Peer&,
                           const boost::json::object&);
  ServiceReply SessionKill(ConnectionId, const Peer&,
                           const boost::json::object&);
  ServiceReply SessionRing(ConnectionId, const Peer&,
                           const boost::json::object&);
  ServiceReply Resources(ConnectionId, const Peer&,
                         const boost::json::object&);
  ServiceReply Sim(ConnectionId, const Peer&, const boost::json::object&);

  uint64_t NowLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The session `id` if `peer` may see it; NOT_FOUND otherwise (a session of
  // another uid is not revealed to exist).
  absl::StatusOr<Session*> FindLocked(const Peer& peer,
                                      const boost::json::object& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckTargetLocked(const Peer& peer, const SessionSpec& spec,
                                 UniqueFd* pidfd)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases everything a session holds (consumer, requests, charges).
  // Never fails; safe on a half-built session.
  void ReleaseLocked(Session& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  boost::json::object SessionJsonLocked(const Session& s, bool detail) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SimLoop();
  // Host driver: soft-BTS tracers are started and stopped outside the kernel
  // lock (their threads take it in the sink); see kernel/pfm_kernel.h.
  absl::Status StartTracer(int32_t pid, const Peer& peer) ABSL_LOCKS_EXCLUDED(mu_);
  void RetireTracerIfUnusedLocked(int32_t pid, const Session* leaving)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapTracers() ABSL_LOCKS_EXCLUDED(mu_);
  class HostSink;

  const PfmdConfig config_;
  const MachineInfo machine_;
  AuthPolicy auth_policy_;
  std::map<std::string, Handler> handlers_;
  std::function<void()> shutdown_hook_;
  mutable KernelLock mu_;  // "the kernel lock": see kernel/pfm_kernel.h
  std::unique_ptr<Kernel> kernel_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<SimMachine> sim_ ABSL_GUARDED_BY(mu_);
  bool sim_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  MemoryAccountant accountant_ ABSL_GUARDED_BY(mu_);
  uint64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, std::unique_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  std::thread sim_thread_;
  std::unique_ptr<HostSink> sink_;
  PerfCaps perf_caps_;  // host: what /sys/bus/event_source/devices offers
  // Host soft-BTS tracers, one helper process per traced pid (shared by its
  // sessions), with the uid that started it (for --max-tracers-per-uid).
  struct Tracer {
    std::unique_ptr<TracerProcess> process;
    uid_t uid = 0;
  };
  std::map<int32_t, Tracer> tracers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<TracerProcess>> retired_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_SERVICE_H_
