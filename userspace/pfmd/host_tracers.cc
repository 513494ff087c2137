#include "userspace/pfmd/host_tracers.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "userspace/pfmd/errno_status.h"

namespace pfm {

// The tracers' view of the core: every report takes the kernel lock.
class HostTracers::Sink : public SoftBtsSink {
 public:
  Sink(Kernel* k, Callbacks cb) : k_(k), cb_(std::move(cb)) {}
  void Drain(DsArea& area, TaskId task, int cpu, uint64_t now_ns) override {
    KernelLockGuard l(&k_->lock());
    k_->DrainForeign(area, task, Cpu(cpu), now_ns);
  }
  bool Held(TaskId task) override {
    KernelLockGuard l(&k_->lock());
    return k_->TaskHeld(task);
  }
  void Switch(int cpu, uint64_t now_ns, TaskId prev, TaskId next,
              bool preempt) override {
    KernelLockGuard l(&k_->lock());
    k_->ContextSwitch(Cpu(cpu), now_ns, prev, next, preempt);
  }
  void Exited(TaskId task, uint64_t now_ns, int64_t wait_status) override {
    KernelLockGuard l(&k_->lock());
    k_->TaskExit(task, now_ns, wait_status);
    if (cb_.exited) cb_.exited(task, wait_status);
  }
  void Signaled(TaskId task, uint64_t now_ns, int signo) override {
    KernelLockGuard l(&k_->lock());
    k_->TaskCrashed(task, now_ns, signo);
    if (cb_.signaled) cb_.signaled(task, signo);
  }

 private:
  // A tracer's CPU number is the host's; the core knows machine().cpus.
  int Cpu(int cpu) const { return cpu >= 0 && cpu < k_->machine().cpus ? cpu : 0; }
  Kernel* const k_;
  const Callbacks cb_;
};

HostTracers::HostTracers(Kernel* kernel, Callbacks callbacks)
    : kernel_(kernel), sink_(std::make_unique<Sink>(kernel, std::move(callbacks))) {}

HostTracers::~HostTracers() {
  std::vector<std::unique_ptr<TracerProcess>> all;
  {
    KernelLockGuard l(&kernel_->lock());
    for (auto& [pid, e] : live_) all.push_back(std::move(e.process));
    live_.clear();
    for (auto& t : retired_) all.push_back(std::move(t));
    retired_.clear();
  }
  for (auto& t : all) t->Stop();
}

absl::Status HostTracers::Start(int32_t pid, const Peer& peer, int max_per_uid) {
  {
    KernelLockGuard l(&kernel_->lock());
    auto it = live_.find(pid);
    if (it != live_.end()) {
      if (!it->second.process->done()) return absl::OkStatus();
      // The pid's earlier process is gone (pid reuse): a new tracer.
      retired_.push_back(std::move(it->second.process));
      live_.erase(it);
    }
    if (!peer.privileged()) {
      int mine = 0;
      for (const auto& [p, e] : live_) mine += e.uid == peer.uid;
      if (mine >= max_per_uid)
        return absl::ResourceExhaustedError(absl::StrCat(
            "uid ", peer.uid, " has ", mine, " soft-BTS tracer processes (limit ",
            max_per_uid, ", --max-tracers-per-uid)"));
    }
  }
  std::unique_ptr<TracerProcess> t;
  ErrorDetail d;
  const int err = TracerProcess::Start(pid, peer.TracerCredentials(), sink_.get(), &t, &d);
  if (err < 0) return ErrnoToStatus(err, d);
  KernelLockGuard l(&kernel_->lock());
  live_[pid] = Entry{std::move(t), peer.uid};
  return absl::OkStatus();
}

TracerProcess* HostTracers::FindLocked(int32_t pid) const {
  kernel_->lock().AssertHeld();
  auto it = live_.find(pid);
  return it == live_.end() ? nullptr : it->second.process.get();
}

void HostTracers::RetireLocked(int32_t pid) {
  kernel_->lock().AssertHeld();
  auto it = live_.find(pid);
  if (it == live_.end()) return;
  retired_.push_back(std::move(it->second.process));
  live_.erase(it);
}

void HostTracers::Reap() {
  std::vector<std::unique_ptr<TracerProcess>> stop;
  {
    KernelLockGuard l(&kernel_->lock());
    stop.swap(retired_);
  }
  for (auto& t : stop) t->Stop();
}

}  // namespace pfm
