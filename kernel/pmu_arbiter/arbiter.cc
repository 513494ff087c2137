#include "kernel/pmu_arbiter/arbiter.h"

#include <linux/perf_event.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>

namespace pfm {

namespace {

// Resource classes. Counters (GP + fixed) and debug registers are admitted
// and multiplexed independently.
constexpr int kCounters = 0;
constexpr int kBreakpoints = 1;
constexpr int kClasses = 2;

// What Refuse is complaining about.
constexpr int kRefuseDr = 0;
constexpr int kRefusePebs = 1;
constexpr int kRefuseGp = 2;

constexpr int kMaxSlots = 32;
constexpr int kFixedEligible = 3;  // instructions, cycles, ref-cycles
// Per deal of one class: slots (GP + fixed counters), and requests visited
// (one per slot placed plus the unfit budget, 2 * slots + 2).
constexpr int kMaxDealSlots = 2 * kMaxSlots;
constexpr int kMaxDealVisits = 3 * kMaxDealSlots + 2;

// x86-64 canonical halves: user addresses lie below 2^47, kernel ones at or
// above 0xffff800000000000 (4-level paging; Intel SDM Vol. 1, "Canonical
// Addressing").
constexpr uint64_t kUserAddressEnd = 0x0000800000000000ull;
constexpr uint64_t kKernelAddressStart = 0xffff800000000000ull;

constexpr uint32_t kKnownFlags =
    PFM_REQ_PINNED | PFM_REQ_NO_MULTIPLEX | PFM_REQ_KERNEL | PFM_REQ_PEBS;

uint64_t SatSub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

uint32_t LowMask(int n) { return n >= 32 ? 0xffffffffu : (1u << n) - 1; }

}  // namespace

// Pinned demand of one context, in the units the admission formula needs.
struct PmuArbiter::Demand {
  int pebs = 0;                    // PEBS counters: only in pebs_counter_mask
  int generic = 0;                 // any GP counter
  int fixed[kFixedEligible] = {};  // may use fixed counter i or any GP
  int bp = 0;                      // debug registers

  void Add(const Demand& o, int sign) {
    pebs += sign * o.pebs;
    generic += sign * o.generic;
    for (int i = 0; i < kFixedEligible; ++i) fixed[i] += sign * o.fixed[i];
    bp += sign * o.bp;
  }
  // GP counters needed: fixed-eligible events beyond the first of their kind
  // spill onto GP counters. Fixed counters that don't exist were never
  // counted in fixed[] (such events are generic).
  int GpNeed() const {
    int n = pebs + generic;
    for (int i = 0; i < kFixedEligible; ++i) n += std::max(0, fixed[i] - 1);
    return n;
  }
};

// Hot fields first: a deal, a rotation and a slot change touch only the
// first 64 bytes of each request and session they visit (one or two cache
// lines; alignas(64) measured no faster in bench/arbiter and costs 25% more
// memory per request), not fields spread over the whole object.
struct PmuArbiter::Request {
  // Flexible: ring of the session's requests in this context and class, in
  // rotation order.
  Request* prev = nullptr;
  Request* next = nullptr;
  SessionQueue* sq = nullptr;
  Context* ctx = nullptr;
  uint64_t placed_stamp = 0;  // == its pool's stamp: placed in the last deal
  // Accounting: on_since is `now`.
  uint64_t on_since = 0;
  uint64_t running = 0;
  int32_t on_cpu = -1;
  int8_t slot = -1;   // counter index (GP i / 32+i) or debug register
  int8_t fixed = -1;  // the fixed counter it may use, -1 = GP only
  bool pebs = false;
  uint8_t cls = kCounters;

  // Flexible and fixed-eligible: ring of the session's requests for the same
  // fixed counter, in the same order as the rotation ring.
  Request* fprev = nullptr;
  Request* fnext = nullptr;
  RequestId id = 0;
  bool pinned = false;
  uint32_t type = 0;
  uint64_t config = 0;
  uint64_t session = 0;
  uint64_t value = 0;
  uint64_t enabled_base = 0;  // on the context clock
  Demand unit;  // this request's contribution to its context's demand
  char label[kLabelBytes] = {};
};

// One session's flexible requests of one context and class, in rotation
// order. Sessions form a ring in their Pool; those with requests for fixed
// counter i also form the pool's ring for fixed counter i.
struct PmuArbiter::SessionQueue {
  SessionQueue* prev = nullptr;
  SessionQueue* next = nullptr;
  Request* start = nullptr;  // the current round starts here
  int count = 0;
  // Deal state; valid only while stamp == the pool's stamp, which makes
  // resetting it O(1) per visited session instead of O(sessions).
  int visited = 0;
  uint64_t stamp = 0;
  Request* pos = nullptr;  // next request to visit
  uint64_t session = 0;

  // Requests that may use fixed counter i, in rotation order (the rotation
  // ring restricted to them); fhead[i] is the first of them at or after
  // start. Null when the session has none.
  Request* fhead[kFixedEligible] = {};
  int fcount[kFixedEligible] = {};
  SessionQueue* fprev[kFixedEligible] = {};
  SessionQueue* fnext[kFixedEligible] = {};
};

// Flexible requests of one context and class.
struct PmuArbiter::Pool {
  SessionQueue* cursor = nullptr;  // the current round starts at this session
  int total = 0;
  int pebs_total = 0;  // PEBS requests among them
  // Ring of the sessions with requests for fixed counter i; the next one to
  // get fixed counter i when the GP counters are full. Null if none.
  SessionQueue* fcursor[kFixedEligible] = {};
  std::map<uint64_t, std::unique_ptr<SessionQueue>> sessions;

  // The last deal, which rotation continues from.
  uint64_t stamp = 0;
  bool deal_valid = false;    // no Add/Remove since
  bool left_waiting = false;  // some request was not placed
  int visited = 0;
  int pebs_visited = 0;
  SessionQueue* walk = nullptr;         // where the deal continues
  SessionQueue* last_served = nullptr;  // last one served in the round-robin
  SessionQueue* fixed_served[kFixedEligible] = {};  // got fixed i after it
  std::vector<Request*> placed;         // in placement order, capacity fixed
  std::vector<SessionQueue*> spliced;   // exhausted, unlinked for the deal
};

struct PmuArbiter::Context {
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
  int nreq = 0;
  // Rotation progress is the context's own: its flexible requests rotate
  // once per mux interval of *its* clock (a task's run time), wherever it
  // runs. Context clock at the last rotation (or while not oversubscribed).
  uint64_t rotated_at = 0;
  Demand pinned_demand;
  std::vector<Request*> pinned[kClasses];
  Pool pools[kClasses];
};

struct PmuArbiter::Cpu {
  Request* gp[kMaxSlots] = {};
  Request* fixed[kMaxSlots] = {};
  Request* dr[kMaxSlots] = {};
  uint32_t gp_free = 0;
  uint32_t fixed_free = 0;
  uint32_t dr_free = 0;
  int32_t pid = 0;              // running task, 0 = idle / switched out
  Context* task = nullptr;      // its context when it is installed here
  bool dirty = false;           // contexts changed: refill at next Tick
};

PmuArbiter::PmuArbiter(const MachineInfo& m, uint64_t mux_interval_ns)
    : cpus_(m.cpus),
      n_gp_(std::clamp(m.gp_counters, 0, kMaxSlots)),
      n_fixed_(std::clamp(m.fixed_counters, 0, kMaxSlots)),
      n_dr_(std::clamp(m.debug_registers, 0, kMaxSlots)),
      gp_mask_(LowMask(n_gp_)),
      pebs_mask_(m.pebs_counter_mask & LowMask(n_gp_)),
      mux_interval_ns_(mux_interval_ns) {
  assert(m.cpus > 0);
  assert(mux_interval_ns > 0);
  static_assert(offsetof(Request, fprev) == 64,
                "what a deal touches is a request's first 64 bytes");
  static_assert(offsetof(SessionQueue, fhead) <= 64,
                "what a deal touches is a session's first 64 bytes");
  cpu_ctx_.resize(cpus_);
  for (int i = 0; i < cpus_; ++i) {
    auto c = std::make_unique<Cpu>();
    c->gp_free = gp_mask_;
    c->fixed_free = LowMask(n_fixed_);
    c->dr_free = LowMask(n_dr_);
    cpu_.push_back(std::move(c));
  }
}

PmuArbiter::~PmuArbiter() = default;

// Fixed-counter eligibility, from Linux arch/x86/events/intel/core.c's fixed
// event constraints: INST_RETIRED.ANY (0x00c0) -> fixed0,
// CPU_CLK_UNHALTED.CORE (0x003c) -> fixed1, CPU_CLK_UNHALTED.REF (0x0300) ->
// fixed2; perf's generic hardware events instructions, cycles and ref-cycles
// map to the same.
int PmuArbiter::FixedCounterFor(uint32_t type, uint64_t config) const {
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
  return f < n_fixed_ ? f : -1;
}

int PmuArbiter::Validate(const pfm_pmu_req& req, ErrorDetail* d) const {
  if (req.flags & ~kKnownFlags)
    return SetError(d, -EINVAL, "unknown request flags 0x%x",
                    req.flags & ~kKnownFlags);
  if (req.ctx_kind == PFM_CTX_TASK) {
    if (req.pid <= 0)
      return SetError(d, -EINVAL, "task context needs a pid > 0, got %d",
                      req.pid);
  } else if (req.ctx_kind == PFM_CTX_CPU) {
    if (req.cpu < 0 || req.cpu >= cpus_)
      return SetError(d, -EINVAL, "cpu %d out of range (machine has %d cpus)",
                      req.cpu, cpus_);
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
      if (pebs_mask_ == 0)
        return SetError(d, -EOPNOTSUPP,
                        "PEBS not supported on this machine (no PEBS-capable "
                        "counter)");
    } else if (n_gp_ == 0 && FixedCounterFor(req.type, req.config) < 0) {
      return SetError(d, -EOPNOTSUPP,
                      "hardware counters not supported on this machine (0 "
                      "general-purpose counters)");
    }
    return 0;
  }
  if (req.kind != PFM_REQ_BREAKPOINT)
    return SetError(d, -EINVAL, "unknown request kind %u", req.kind);
  if (n_dr_ == 0)
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
    if (req.bp_addr < kKernelAddressStart)
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

PmuArbiter::Context* PmuArbiter::FindContext(const pfm_pmu_req& req) const {
  if (req.ctx_kind == PFM_CTX_CPU) return cpu_ctx_[req.cpu].get();
  auto it = tasks_.find(req.pid);
  return it == tasks_.end() ? nullptr : it->second.get();
}

PmuArbiter::Context* PmuArbiter::GetOrCreateContext(const pfm_pmu_req& req,
                                                    uint64_t now) {
  Context* c = FindContext(req);
  if (c != nullptr) return c;
  auto ctx = std::make_unique<Context>();
  c = ctx.get();
  for (Pool& p : c->pools) {
    // A deal places at most one request per slot and visits at most
    // slots + unfit-budget requests (see DealClass): nothing grows on the
    // scheduling path.
    p.placed.reserve(kMaxDealSlots);
    p.spliced.reserve(kMaxDealVisits);
  }
  if (req.ctx_kind == PFM_CTX_CPU) {
    c->is_cpu = true;
    c->cpu = req.cpu;
    c->active = true;
    c->active_since = now;
    cpu_ctx_[req.cpu] = std::move(ctx);
  } else {
    c->pid = req.pid;
    tasks_[req.pid] = std::move(ctx);
    // The task may be running already: its clock starts now.
    for (int i = 0; i < cpus_; ++i) {
      Cpu& cpu = *cpu_[i];
      if (cpu.pid != req.pid || cpu.task != nullptr) continue;
      if (c->on_cpu >= 0) {
        c->shared = true;
        break;
      }
      cpu.task = c;
      c->on_cpu = i;
      c->active = true;
      c->active_since = now;
    }
  }
  return c;
}

void PmuArbiter::MaybeDeleteContext(Context* c) {
  if (c->nreq > 0) return;
  if (c->is_cpu) {
    cpu_ctx_[c->cpu].reset();
    return;
  }
  if (c->on_cpu >= 0) cpu_[c->on_cpu]->task = nullptr;
  tasks_.erase(c->pid);
}

void PmuArbiter::MarkDirty(const Context* c) {
  if (c->is_cpu) {
    cpu_[c->cpu]->dirty = true;
  } else if (c->on_cpu >= 0) {
    cpu_[c->on_cpu]->dirty = true;
  }
}

uint64_t PmuArbiter::CtxNow(const Context& c, uint64_t now) const {
  return c.clock + (c.active ? SatSub(now, c.active_since) : 0);
}

// Builds the refusal message: "<resource>: N of M held on <where> by
// session S (label pinned), ...".
int PmuArbiter::Refuse(int what, const Demand& held, const Context* cpu_ctx,
                       const Context* task_ctx, ErrorDetail* d) const {
  if (d == nullptr) return -ENOSPC;
  char res[64];
  int used = 0;
  int total = 0;
  const int cls = what == kRefuseDr ? kBreakpoints : kCounters;
  if (what == kRefuseDr) {
    snprintf(res, sizeof(res), "debug registers");
    used = held.bp;
    total = n_dr_;
  } else if (what == kRefusePebs) {
    snprintf(res, sizeof(res), "PEBS-capable counters (mask 0x%x)", pebs_mask_);
    used = held.pebs;
    total = __builtin_popcount(pebs_mask_);
  } else {
    snprintf(res, sizeof(res), "general-purpose counters");
    used = held.GpNeed();
    total = n_gp_;
  }
  char where[64];
  const bool cpu_holds = cpu_ctx != nullptr && !cpu_ctx->pinned[cls].empty();
  const bool task_holds = task_ctx != nullptr && !task_ctx->pinned[cls].empty();
  if (cpu_holds && task_holds) {
    snprintf(where, sizeof(where), "cpu %d and task %d", cpu_ctx->cpu,
             task_ctx->pid);
  } else if (cpu_holds) {
    snprintf(where, sizeof(where), "cpu %d", cpu_ctx->cpu);
  } else if (task_holds) {
    snprintf(where, sizeof(where), "task %d", task_ctx->pid);
  } else {
    snprintf(where, sizeof(where), "this machine");
  }
  char list[200] = "";
  size_t n = 0;
  for (const Context* c : {cpu_ctx, task_ctx}) {
    if (c == nullptr) continue;
    for (const Request* r : c->pinned[cls]) {
      if (what == kRefusePebs && !r->pebs) continue;
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
 *   debug registers:   D.bp                                  <= debug_registers
 *   PEBS counters:     D.pebs                                <=
 * |pebs_counter_mask| GP counters:       D.pebs + D.generic
 *                        + sum_i max(0, D.fixed_i - 1)      <= gp_counters
 *
 * where fixed_i counts non-PEBS requests for the event fixed counter i
 * serves (one of them takes the fixed counter, the rest need GP counters).
 * For breakpoints this is DESIGN's rule: CPU-bound demand + the largest
 * per-task demand <= slots. The three counter rules are also sufficient:
 * InstallPinned places fixed-eligible events first, then PEBS events on
 * PEBS counters, then the rest on the remaining GP counters (non-PEBS ones
 * first), which always succeeds when they hold. A task request is checked
 * against every CPU context, a CPU request against every task context; a
 * refused request changes nothing.
 */
int PmuArbiter::AdmitPinned(const pfm_pmu_req& req, const Request& r,
                            ErrorDetail* d) {
  const Context* target = FindContext(req);
  Demand mine;
  if (target != nullptr) mine = target->pinned_demand;
  mine.Add(r.unit, +1);

  auto check = [&](const Demand& other, const Context* cpu_ctx,
                   const Context* task_ctx) -> int {
    Demand sum = mine;
    sum.Add(other, +1);
    Demand held = sum;
    held.Add(r.unit, -1);
    if (r.cls == kBreakpoints) {
      if (sum.bp > n_dr_) return Refuse(kRefuseDr, held, cpu_ctx, task_ctx, d);
      return 0;
    }
    if (sum.pebs > __builtin_popcount(pebs_mask_))
      return Refuse(kRefusePebs, held, cpu_ctx, task_ctx, d);
    if (sum.GpNeed() > n_gp_)
      return Refuse(kRefuseGp, held, cpu_ctx, task_ctx, d);
    return 0;
  };

  if (req.ctx_kind == PFM_CTX_TASK) {
    for (int c = 0; c < cpus_; ++c) {
      const Context* cc = cpu_ctx_[c].get();
      int err = check(cc ? cc->pinned_demand : Demand{}, cc, target);
      if (err < 0) return err;
    }
    return 0;
  }
  int err = check(Demand{}, target, nullptr);
  if (err < 0) return err;
  for (const auto& [pid, t] : tasks_) {
    err = check(t->pinned_demand, target, t.get());
    if (err < 0) return err;
  }
  return 0;
}

// A flexible request for fixed counter i joins the back of its session's
// ring for i, and the session joins the back of the pool's ring for i (so
// it waits its turn for the fixed counter, as a new session does).
void PmuArbiter::LinkFixed(Pool& p, SessionQueue* s, Request* r) {
  const int f = r->fixed;
  if (s->fcount[f]++ == 0) {
    r->fnext = r->fprev = r;
    s->fhead[f] = r;
    SessionQueue*& cur = p.fcursor[f];
    if (cur == nullptr) {
      s->fnext[f] = s->fprev[f] = s;
      cur = s;
    } else {
      s->fnext[f] = cur;
      s->fprev[f] = cur->fprev[f];
      s->fprev[f]->fnext[f] = s;
      cur->fprev[f] = s;
    }
    return;
  }
  Request* head = s->fhead[f];
  r->fnext = head;
  r->fprev = head->fprev;
  r->fprev->fnext = r;
  head->fprev = r;
}

void PmuArbiter::UnlinkFixed(Pool& p, SessionQueue* s, Request* r) {
  const int f = r->fixed;
  if (--s->fcount[f] == 0) {
    s->fhead[f] = nullptr;
    SessionQueue*& cur = p.fcursor[f];
    if (s->fnext[f] == s) {
      cur = nullptr;
    } else {
      s->fprev[f]->fnext[f] = s->fnext[f];
      s->fnext[f]->fprev[f] = s->fprev[f];
      if (cur == s) cur = s->fnext[f];
    }
    s->fnext[f] = s->fprev[f] = nullptr;
  } else {
    if (s->fhead[f] == r) s->fhead[f] = r->fnext;
    r->fprev->fnext = r->fnext;
    r->fnext->fprev = r->fprev;
  }
  r->fnext = r->fprev = nullptr;
}

int PmuArbiter::Add(const pfm_pmu_req& req, uint64_t session, const char* label,
                    uint64_t now, ErrorDetail* d) {
  int err = Validate(req, d);
  if (err < 0) return err;
  if (next_id_ > 0x7fffffffu)
    return SetError(d, -ENOSPC, "request ids exhausted");

  auto r = std::make_unique<Request>();
  r->session = session;
  if (label != nullptr) snprintf(r->label, sizeof(r->label), "%s", label);
  r->pinned = (req.flags & (PFM_REQ_PINNED | PFM_REQ_NO_MULTIPLEX)) != 0;
  if (req.kind == PFM_REQ_BREAKPOINT) {
    r->cls = kBreakpoints;
    r->unit.bp = 1;
  } else {
    r->cls = kCounters;
    r->type = req.type;
    r->config = req.config;
    r->pebs = (req.flags & PFM_REQ_PEBS) != 0;
    r->fixed = static_cast<int8_t>(
        r->pebs ? -1 : FixedCounterFor(req.type, req.config));
    if (r->pebs) {
      r->unit.pebs = 1;
    } else if (r->fixed >= 0) {
      r->unit.fixed[r->fixed] = 1;
    } else {
      r->unit.generic = 1;
    }
  }
  if (r->pinned) {
    err = AdmitPinned(req, *r, d);
    if (err < 0) return err;
  }

  Context* c = GetOrCreateContext(req, now);
  r->id = next_id_++;
  r->ctx = c;
  r->enabled_base = CtxNow(*c, now);
  Request* rp = r.get();
  requests_[rp->id] = std::move(r);
  ++c->nreq;
  if (rp->pinned) {
    c->pinned[rp->cls].push_back(rp);
    c->pinned_demand.Add(rp->unit, +1);
  } else {
    Pool& p = c->pools[rp->cls];
    auto& slot = p.sessions[session];
    if (!slot) {
      slot = std::make_unique<SessionQueue>();
      slot->session = session;
      SessionQueue* s = slot.get();
      if (p.cursor == nullptr) {
        s->next = s->prev = s;
        p.cursor = s;
      } else {  // last in the ring: a new session waits its turn
        s->next = p.cursor;
        s->prev = p.cursor->prev;
        s->prev->next = s;
        p.cursor->prev = s;
      }
    }
    SessionQueue* s = slot.get();
    rp->sq = s;
    if (s->start == nullptr) {
      rp->next = rp->prev = rp;
      s->start = rp;
    } else {  // last in the session's rotation order
      rp->next = s->start;
      rp->prev = s->start->prev;
      rp->prev->next = rp;
      s->start->prev = rp;
    }
    ++s->count;
    ++p.total;
    if (rp->pebs) ++p.pebs_total;
    if (rp->fixed >= 0) LinkFixed(p, s, rp);
    p.deal_valid = false;
  }
  MarkDirty(c);
  return static_cast<int>(rp->id);
}

void PmuArbiter::Remove(RequestId id, uint64_t now) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request* r = it->second.get();
  Context* c = r->ctx;
  if (r->on_cpu >= 0) TakeOff(r, now);
  MarkDirty(c);
  if (r->pinned) {
    auto& v = c->pinned[r->cls];
    v.erase(std::find(v.begin(), v.end(), r));
    c->pinned_demand.Add(r->unit, -1);
  } else {
    Pool& p = c->pools[r->cls];
    SessionQueue* s = r->sq;
    if (r->fixed >= 0) UnlinkFixed(p, s, r);
    if (r->pebs) --p.pebs_total;
    if (s->count == 1) {
      if (s->next == s) {
        p.cursor = nullptr;
      } else {
        s->prev->next = s->next;
        s->next->prev = s->prev;
        if (p.cursor == s) p.cursor = s->next;
      }
      p.sessions.erase(s->session);
    } else {
      if (s->start == r) s->start = r->next;
      r->prev->next = r->next;
      r->next->prev = r->prev;
      --s->count;
    }
    --p.total;
    p.deal_valid = false;
  }
  requests_.erase(it);
  --c->nreq;
  MaybeDeleteContext(c);
}

void PmuArbiter::RemoveSession(uint64_t session, uint64_t now) {
  std::vector<RequestId> ids;
  for (const auto& [id, r] : requests_)
    if (r->session == session) ids.push_back(id);
  for (RequestId id : ids) Remove(id, now);
}

void PmuArbiter::PutOn(Cpu& cpu, int cpu_index, Request* r, int slot,
                       uint64_t now) {
  assert(r->on_cpu < 0);
  ++work_units_;
  if (r->cls == kBreakpoints) {
    assert(cpu.dr[slot] == nullptr);
    cpu.dr[slot] = r;
    cpu.dr_free &= ~(1u << slot);
  } else if (slot >= kFixedCounterBase) {
    const int f = slot - kFixedCounterBase;
    assert(cpu.fixed[f] == nullptr);
    cpu.fixed[f] = r;
    cpu.fixed_free &= ~(1u << f);
  } else {
    assert(cpu.gp[slot] == nullptr);
    cpu.gp[slot] = r;
    cpu.gp_free &= ~(1u << slot);
  }
  r->on_cpu = cpu_index;
  r->slot = static_cast<int8_t>(slot);
  r->on_since = now;
}

void PmuArbiter::TakeOff(Request* r, uint64_t now) {
  assert(r->on_cpu >= 0);
  ++work_units_;
  Cpu& cpu = *cpu_[r->on_cpu];
  const int slot = r->slot;
  if (r->cls == kBreakpoints) {
    cpu.dr[slot] = nullptr;
    cpu.dr_free |= 1u << slot;
  } else if (slot >= kFixedCounterBase) {
    const int f = slot - kFixedCounterBase;
    cpu.fixed[f] = nullptr;
    cpu.fixed_free |= 1u << f;
  } else {
    cpu.gp[slot] = nullptr;
    cpu.gp_free |= 1u << slot;
  }
  r->running += SatSub(now, r->on_since);
  r->on_cpu = -1;
  r->slot = -1;
}

// Fixed counter if eligible and free; PEBS events on PEBS counters; others
// on GP counters without PEBS first, so PEBS counters stay for PEBS events.
int PmuArbiter::FindFreeCounter(const Cpu& cpu, const Request& r) const {
  if (r.fixed >= 0 && (cpu.fixed_free & (1u << r.fixed)))
    return kFixedCounterBase + r.fixed;
  uint32_t m = cpu.gp_free & pebs_mask_;
  if (!r.pebs) {
    const uint32_t plain = cpu.gp_free & ~pebs_mask_;
    if (plain != 0) m = plain;
  }
  return m != 0 ? __builtin_ctz(m) : -1;
}

int PmuArbiter::FindFreeDr(const Cpu& cpu) const {
  return cpu.dr_free != 0 ? __builtin_ctz(cpu.dr_free) : -1;
}

void PmuArbiter::InstallPinned(int cpu_index, uint64_t now) {
  Cpu& cpu = *cpu_[cpu_index];
  Context* ctxs[2] = {cpu_ctx_[cpu_index].get(), cpu.task};
  // Three passes make greedy placement optimal (see AdmitPinned): fixed
  // counters first, then PEBS, then everything else.
  for (int pass = 0; pass < 3; ++pass) {
    for (Context* c : ctxs) {
      if (c == nullptr) continue;
      for (Request* r : c->pinned[kCounters]) {
        ++work_units_;
        if (r->on_cpu >= 0) continue;
        if (pass == 0 &&
            !(r->fixed >= 0 && (cpu.fixed_free & (1u << r->fixed))))
          continue;
        if (pass == 1 && !r->pebs) continue;
        const int slot = FindFreeCounter(cpu, *r);
        assert(slot >= 0 && "admission guarantees pinned counters fit");
        if (slot >= 0) PutOn(cpu, cpu_index, r, slot, now);
      }
    }
  }
  for (Context* c : ctxs) {
    if (c == nullptr) continue;
    for (Request* r : c->pinned[kBreakpoints]) {
      ++work_units_;
      const int slot = FindFreeDr(cpu);
      assert(slot >= 0 && "admission guarantees pinned breakpoints fit");
      if (slot >= 0) PutOn(cpu, cpu_index, r, slot, now);
    }
  }
}

// The next flexible request of a deal: from the session at the walk
// position, that session's next request. Sessions whose requests were all
// visited in this deal are unlinked for the rest of it (dancing links,
// restored in reverse order by DealClass), so every step yields a request
// and the work is bounded by what gets placed, not by what waits.
PmuArbiter::Request* PmuArbiter::NextCandidate(Pool& p) {
  if (p.visited >= p.total || p.walk == nullptr) return nullptr;
  if (p.spliced.size() == p.spliced.capacity()) return nullptr;  // budget
  ++work_units_;
  SessionQueue* s = p.walk;
  if (s->stamp != p.stamp) {
    s->stamp = p.stamp;
    s->pos = s->start;
    s->visited = 0;
  }
  Request* r = s->pos;
  s->pos = r->next;
  ++s->visited;
  ++p.visited;
  if (r->pebs) ++p.pebs_visited;
  p.walk = s->next;
  if (s->visited == s->count && p.visited < p.total) {
    s->prev->next = s->next;
    s->next->prev = s->prev;
    p.spliced.push_back(s);
  }
  return r;
}

void PmuArbiter::Place(Cpu& cpu, int cpu_index, Pool& p, Request* r,
                       int slot, uint64_t now) {
  PutOn(cpu, cpu_index, r, slot, now);
  r->placed_stamp = p.stamp;
  p.placed.push_back(r);
}

/*
 * Flexible dealing for one class on one CPU. Free slots go one at a time,
 * alternating between the CPU context and the task context (CPU first), and
 * inside each context round-robin over its sessions, each session giving its
 * next request in rotation order. A session gets at most as many slots as it
 * has requests, so what a small session does not need goes to the others:
 * max-min fair between sessions.
 *
 * Counters are dealt in two steps, so that no step probes a request that
 * cannot fit:
 *  1. While a GP counter is free, every request but PEBS fits one, so the
 *     round-robin above runs as is (a fixed-eligible request takes its fixed
 *     counter if free). A PEBS request while the PEBS counters are taken is
 *     skipped and keeps its place (at most 2*slots+2 skips per deal), and a
 *     context whose unvisited requests are all PEBS stops there (counts).
 *  2. Once the GP counters are full, only fixed counter i's own events fit
 *     fixed counter i. If it is still free, none of them was visited in
 *     step 1 (the first would have taken it), so it goes straight to the
 *     first such request of the next session in the context's ring for
 *     fixed counter i; contexts keep alternating. Nothing is visited for a
 *     fixed counter no waiting request can use.
 * Work: one step per slot filled, plus PEBS skips; never per waiting request.
 */
void PmuArbiter::DealClass(int cpu_index, int cls, uint64_t now) {
  Cpu& cpu = *cpu_[cpu_index];
  Context* ctxs[2] = {cpu_ctx_[cpu_index].get(), cpu.task};
  Pool* pools[2] = {};
  for (int i = 0; i < 2; ++i) {
    if (ctxs[i] == nullptr || ctxs[i]->pools[cls].total == 0) continue;
    Pool& p = ctxs[i]->pools[cls];
    pools[i] = &p;
    p.stamp = ++deal_stamp_;
    p.deal_valid = true;
    p.visited = 0;
    p.pebs_visited = 0;
    p.walk = p.cursor;
    p.last_served = nullptr;
    for (SessionQueue*& s : p.fixed_served) s = nullptr;
    p.placed.clear();
    p.spliced.clear();
  }
  if (pools[0] == nullptr && pools[1] == nullptr) return;
  const bool counters = cls == kCounters;
  const int slots = counters ? n_gp_ + n_fixed_ : n_dr_;
  int unfit_budget = 2 * slots + 2;
  int turn = 0;  // the context whose turn is next
  // Step 1: the round-robin, while a GP counter (debug register) is free.
  auto general_slot_free = [&]() {
    return counters ? cpu.gp_free != 0 : cpu.dr_free != 0;
  };
  while (general_slot_free() && unfit_budget > 0) {
    bool any = false;
    for (int i = 0; i < 2 && general_slot_free(); ++i) {
      Pool* p = pools[i];
      if (p == nullptr) continue;
      // Only PEBS requests left and no PEBS counter free: none can fit.
      if (counters && (cpu.gp_free & pebs_mask_) == 0 &&
          p->visited - p->pebs_visited == p->total - p->pebs_total)
        continue;
      Request* r = NextCandidate(*p);
      if (r == nullptr) continue;
      any = true;
      const int slot = counters ? FindFreeCounter(cpu, *r) : FindFreeDr(cpu);
      if (slot < 0) {
        --unfit_budget;
        continue;
      }
      Place(cpu, cpu_index, *p, r, slot, now);
      p->last_served = r->sq;
      turn = 1 - i;
    }
    if (!any) break;
  }
  for (int i = 0; i < 2; ++i) {
    Pool* p = pools[i];
    if (p == nullptr) continue;
    for (auto it = p->spliced.rbegin(); it != p->spliced.rend(); ++it) {
      (*it)->prev->next = *it;
      (*it)->next->prev = *it;
    }
    p->spliced.clear();
  }
  // Step 2: fixed counters still free once the GP counters are full.
  if (counters && cpu.gp_free == 0) {
    for (uint32_t m = cpu.fixed_free; m != 0; m &= m - 1) {
      const int f = __builtin_ctz(m);
      for (int k = 0; k < 2; ++k) {
        const int i = (turn + k) % 2;
        Pool* p = pools[i];
        if (p == nullptr || p->fcursor[f] == nullptr) continue;
        ++work_units_;
        SessionQueue* s = p->fcursor[f];
        Request* r = s->fhead[f];
        assert(r->on_cpu < 0 && "fixed counter free: none of its events placed");
        if (r->on_cpu >= 0) continue;
        Place(cpu, cpu_index, *p, r, kFixedCounterBase + f, now);
        p->fixed_served[f] = s;
        turn = 1 - i;
        break;
      }
    }
  }
  for (Pool* p : pools)
    if (p != nullptr)
      p->left_waiting = static_cast<int>(p->placed.size()) < p->total;
}

// Starts the next round after the last deal. In each session, the requests
// that were placed move to the back of its rotation order (those already at
// its front stay in their order, the others follow in the order they were
// placed); the ones left waiting keep their order at the front: those
// visited but not placed (no free counter fit them, e.g. PEBS while the PEBS
// counters were taken), then those not visited. So every request waits at
// most as many rounds as there are requests ahead of it. The session ring
// starts after the last session served in step 1 of the deal, and each fixed
// counter's ring after the session that got that fixed counter in step 2,
// so sessions take turns for any odd leftover slot.
// Work: one step per request placed by the deal (walked past at the front,
// or moved).
void PmuArbiter::Rotate(Pool& p) {
  if (!p.deal_valid || !p.left_waiting || p.placed.empty()) return;
  // Marks the sessions whose new start is settled (the deal's per-session
  // state is not needed any more: the next deal starts afresh).
  const uint64_t settled = ++deal_stamp_;
  for (Request* r : p.placed) {
    SessionQueue* s = r->sq;
    if (s->stamp != settled) {
      s->stamp = settled;
      // The new start: the first request not placed. Those placed before it
      // are at the back once the start moves past them.
      Request* q = s->start;
      for (int k = 0; k < s->count && q->placed_stamp == p.stamp; ++k) {
        ++work_units_;
        q->placed_stamp = 0;
        q = q->next;
      }
      s->start = q;  // all placed: back at start, no change
    }
    // The placed ones of a fixed counter's ring are its first ones, met
    // here in ring order (see DealClass): the ring follows the rotation.
    if (r->fixed >= 0) {
      assert(s->fhead[r->fixed] == r);
      s->fhead[r->fixed] = r->fnext;
    }
    if (r->placed_stamp != p.stamp) continue;  // already at the back
    ++work_units_;
    r->placed_stamp = 0;
    r->prev->next = r->next;
    r->next->prev = r->prev;
    r->next = s->start;
    r->prev = s->start->prev;
    r->prev->next = r;
    s->start->prev = r;
  }
  if (p.last_served != nullptr) p.cursor = p.last_served->next;
  for (int f = 0; f < kFixedEligible; ++f)
    if (p.fixed_served[f] != nullptr)
      p.fcursor[f] = p.fixed_served[f]->fnext[f];
  p.deal_valid = false;
}

// Rotates the flexible requests of `c` if it is oversubscribed and a mux
// interval of its own clock has passed since its last rotation. Returns
// whether it rotated (the CPU must then be re-dealt).
bool PmuArbiter::MaybeRotate(Context* c, uint64_t now) {
  if (c == nullptr) return false;
  const uint64_t t = CtxNow(*c, now);
  bool waiting = false;
  for (Pool& p : c->pools) waiting |= p.total > 0 && p.left_waiting;
  if (!waiting) {
    c->rotated_at = t;  // the interval starts when requests start waiting
    return false;
  }
  if (SatSub(t, c->rotated_at) < mux_interval_ns_) return false;
  bool rotated = false;
  for (Pool& p : c->pools) {
    if (!p.deal_valid) continue;  // re-dealt first; rotates at the next check
    rotated |= p.left_waiting && !p.placed.empty();
    Rotate(p);
  }
  if (rotated) c->rotated_at = t;
  return rotated;
}

void PmuArbiter::Rebuild(int cpu_index, uint64_t now) {
  Cpu& cpu = *cpu_[cpu_index];
  for (int i = 0; i < n_gp_; ++i)
    if (cpu.gp[i] != nullptr) TakeOff(cpu.gp[i], now);
  for (int i = 0; i < n_fixed_; ++i)
    if (cpu.fixed[i] != nullptr) TakeOff(cpu.fixed[i], now);
  for (int i = 0; i < n_dr_; ++i)
    if (cpu.dr[i] != nullptr) TakeOff(cpu.dr[i], now);
  InstallPinned(cpu_index, now);
  DealClass(cpu_index, kCounters, now);
  DealClass(cpu_index, kBreakpoints, now);
  cpu.dirty = false;
}

void PmuArbiter::SwitchOut(int cpu_index, uint64_t now) {
  if (cpu_index < 0 || cpu_index >= cpus_) return;
  Cpu& cpu = *cpu_[cpu_index];
  Context* t = cpu.task;
  cpu.pid = 0;
  if (t == nullptr) return;
  for (int i = 0; i < n_gp_; ++i)
    if (cpu.gp[i] != nullptr && cpu.gp[i]->ctx == t) TakeOff(cpu.gp[i], now);
  for (int i = 0; i < n_fixed_; ++i)
    if (cpu.fixed[i] != nullptr && cpu.fixed[i]->ctx == t)
      TakeOff(cpu.fixed[i], now);
  for (int i = 0; i < n_dr_; ++i)
    if (cpu.dr[i] != nullptr && cpu.dr[i]->ctx == t) TakeOff(cpu.dr[i], now);
  if (t->active) {
    t->clock += SatSub(now, t->active_since);
    t->active = false;
  }
  t->on_cpu = -1;
  cpu.task = nullptr;
  // Another thread of the same process may be running elsewhere, uncounted
  // because the context was here: the context follows it at once. Only
  // scanned when that happened, so the common switch stays O(slots).
  if (!t->shared) return;
  t->shared = false;
  for (int i = 0; i < cpus_; ++i) {
    Cpu& other = *cpu_[i];
    if (i == cpu_index || other.pid != t->pid || other.task != nullptr)
      continue;
    other.task = t;
    t->on_cpu = i;
    t->active = true;
    t->active_since = now;
    Rebuild(i, now);
    break;
  }
}

void PmuArbiter::SwitchIn(int cpu_index, TaskId task, uint64_t now) {
  if (cpu_index < 0 || cpu_index >= cpus_) return;
  Cpu& cpu = *cpu_[cpu_index];
  if (cpu.task != nullptr || cpu.pid != 0) SwitchOut(cpu_index, now);
  cpu.pid = task.pid;
  if (task.pid > 0) {
    auto it = tasks_.find(task.pid);
    if (it != tasks_.end() && it->second->on_cpu >= 0) {
      it->second->shared = true;  // runs elsewhere too; see SwitchOut
    } else if (it != tasks_.end()) {
      Context* t = it->second.get();
      t->on_cpu = cpu_index;
      t->active = true;
      t->active_since = now;
      cpu.task = t;
    }
  }
  // Resumes the round each context had on hardware when it was last
  // switched out (dealing from unchanged cursors), or the next one if its
  // clock passed a mux interval since its last rotation.
  MaybeRotate(cpu_ctx_[cpu_index].get(), now);
  MaybeRotate(cpu.task, now);
  Rebuild(cpu_index, now);
}

void PmuArbiter::Tick(int cpu_index, uint64_t now) {
  if (cpu_index < 0 || cpu_index >= cpus_) return;
  Cpu& cpu = *cpu_[cpu_index];
  // An Add/Remove since the last deal: refill first, so rotation continues
  // from the round actually on hardware.
  if (cpu.dirty) Rebuild(cpu_index, now);
  bool rotated = MaybeRotate(cpu_ctx_[cpu_index].get(), now);
  rotated |= MaybeRotate(cpu.task, now);
  if (rotated) Rebuild(cpu_index, now);
}

int PmuArbiter::Scheduled(int cpu_index, ScheduledCounter* out, int max) const {
  if (cpu_index < 0 || cpu_index >= cpus_ || max < 0) return -EINVAL;
  const Cpu& cpu = *cpu_[cpu_index];
  int n = 0;
  auto emit = [&](const Request* r, int counter) {
    if (r == nullptr || n >= max) return;
    out[n++] = ScheduledCounter{r->id, counter, r->type, r->config};
  };
  for (int i = 0; i < n_fixed_; ++i) emit(cpu.fixed[i], kFixedCounterBase + i);
  for (int i = 0; i < n_gp_; ++i) emit(cpu.gp[i], i);
  return n;
}

int PmuArbiter::ScheduledBreakpoints(int cpu_index,
                                     RequestId* out_by_slot) const {
  if (cpu_index < 0 || cpu_index >= cpus_) return -EINVAL;
  const Cpu& cpu = *cpu_[cpu_index];
  int n = 0;
  for (int i = 0; i < n_dr_; ++i) {
    out_by_slot[i] = cpu.dr[i] != nullptr ? cpu.dr[i]->id : 0;
    if (cpu.dr[i] != nullptr) ++n;
  }
  return n;
}

RequestId PmuArbiter::OnCounter(int cpu_index, int counter) const {
  if (cpu_index < 0 || cpu_index >= cpus_) return 0;
  const Cpu& cpu = *cpu_[cpu_index];
  const Request* r = nullptr;
  if (counter >= 0 && counter < n_gp_) {
    r = cpu.gp[counter];
  } else if (counter >= kFixedCounterBase &&
             counter < kFixedCounterBase + n_fixed_) {
    r = cpu.fixed[counter - kFixedCounterBase];
  }
  return r != nullptr ? r->id : 0;
}

void PmuArbiter::AddCount(RequestId id, uint64_t delta) {
  auto it = requests_.find(id);
  if (it != requests_.end()) it->second->value += delta;
}

int PmuArbiter::Read(RequestId id, uint64_t now, Reading* out) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return -ENOENT;
  const Request& r = *it->second;
  Reading x;
  x.value = r.value;
  x.time_enabled = SatSub(CtxNow(*r.ctx, now), r.enabled_base);
  x.time_running = r.running + (r.on_cpu >= 0 ? SatSub(now, r.on_since) : 0);
  // Running time is only ever spent while the context is active, so it
  // can't exceed enabled time except through clock skew between CPUs.
  x.time_running = std::min(x.time_running, x.time_enabled);
  x.counted = x.time_running > 0;
  if (x.counted) {
    x.ratio = static_cast<double>(x.time_running) /
              static_cast<double>(x.time_enabled);
    x.scaled = static_cast<double>(x.value) / x.ratio;
  }
  *out = x;
  return 0;
}

void PmuArbiter::Describe(uint64_t now, std::vector<Holder>* out) const {
  out->clear();
  out->reserve(requests_.size());
  for (const auto& [id, rp] : requests_) {
    const Request& r = *rp;
    Holder h{};
    h.cpu = r.ctx->is_cpu ? r.ctx->cpu : -1;
    h.pid = r.ctx->is_cpu ? -1 : r.ctx->pid;
    h.breakpoint = r.cls == kBreakpoints;
    if (r.on_cpu < 0) {
      snprintf(h.slot, sizeof(h.slot), "-");
    } else if (h.breakpoint) {
      snprintf(h.slot, sizeof(h.slot), "dr%u",
               static_cast<unsigned>(r.slot) & 31u);
    } else if (r.slot >= kFixedCounterBase) {
      snprintf(h.slot, sizeof(h.slot), "fixed%u",
               static_cast<unsigned>(r.slot - kFixedCounterBase) & 31u);
    } else {
      snprintf(h.slot, sizeof(h.slot), "gp%u",
               static_cast<unsigned>(r.slot) & 31u);
    }
    h.on_cpu = r.on_cpu;
    h.id = r.id;
    h.session = r.session;
    memcpy(h.label, r.label, sizeof(h.label));
    h.pinned = r.pinned;
    h.on_hw = r.on_cpu >= 0;
    Reading x;
    Read(r.id, now, &x);
    h.ratio = x.counted ? x.ratio : -1.0;
    out->push_back(h);
  }
  std::sort(out->begin(), out->end(),
            [](const Holder& a, const Holder& b) { return a.id < b.id; });
}

}  // namespace pfm
