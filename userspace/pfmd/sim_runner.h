// pfmd's sim driver glue: the simulated machine (kernel/drivers/sim) and the
// thread that runs it in scaled real time, `sim_speed` virtual ns per real
// ms, under the kernel lock (its hooks run with the lock held).
#ifndef PFM_USERSPACE_PFMD_SIM_RUNNER_H_
#define PFM_USERSPACE_PFMD_SIM_RUNNER_H_

#include <cstdint>
#include <memory>
#include <thread>

#include "kernel/drivers/sim/sim_machine.h"
#include "kernel/pfm_kernel.h"

namespace pfm {

class SimRunner {
 public:
  // Creates the simulated machine on `kernel` and starts its thread
  // (stopped at once when `paused`).
  SimRunner(Kernel* kernel, const SimConfig& config, uint64_t speed, bool paused);
  ~SimRunner();  // stops the thread
  SimRunner(const SimRunner&) = delete;
  SimRunner& operator=(const SimRunner&) = delete;

  // With the kernel lock held.
  SimMachine& machine() { return *sim_; }
  bool paused() const { return paused_; }
  void set_paused(bool p) { paused_ = p; }

 private:
  void Loop();

  Kernel* const kernel_;
  const uint64_t speed_;
  std::unique_ptr<SimMachine> sim_;  // guarded by the kernel lock
  bool paused_;                      // likewise
  bool stopping_ = false;            // likewise
  std::thread thread_;
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_SIM_RUNNER_H_
