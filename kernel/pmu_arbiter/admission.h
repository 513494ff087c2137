// Admission: whether a request may be added, and if not, why, in one
// sentence. The job Linux's kernel/events/hw_breakpoint.c does for
// breakpoints, for counters too:
//
// - Validate: the request is well formed and the machine has a resource
//   that could ever serve it (-EINVAL, -EOPNOTSUPP);
// - Classify: its resource class, fixed counter, PEBS and pinned demand;
// - AdmitPinned: a pinned request is admitted only if it can always be on
//   the hardware while its context runs; otherwise -ENOSPC with a message
//   that names the resource, the contexts and the holders.
//
// Flexible requests need no admission: they wait (flexible_pool.h).
// Admission changes nothing; the caller adds an admitted request to its
// context (PinnedSet::Add). Control path: allocates nothing; AdmitPinned
// costs O(cpus) for a task request and O(task contexts) for a CPU request.
#ifndef PFM_KERNEL_PMU_ARBITER_ADMISSION_H_
#define PFM_KERNEL_PMU_ARBITER_ADMISSION_H_

#include <cstdint>

#include "kernel/pmu_arbiter/context.h"
#include "kernel/pmu_arbiter/request.h"
#include "kernel/uapi/pfm_error.h"
#include "kernel/uapi/pfm_uapi.h"

namespace pfm {
namespace arbiter_internal {

class Admission {
 public:
  explicit Admission(const PmuShape& shape) : shape_(shape) {}

  // 0, or -EINVAL / -EOPNOTSUPP with the reason in `d` (may be null).
  int Validate(const pfm_pmu_req& req, ErrorDetail* d) const;
  // Sets what admission and scheduling need of a valid request in `r`:
  // pinned, resource class, type/config, PEBS, fixed counter, demand.
  void Classify(const pfm_pmu_req& req, Request* r) const;
  // The fixed counter that may count event (type, config) on this machine,
  // or -1.
  int FixedCounterFor(uint32_t type, uint64_t config) const;
  // 0 if the pinned request `r` (classified from `req`, not yet in its
  // context) can always be on the hardware along with every pinned request
  // in `contexts`; -ENOSPC with a message otherwise. See admission.cc.
  int AdmitPinned(const pfm_pmu_req& req, const Request& r,
                  const ContextTable& contexts, ErrorDetail* d) const;

 private:
  enum class Shortage { kDebugRegisters, kPebsCounters, kGpCounters };

  int Refuse(Shortage what, const Demand& held, const Context* cpu_context,
             const Context* task_context, ErrorDetail* d) const;

  const PmuShape shape_;
};

}  // namespace arbiter_internal
}  // namespace pfm

#endif  // PFM_KERNEL_PMU_ARBITER_ADMISSION_H_
