// pfmd's host-driver glue for soft BTS: one tracer process per traced pid
// (kernel/drivers/ptrace/tracer_process.h), shared by that pid's sessions,
// started with the credentials of the client that asked first (the kernel
// decides whether it may attach), capped per uid. Tracers report into the
// kernel core through its CoreHooks, taking the kernel lock per report
// (TracerProcess::Host).
//
// Threading: Start() and Reap() are called without the kernel lock (they
// wait for processes); the *Locked methods with it. Tracers are stopped only
// by Reap() and the destructor, on the caller's thread; each Reap() holds
// the tracers it stops by shared_ptr, so another thread's Reap() cannot
// free one under it.
#ifndef PFM_USERSPACE_PFMD_HOST_TRACERS_H_
#define PFM_USERSPACE_PFMD_HOST_TRACERS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "kernel/drivers/ptrace/tracer_process.h"
#include "kernel/pfm_kernel.h"
#include "userspace/pfmd/auth.h"

namespace pfm {

class HostTracers {
 public:
  // What a tracer saw of its task's end, reported with the kernel lock held
  // (after the core has been told), so the owner can keep it per session.
  struct Callbacks {
    std::function<void(TaskId, int64_t wait_status)> exited;
    std::function<void(TaskId, int signo)> signaled;
  };
  HostTracers(Kernel* kernel, Callbacks callbacks);
  ~HostTracers();  // stops every tracer (the tracees run on)
  HostTracers(const HostTracers&) = delete;
  HostTracers& operator=(const HostTracers&) = delete;

  // Makes sure a live tracer runs for `pid`, starting one for `peer` if
  // none does (RESOURCE_EXHAUSTED past `max_per_uid` tracers of an
  // unprivileged uid). The tracer of an exited process at a recycled pid is
  // retired first. `options`: whether the tracer follows the pid's
  // children, its stepping and its address filters; a live tracer that
  // does not do what is asked is FAILED_PRECONDITION (one tracer per
  // process: the sessions on a pid share it), unless `as_is` (a debugger
  // takes the tracer as it is).
  // On success *out (if not null) is that tracer.
  //
  // A tracer that binds its tasks to one CPU (options.bind_cpu, no address
  // filters, no options.cpu) gets the CPU the pid may run on with the
  // fewest live bound tracers (the lowest of those tied; only CPUs pfmd
  // may use too), so that several
  // traced programs do not share one CPU while another has none
  // (docs/host_drivers.md, "One CPU").
  absl::Status Start(int32_t pid, const Peer& peer, int max_per_uid,
                     const TracerProcess::Options& options, bool as_is = false,
                     std::shared_ptr<TracerProcess>* out = nullptr);
  // The pid's live tracer, or null.
  TracerProcess* FindLocked(int32_t pid) const;
  // Queues `t` to be stopped by Reap(), if it is still its pid's tracer.
  void RetireLocked(const TracerProcess* t);
  // Stops retired tracers, and the live ones that are done (their process
  // and helper ended: the helper is reaped and its channel closed, while
  // the tracer stays findable for its sessions' stats and maps); call
  // without the kernel lock.
  void Reap();

  // What every tracer did since pfmd started (for /metrics): never
  // decreases, as counters must not. The live and retired tracers' stats as
  // last reported, plus the final stats of those stopped.
  struct Totals {
    size_t processes = 0;  // live (started, not retired, not done)
    // Live tracers with their tasks bound to one CPU, by that CPU (the one
    // they report: SoftBtsTracer::Stats::bound_cpu).
    std::map<int, size_t> bound_by_cpu;
    uint64_t steps = 0;
    uint64_t branches = 0;
  };
  Totals TotalsLocked() const;

 private:
  // The CPU for a new bound tracer of `pid` (see Start), or -1.
  int PickCpuLocked(int32_t pid) const;

  struct Entry {
    std::shared_ptr<TracerProcess> process;
    uid_t uid = 0;
    bool reaped = false;  // done, and handed to a Reap() to stop
  };

  Kernel* const kernel_;
  const Callbacks callbacks_;
  std::map<int32_t, Entry> live_;  // guarded by the kernel lock
  std::vector<std::shared_ptr<TracerProcess>> retired_;  // likewise
  // CPUs picked for tracers still starting (not in live_ yet): likewise.
  std::map<int, int> starting_cpus_;
  // Steps and branches of the tracers Reap() took out of retired_: counted
  // at the swap, and what they added while stopping once they stopped.
  static uint64_t Stops(const SoftBtsTracer::Stats& s);
  uint64_t gone_steps_ = 0, gone_branches_ = 0;  // likewise
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_HOST_TRACERS_H_
