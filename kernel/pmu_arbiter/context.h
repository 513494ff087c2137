// Context: where requests count. A task context (keyed by pid) counts while
// its task is switched in; a CPU context counts whatever runs on its CPU. On
// a CPU the hardware holds the CPU context's requests and the running
// task's. A context exists while it has requests.
//
// Admission reads a context's pinned set; the scheduler (arbiter.cc) installs
// the pinned set and deals the flexible pools on a CPU, and runs the clock.
#ifndef PFM_KERNEL_PMU_ARBITER_CONTEXT_H_
#define PFM_KERNEL_PMU_ARBITER_CONTEXT_H_

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kernel/pmu_arbiter/flexible_pool.h"
#include "kernel/pmu_arbiter/request.h"
#include "kernel/uapi/pfm_uapi.h"

namespace pfm {
namespace arbiter_internal {

struct Context {
  bool is_cpu = false;
  int cpu = -1;     // CPU context
  int32_t pid = 0;  // task context
  // Context clock (Linux's context time): a CPU context is always active; a
  // task context only while its task is switched in (on_cpu >= 0).
  uint64_t clock = 0;
  uint64_t active_since = 0;
  bool active = false;
  int on_cpu = -1;
  bool shared = false;  // another CPU may run this pid while on_cpu has it
  int requests = 0;
  PinnedSet pinned;
  FlexibleRequests flexible;

  // The context clock at `now`.
  uint64_t Now(uint64_t now) const {
    return clock + (active ? SatSub(now, active_since) : 0);
  }
};

// Every context, by CPU and by pid.
struct ContextTable {
  std::vector<std::unique_ptr<Context>> cpu;  // [cpus], null if none
  std::unordered_map<int32_t, std::unique_ptr<Context>> task;

  // The context of a valid request, or null if it does not exist yet.
  Context* Find(const pfm_pmu_req& req) const {
    if (req.ctx_kind == PFM_CTX_CPU) return cpu[req.cpu].get();
    auto it = task.find(req.pid);
    return it == task.end() ? nullptr : it->second.get();
  }
};

}  // namespace arbiter_internal
}  // namespace pfm

#endif  // PFM_KERNEL_PMU_ARBITER_CONTEXT_H_
