#include "userspace/pfmd/sim_runner.h"

#include <chrono>

namespace pfm {

SimRunner::SimRunner(Kernel* kernel, const SimConfig& config, uint64_t speed,
                     bool paused)
    : kernel_(kernel), speed_(speed), paused_(paused) {
  {
    KernelLockGuard l(&kernel_->lock());
    sim_ = std::make_unique<SimMachine>(config, kernel_);
  }
  thread_ = std::thread([this] { Loop(); });
}

SimRunner::~SimRunner() {
  {
    KernelLockGuard l(&kernel_->lock());
    stopping_ = true;
  }
  thread_.join();
  KernelLockGuard l(&kernel_->lock());
  sim_.reset();
}

// Every 10 ms of wall time the machine advances speed_ × 10 virtual ns
// (speed_ virtual ns per real ms).
void SimRunner::Loop() {
  constexpr int kStepMs = 10;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kStepMs));
    KernelLockGuard l(&kernel_->lock());
    if (stopping_) return;
    if (!paused_) sim_->Run(speed_ * kStepMs);
  }
}

}  // namespace pfm
