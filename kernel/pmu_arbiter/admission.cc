#include "kernel/pmu_arbiter/admission.h"

#include <linux/perf_event.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>

namespace pfm {
namespace arbiter_internal {

namespace {

constexpr uint32_t kKnownFlags =
    PFM_REQ_PINNED | PFM_REQ_NO_MULTIPLEX | PFM_REQ_KERNEL | PFM_REQ_PEBS;

// User breakpoints lie in the lower canonical half of 4-level paging, below
// 2^47 (Intel SDM Vol. 1, "Canonical Addressing"). Kernel ones are those
// PFM_ADDR_IS_KERNEL classifies as kernel (kernel/uapi/pfm_uapi.h).
constexpr uint64_t kUserAddressEnd = 0x0000800000000000ull;

}  // namespace

// Fixed-counter eligibility, from Linux arch/x86/events/intel/core.c's fixed
// event constraints: INST_RETIRED.ANY (0x00c0) -> fixed0,
// CPU_CLK_UNHALTED.CORE (0x003c) -> fixed1, CPU_CLK_UNHALTED.REF (0x0300) ->
// fixed2; perf's generic hardware events instructions, cycles and ref-cycles
// map to the same.
int Admission::FixedCounterFor(uint32_t type, uint64_t config) const {
  int f = -1;
  if (type == PERF_TYPE_HARDWARE) {
    if (config == PERF_COUNT_HW_INSTRUCTIONS) f = 0;
    if (config == PERF_COUNT_HW_CPU_CYCLES) f = 1;
    if (config == PERF_COUNT_HW_REF_CPU_CYCLES) f = 2;
  } else if (type == PERF_TYPE_RAW) {
    if (config == 0x00c0) f = 0;
    if (config == 0x003c) f = 1;
    if (config == 0x0300) f = 2;
  }
  return f < shape_.fixed_counters ? f : -1;
}

int Admission::Validate(const pfm_pmu_req& req, ErrorDetail* d) const {
  if (req.flags & ~kKnownFlags)
    return SetError(d, -EINVAL, "unknown request flags 0x%x",
                    req.flags & ~kKnownFlags);
  if (req.ctx_kind == PFM_CTX_TASK) {
    if (req.pid <= 0)
      return SetError(d, -EINVAL, "task context needs a pid > 0, got %d",
                      req.pid);
  } else if (req.ctx_kind == PFM_CTX_CPU) {
    if (req.cpu < 0 || req.cpu >= shape_.cpus)
      return SetError(d, -EINVAL, "cpu %d out of range (machine has %d cpus)",
                      req.cpu, shape_.cpus);
  } else {
    return SetError(d, -EINVAL, "unknown context kind %u", req.ctx_kind);
  }
  if (req.kind == PFM_REQ_COUNTER) {
    if (req.type == PERF_TYPE_SOFTWARE || req.type == PERF_TYPE_TRACEPOINT ||
        req.type == PERF_TYPE_BREAKPOINT)
      return SetError(d, -EINVAL,
                      "perf type %u does not use a PMU counter; ask for it "
                      "as a software event or a breakpoint",
                      req.type);
    if (req.flags & PFM_REQ_PEBS) {
      if (shape_.pebs_mask == 0)
        return SetError(d, -EOPNOTSUPP,
                        "PEBS not supported on this machine (no PEBS-capable "
                        "counter)");
    } else if (shape_.gp_counters == 0 &&
               FixedCounterFor(req.type, req.config) < 0) {
      return SetError(d, -EOPNOTSUPP,
                      "hardware counters not supported on this machine (0 "
                      "general-purpose counters)");
    }
    return 0;
  }
  if (req.kind != PFM_REQ_BREAKPOINT)
    return SetError(d, -EINVAL, "unknown request kind %u", req.kind);
  if (shape_.debug_registers == 0)
    return SetError(d, -EOPNOTSUPP,
                    "hardware breakpoints not supported on this machine (0 "
                    "debug registers)");
  if (req.flags & PFM_REQ_PEBS)
    return SetError(d, -EINVAL, "a breakpoint cannot ask for PEBS");
  if (req.bp_kind < PFM_BP_R || req.bp_kind > PFM_BP_X)
    return SetError(d, -EINVAL, "unknown breakpoint type %u", req.bp_kind);
  const uint64_t len = req.bp_len;
  if (req.bp_kind == PFM_BP_X) {
    // The hardware's execute length is one byte; Linux's ABI spells it
    // sizeof(long). Either is accepted, and no alignment applies.
    if (len != 1 && len != 8)
      return SetError(d, -EINVAL,
                      "execute breakpoint length must be 1 or 8, got %u",
                      req.bp_len);
  } else {
    if (len != 1 && len != 2 && len != 4 && len != 8)
      return SetError(d, -EINVAL,
                      "breakpoint length must be 1, 2, 4 or 8, got %u",
                      req.bp_len);
    if (req.bp_addr % len != 0)
      return SetError(d, -EINVAL,
                      "breakpoint address 0x%llx is not aligned to its "
                      "length %u",
                      static_cast<unsigned long long>(req.bp_addr), req.bp_len);
  }
  if (req.flags & PFM_REQ_KERNEL) {
    if (!PFM_ADDR_IS_KERNEL(req.bp_addr))
      return SetError(d, -EINVAL,
                      "kernel breakpoint address 0x%llx is not a kernel "
                      "address",
                      static_cast<unsigned long long>(req.bp_addr));
  } else if (req.bp_addr >= kUserAddressEnd ||
             kUserAddressEnd - req.bp_addr < len) {
    return SetError(d, -EINVAL,
                    "breakpoint address 0x%llx is not a user address (kernel "
                    "addresses need PFM_REQ_KERNEL)",
                    static_cast<unsigned long long>(req.bp_addr));
  }
  return 0;
}

void Admission::Classify(const pfm_pmu_req& req, Request* r) const {
  r->pinned = (req.flags & (PFM_REQ_PINNED | PFM_REQ_NO_MULTIPLEX)) != 0;
  if (req.kind == PFM_REQ_BREAKPOINT) {
    r->resource = ResourceClass::kBreakpoint;
    r->demand.bp = 1;
    return;
  }
  r->resource = ResourceClass::kCounter;
  r->type = req.type;
  r->config = req.config;
  r->pebs = (req.flags & PFM_REQ_PEBS) != 0;
  r->fixed_counter =
      static_cast<int8_t>(r->pebs ? -1 : FixedCounterFor(req.type, req.config));
  if (r->pebs) {
    r->demand.pebs = 1;
  } else if (r->fixed_counter >= 0) {
    r->demand.fixed[r->fixed_counter] = 1;
  } else {
    r->demand.generic = 1;
  }
}

// Builds the refusal message: "<resource>: N of M held on <where> by
// session S (label pinned), ...".
int Admission::Refuse(Shortage what, const Demand& held,
                      const Context* cpu_context, const Context* task_context,
                      ErrorDetail* d) const {
  if (d == nullptr) return -ENOSPC;
  char res[64] = "";
  int used = 0;
  int total = 0;
  const ResourceClass resource = what == Shortage::kDebugRegisters
                                     ? ResourceClass::kBreakpoint
                                     : ResourceClass::kCounter;
  switch (what) {
    case Shortage::kDebugRegisters:
      snprintf(res, sizeof(res), "debug registers");
      used = held.bp;
      total = shape_.debug_registers;
      break;
    case Shortage::kPebsCounters:
      snprintf(res, sizeof(res), "PEBS-capable counters (mask 0x%x)",
               shape_.pebs_mask);
      used = held.pebs;
      total = shape_.pebs_counters();
      break;
    case Shortage::kGpCounters:
      snprintf(res, sizeof(res), "general-purpose counters");
      used = held.GpNeed();
      total = shape_.gp_counters;
      break;
  }
  char where[64];
  const bool cpu_holds =
      cpu_context != nullptr && cpu_context->pinned.holds(resource);
  const bool task_holds =
      task_context != nullptr && task_context->pinned.holds(resource);
  if (cpu_holds && task_holds) {
    snprintf(where, sizeof(where), "cpu %d and task %d", cpu_context->cpu,
             task_context->pid);
  } else if (cpu_holds) {
    snprintf(where, sizeof(where), "cpu %d", cpu_context->cpu);
  } else if (task_holds) {
    snprintf(where, sizeof(where), "task %d", task_context->pid);
  } else {
    snprintf(where, sizeof(where), "this machine");
  }
  char list[200] = "";
  size_t n = 0;
  for (const Context* c : {cpu_context, task_context}) {
    if (c == nullptr) continue;
    for (const Request* r : c->pinned.requests[resource]) {
      if (what == Shortage::kPebsCounters && !r->pebs) continue;
      if (n >= sizeof(list)) break;
      int w =
          snprintf(list + n, sizeof(list) - n, "%ssession %llu (%s pinned)",
                   n ? ", " : "", static_cast<unsigned long long>(r->session),
                   r->label[0] ? r->label : "?");
      if (w > 0) n = std::min(sizeof(list), n + static_cast<size_t>(w));
    }
  }
  if (n == 0) snprintf(list, sizeof(list), "nobody");
  return d->Set(-ENOSPC, "%s: %d of %d held on %s by %s", res, used, total,
                where, list);
}

/*
 * Pinned admission. A pinned request must fit whenever its context runs, on
 * any CPU. On CPU c the hardware holds CPU context c and one task context T,
 * so for every CPU c and every task context T (including "no task"), with
 * D = pinned(c) + pinned(T) after adding the request:
 *
 *   debug registers:  D.bp                              <= debug_registers
 *   PEBS counters:    D.pebs                            <= |pebs_mask|
 *   GP counters:      D.pebs + D.generic
 *                       + sum_i max(0, D.fixed_i - 1)   <= gp_counters
 *
 * where fixed_i counts non-PEBS requests for the event fixed counter i
 * serves (one of them takes the fixed counter, the rest need GP counters;
 * Demand::GpNeed). For breakpoints this is DESIGN's rule: CPU-bound demand
 * + the largest per-task demand <= slots, per CPU. The three counter rules
 * are also sufficient: CpuSlots::InstallPinned places fixed-eligible events
 * first, then PEBS events on PEBS counters, then the rest on the remaining
 * GP counters (non-PEBS ones first), which always succeeds when they hold.
 * A task request is checked against every CPU context, a CPU request
 * against every task context (pairwise, not against the component-wise
 * maximum over tasks, so a task with many PEBS events and another with many
 * plain ones don't block each other needlessly). A refused request changes
 * nothing.
 */
int Admission::AdmitPinned(const pfm_pmu_req& req, const Request& r,
                           const ContextTable& contexts,
                           ErrorDetail* d) const {
  const Context* target = contexts.Find(req);
  Demand mine;
  if (target != nullptr) mine = target->pinned.demand;
  mine.Add(r.demand, +1);

  auto check = [&](const Demand& other, const Context* cpu_context,
                   const Context* task_context) -> int {
    Demand sum = mine;
    sum.Add(other, +1);
    Demand held = sum;
    held.Add(r.demand, -1);
    if (r.resource == ResourceClass::kBreakpoint) {
      if (sum.bp > shape_.debug_registers)
        return Refuse(Shortage::kDebugRegisters, held, cpu_context,
                      task_context, d);
      return 0;
    }
    if (sum.pebs > shape_.pebs_counters())
      return Refuse(Shortage::kPebsCounters, held, cpu_context, task_context,
                    d);
    if (sum.GpNeed() > shape_.gp_counters)
      return Refuse(Shortage::kGpCounters, held, cpu_context, task_context, d);
    return 0;
  };

  if (req.ctx_kind == PFM_CTX_TASK) {
    for (const auto& cpu_context : contexts.cpu) {
      const Context* cc = cpu_context.get();
      int err = check(cc ? cc->pinned.demand : Demand{}, cc, target);
      if (err < 0) return err;
    }
    return 0;
  }
  int err = check(Demand{}, target, nullptr);
  if (err < 0) return err;
  for (const auto& [pid, t] : contexts.task) {
    err = check(t->pinned.demand, target, t.get());
    if (err < 0) return err;
  }
  return 0;
}

}  // namespace arbiter_internal
}  // namespace pfm
