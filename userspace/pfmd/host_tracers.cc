#include "userspace/pfmd/host_tracers.h"

#include <sched.h>

#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "userspace/pfmd/errno_status.h"

namespace pfm {

HostTracers::HostTracers(Kernel* kernel, Callbacks callbacks)
    : kernel_(kernel), callbacks_(std::move(callbacks)) {}

HostTracers::~HostTracers() {
  std::vector<std::shared_ptr<TracerProcess>> all;
  {
    KernelLockGuard l(&kernel_->lock());
    for (auto& [pid, e] : live_) all.push_back(std::move(e.process));
    live_.clear();
    for (auto& t : retired_) all.push_back(std::move(t));
    retired_.clear();
  }
  for (auto& t : all) t->Stop();
}

int HostTracers::PickCpuLocked(int32_t pid) const {
  kernel_->lock().AssertHeld();
  cpu_set_t allowed, ours;
  CPU_ZERO(&allowed);
  CPU_ZERO(&ours);
  if (::sched_getaffinity(pid, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2)
    return -1;  // not bound (SoftBtsRun::SetUpBinding), or the pid is gone
  // The helper (forked from this thread) must be able to go there too: a
  // CPU pfmd may not use (its cgroup's cpuset) would leave the tracer
  // unbound.
  if (::sched_getaffinity(0, sizeof(ours), &ours) != 0) return -1;
  CPU_AND(&allowed, &allowed, &ours);
  std::map<int, int> load = starting_cpus_;
  for (const auto& [p, e] : live_) {
    if (e.process->done()) continue;
    // Where it bound, once it says (the helper falls back to its own CPU
    // when the program may not run on the one picked); until then the pick.
    const TracerProcess::Options& o = e.process->options();
    const int bound = e.process->stats().bound_cpu;
    const int cpu = bound >= 0 ? bound : o.bind_cpu ? o.cpu : -1;
    if (cpu >= 0) ++load[cpu];
  }
  int best = -1, best_load = INT_MAX;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    auto it = load.find(c);
    const int n = it == load.end() ? 0 : it->second;
    if (n < best_load) {
      best = c;
      best_load = n;
    }
  }
  return best;
}

absl::Status HostTracers::Start(int32_t pid, const Peer& peer, int max_per_uid,
                                const TracerProcess::Options& asked, bool as_is,
                                std::shared_ptr<TracerProcess>* out) {
  TracerProcess::Options options = asked;
  const bool inherit = options.inherit;
  int reserved = -1;  // the CPU this call picked, counted in starting_cpus_
  {
    KernelLockGuard l(&kernel_->lock());
    auto it = live_.find(pid);
    if (it != live_.end()) {
      if (!it->second.process->done()) {
        if (as_is) {
          if (out != nullptr) *out = it->second.process;
          return absl::OkStatus();
        }
        if (it->second.process->inherit() != inherit)
          return absl::FailedPreconditionError(absl::StrCat(
              "pid ", pid, " is traced ",
              it->second.process->inherit() ? "with" : "without",
              " its children (--inherit) by another session; its sessions "
              "share one tracer, so ask the same"));
        if (!it->second.process->options().SameFilter(options))
          return absl::FailedPreconditionError(absl::StrCat(
              "pid ", pid, " is traced with other address filters (--filter, --start) by "
              "another session; its sessions share one tracer, so ask the same"));
        if (out != nullptr) *out = it->second.process;
        return absl::OkStatus();
      }
      // The pid's earlier process is gone (pid reuse): a new tracer.
      retired_.push_back(std::move(it->second.process));
      live_.erase(it);
    }
    if (!peer.privileged()) {
      // A done tracer (its process exited) stays in live_ for its sessions'
      // stats, but is no process of the uid's any more.
      int mine = 0;
      for (const auto& [p, e] : live_) mine += e.uid == peer.uid && !e.process->done();
      if (mine >= max_per_uid)
        return absl::ResourceExhaustedError(absl::StrCat(
            "uid ", peer.uid, " has ", mine, " soft-BTS tracer processes (limit ",
            max_per_uid, ", --max-tracers-per-uid)"));
    }
    if (options.bind_cpu && options.cpu < 0 && options.filter_ranges.empty() &&
        options.filter_files.empty() && options.start_at == 0) {
      options.cpu = PickCpuLocked(pid);
      if (options.cpu >= 0) ++starting_cpus_[reserved = options.cpu];
    }
  }
  // The CPU picked is counted in live_ once the tracer is there.
  auto unreserve = [this, reserved] {
    kernel_->lock().AssertHeld();
    auto it = starting_cpus_.find(reserved);
    if (it != starting_cpus_.end() && --it->second == 0) starting_cpus_.erase(it);
  };
  // The tracer reports into the core through its CoreHooks, under the
  // kernel lock; its task's end is passed on to the owner.
  TracerProcess::Host host;
  host.core = kernel_;
  host.lock = &kernel_->lock();
  host.cpus = kernel_->machine().cpus;
  const TaskId task{pid, pid};
  if (callbacks_.exited)
    host.exited = [cb = callbacks_.exited, task](int64_t st) { cb(task, st); };
  if (callbacks_.signaled)
    host.signaled = [cb = callbacks_.signaled, task](int signo) { cb(task, signo); };
  std::unique_ptr<TracerProcess> t;
  ErrorDetail d;
  const int err = TracerProcess::Start(pid, peer.TracerCredentials(), std::move(host), &t,
                                       &d, "/proc/self/exe", options);
  KernelLockGuard l(&kernel_->lock());
  unreserve();
  if (err < 0) return ErrnoToStatus(err, d);
  Entry& e = live_[pid];
  e = Entry{std::move(t), peer.uid};
  if (out != nullptr) *out = e.process;
  return absl::OkStatus();
}

TracerProcess* HostTracers::FindLocked(int32_t pid) const {
  kernel_->lock().AssertHeld();
  auto it = live_.find(pid);
  return it == live_.end() ? nullptr : it->second.process.get();
}

void HostTracers::RetireLocked(const TracerProcess* t) {
  kernel_->lock().AssertHeld();
  if (t == nullptr) return;
  auto it = live_.find(t->pid());
  if (it == live_.end() || it->second.process.get() != t) return;
  retired_.push_back(std::move(it->second.process));
  live_.erase(it);
}

void HostTracers::Reap() {
  std::vector<std::shared_ptr<TracerProcess>> stop;
  std::vector<std::shared_ptr<TracerProcess>> finished;  // done, kept in live_
  std::vector<SoftBtsTracer::Stats> counted;
  {
    KernelLockGuard l(&kernel_->lock());
    // A live tracer whose process ended (detached sessions keep it until
    // they are killed): its helper is reaped and its channel closed now,
    // not when its last session goes.
    for (auto& [pid, e] : live_)
      if (!e.reaped && e.process->done()) {
        e.reaped = true;
        finished.push_back(e.process);
      }
    stop.swap(retired_);
    // Counted now, while they leave retired_, so TotalsLocked never dips
    // while they stop; their last drain is added below.
    for (const auto& t : stop) {
      counted.push_back(t->stats());
      gone_steps_ += Stops(counted.back());
      gone_branches_ += counted.back().branches;
    }
  }
  for (auto& t : finished) t->Stop();
  if (stop.empty()) return;
  for (auto& t : stop) t->Stop();
  KernelLockGuard l(&kernel_->lock());
  for (size_t i = 0; i < stop.size(); ++i) {
    const SoftBtsTracer::Stats last = stop[i]->stats();
    if (Stops(last) > Stops(counted[i])) gone_steps_ += Stops(last) - Stops(counted[i]);
    if (last.branches > counted[i].branches)
      gone_branches_ += last.branches - counted[i].branches;
  }
}

// The stops a tracer made its threads take: single steps, and branch
// stepping's int3 stops.
uint64_t HostTracers::Stops(const SoftBtsTracer::Stats& s) { return s.steps + s.branch_stops; }

HostTracers::Totals HostTracers::TotalsLocked() const {
  kernel_->lock().AssertHeld();
  Totals t;
  for (const auto& [pid, e] : live_) {
    if (e.process->done()) continue;
    ++t.processes;
    const int cpu = e.process->stats().bound_cpu;
    if (cpu >= 0) ++t.bound_by_cpu[cpu];
  }
  t.steps = gone_steps_;
  t.branches = gone_branches_;
  auto add = [&t](const TracerProcess& p) {
    const SoftBtsTracer::Stats s = p.stats();
    t.steps += Stops(s);
    t.branches += s.branches;
  };
  for (const auto& [pid, e] : live_) add(*e.process);
  for (const auto& r : retired_) add(*r);
  return t;
}

}  // namespace pfm
