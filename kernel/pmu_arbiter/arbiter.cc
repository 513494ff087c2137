#include "kernel/pmu_arbiter/arbiter.h"

#include "kernel/uapi/counter_scale.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "kernel/pmu_arbiter/admission.h"
#include "kernel/pmu_arbiter/context.h"
#include "kernel/pmu_arbiter/cpu_slots.h"
#include "kernel/pmu_arbiter/flexible_pool.h"

namespace pfm {

using arbiter_internal::Admission;
using arbiter_internal::ContextTable;
using arbiter_internal::CpuSlots;
using arbiter_internal::FlexiblePool;
using arbiter_internal::PmuShape;
using arbiter_internal::ResourceClass;
using arbiter_internal::SatSub;

static_assert(sizeof(arbiter_internal::Request::label) ==
              PmuArbiter::kLabelBytes);

struct PmuArbiter::Cpu {
  Cpu(int index, const PmuShape& shape, uint64_t* work_units)
      : slots(index, shape, work_units) {}

  CpuSlots slots;
  Context* task = nullptr;  // the running task's context, installed here
  bool dirty = false;       // contexts changed: refill at next Tick
};

PmuArbiter::PmuArbiter(const MachineInfo& m, uint64_t mux_interval_ns)
    : PmuArbiter(m, mux_interval_ns, nullptr) {}

PmuArbiter::PmuArbiter(const MachineInfo& m, uint64_t mux_interval_ns,
                       const RunningTasks* running)
    : own_running_(running == nullptr ? std::make_unique<RunningTasks>(m.cpus)
                                      : nullptr),
      running_(running == nullptr ? own_running_.get() : running),
      shape_(PmuShape::From(m)),
      mux_interval_ns_(mux_interval_ns),
      admission_(std::make_unique<Admission>(shape_)),
      contexts_(std::make_unique<ContextTable>()) {
  assert(m.cpus > 0 && running_->cpus() == m.cpus);
  assert(mux_interval_ns > 0);
  contexts_->cpu.resize(shape_.cpus);
  for (int i = 0; i < shape_.cpus; ++i)
    cpu_.push_back(std::make_unique<Cpu>(i, shape_, &work_units_));
}

PmuArbiter::~PmuArbiter() = default;

void PmuArbiter::set_schedule_observer(ScheduleObserver* o) {
  schedule_observer_ = o;
  for (auto& cpu : cpu_) cpu->slots.set_observer(o);
}

void PmuArbiter::TellOnHardware(uint64_t session, uint64_t now) const {
  if (schedule_observer_ == nullptr) return;
  for (const auto& cpu : cpu_) {
    const arbiter_internal::CpuSlots& s = cpu->slots;
    auto tell = [&](const Request* r) {
      if (r == nullptr || r->session != session) return;
      ScheduleChange c;
      c.cpu = s.cpu();
      c.request = r->id;
      c.session = r->session;
      c.pid = r->pid;
      c.slot = r->slot;
      c.on = true;
      c.now = now;
      schedule_observer_->OnSchedule(c);
    };
    for (int i = 0; i < shape_.gp_counters; ++i) tell(s.gp(i));
    for (int i = 0; i < shape_.fixed_counters; ++i) tell(s.fixed(i));
    for (int i = 0; i < shape_.debug_registers; ++i) tell(s.debug_register(i));
  }
}

// ---------------------------------------------------------------------------
// Contexts

PmuArbiter::Context* PmuArbiter::GetOrCreateContext(const pfm_pmu_req& req,
                                                    uint64_t now) {
  Context* c = contexts_->Find(req);
  if (c != nullptr) return c;
  auto ctx = std::make_unique<Context>();
  c = ctx.get();
  if (req.ctx_kind == PFM_CTX_CPU) {
    c->is_cpu = true;
    c->cpu = req.cpu;
    c->active = true;
    c->active_since = now;
    contexts_->cpu[req.cpu] = std::move(ctx);
  } else {
    c->pid = req.pid;
    contexts_->task[req.pid] = std::move(ctx);
    // The task may be running already: its clock starts now.
    for (int i = 0; i < shape_.cpus; ++i) {
      Cpu& cpu = *cpu_[i];
      if (running_->on(i).pid != req.pid || cpu.task != nullptr) continue;
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
  if (c->requests > 0) return;
  if (c->is_cpu) {
    contexts_->cpu[c->cpu].reset();
    return;
  }
  if (c->on_cpu >= 0) cpu_[c->on_cpu]->task = nullptr;
  contexts_->task.erase(c->pid);
}

void PmuArbiter::MarkDirty(const Context* c) {
  if (c->is_cpu) {
    cpu_[c->cpu]->dirty = true;
  } else if (c->on_cpu >= 0) {
    cpu_[c->on_cpu]->dirty = true;
  }
}

// ---------------------------------------------------------------------------
// Requests (control path)

int PmuArbiter::Add(const pfm_pmu_req& req, uint64_t session, const char* label,
                    uint64_t now, ErrorDetail* d) {
  int err = admission_->Validate(req, d);
  if (err < 0) return err;
  if (next_id_ > 0x7fffffffu)
    return SetError(d, -ENOSPC, "request ids exhausted");

  auto r = std::make_unique<Request>();
  r->session = session;
  r->pid = req.ctx_kind == PFM_CTX_TASK ? req.pid : 0;
  if (label != nullptr) snprintf(r->label, sizeof(r->label), "%s", label);
  admission_->Classify(req, r.get());
  if (r->pinned) {
    err = admission_->AdmitPinned(req, *r, *contexts_, d);
    if (err < 0) return err;
  }

  Context* c = GetOrCreateContext(req, now);
  r->id = next_id_++;
  r->context = c;
  r->enabled_base = c->Now(now);
  Request* rp = r.get();
  requests_[rp->id] = std::move(r);
  ++c->requests;
  if (rp->pinned) {
    c->pinned.Add(rp);
  } else {
    c->flexible.pools[rp->resource].Add(rp);
  }
  MarkDirty(c);
  return static_cast<int>(rp->id);
}

void PmuArbiter::Remove(RequestId id, uint64_t now) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request* r = it->second.get();
  Context* c = r->context;
  if (r->on_cpu >= 0) cpu_[r->on_cpu]->slots.Take(r, now);
  MarkDirty(c);
  if (r->pinned) {
    c->pinned.Remove(r);
  } else {
    c->flexible.pools[r->resource].Remove(r);
  }
  requests_.erase(it);
  --c->requests;
  MaybeDeleteContext(c);
}

void PmuArbiter::RemoveSession(uint64_t session, uint64_t now) {
  std::vector<RequestId> ids;
  for (const auto& [id, r] : requests_)
    if (r->session == session) ids.push_back(id);
  for (RequestId id : ids) Remove(id, now);
}

// ---------------------------------------------------------------------------
// Scheduling, per CPU: O(slots), no allocation

// Refills the slots of a CPU: the pinned requests of its CPU context and
// running task's context, then the flexible ones dealt into what is left.
void PmuArbiter::Rebuild(int cpu_index, uint64_t now) {
  Cpu& cpu = *cpu_[cpu_index];
  cpu.slots.TakeAll(now);
  Context* cpu_context = contexts_->cpu[cpu_index].get();
  Context* task = cpu.task;
  cpu.slots.InstallPinned(cpu_context ? &cpu_context->pinned : nullptr,
                          task ? &task->pinned : nullptr, now);
  for (ResourceClass rc : {ResourceClass::kCounter, ResourceClass::kBreakpoint})
    FlexiblePool::Deal(
        rc, cpu_context ? &cpu_context->flexible.pools[rc] : nullptr,
        task ? &task->flexible.pools[rc] : nullptr, cpu.slots, now,
        &work_units_);
  cpu.dirty = false;
}

// Rotation progress belongs to the context and follows its own clock (a
// task's run time, wherever it runs). Returns whether it rotated (the CPU
// must then be re-dealt).
bool PmuArbiter::MaybeRotate(Context* c, uint64_t now) {
  if (c == nullptr) return false;
  const bool rotated =
      c->flexible.RotateIfDue(c->Now(now), mux_interval_ns_, &work_units_);
  rotations_ += rotated;
  return rotated;
}

void PmuArbiter::SwitchOut(int cpu_index, uint64_t now) {
  if (cpu_index < 0 || cpu_index >= shape_.cpus) return;
  Cpu& cpu = *cpu_[cpu_index];
  Context* t = cpu.task;
  if (own_running_) own_running_->Set(cpu_index, TaskId{});
  if (t == nullptr) return;
  cpu.slots.TakeAll(now, t);
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
  for (int i = 0; i < shape_.cpus; ++i) {
    Cpu& other = *cpu_[i];
    if (i == cpu_index || running_->on(i).pid != t->pid || other.task != nullptr)
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
  if (cpu_index < 0 || cpu_index >= shape_.cpus) return;
  Cpu& cpu = *cpu_[cpu_index];
  SwitchOut(cpu_index, now);
  if (own_running_) own_running_->Set(cpu_index, task);
  if (task.pid > 0) {
    auto it = contexts_->task.find(task.pid);
    if (it != contexts_->task.end() && it->second->on_cpu >= 0) {
      it->second->shared = true;  // runs elsewhere too; see SwitchOut
    } else if (it != contexts_->task.end()) {
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
  MaybeRotate(contexts_->cpu[cpu_index].get(), now);
  MaybeRotate(cpu.task, now);
  Rebuild(cpu_index, now);
}

void PmuArbiter::Tick(int cpu_index, uint64_t now) {
  if (cpu_index < 0 || cpu_index >= shape_.cpus) return;
  Cpu& cpu = *cpu_[cpu_index];
  // An Add/Remove since the last deal: refill first, so rotation continues
  // from the round actually on hardware.
  if (cpu.dirty) Rebuild(cpu_index, now);
  bool rotated = MaybeRotate(contexts_->cpu[cpu_index].get(), now);
  rotated |= MaybeRotate(cpu.task, now);
  if (rotated) Rebuild(cpu_index, now);
}

// ---------------------------------------------------------------------------
// What is on the hardware, and readings

int PmuArbiter::Scheduled(int cpu_index, ScheduledCounter* out, int max) const {
  if (cpu_index < 0 || cpu_index >= shape_.cpus || max < 0) return -EINVAL;
  const CpuSlots& slots = cpu_[cpu_index]->slots;
  int n = 0;
  auto emit = [&](const Request* r, int counter) {
    if (r == nullptr || n >= max) return;
    out[n++] = ScheduledCounter{r->id, counter, r->type, r->config};
  };
  for (int i = 0; i < shape_.fixed_counters; ++i)
    emit(slots.fixed(i), kFixedCounterBase + i);
  for (int i = 0; i < shape_.gp_counters; ++i) emit(slots.gp(i), i);
  return n;
}

int PmuArbiter::ScheduledBreakpoints(int cpu_index,
                                     RequestId* out_by_slot) const {
  if (cpu_index < 0 || cpu_index >= shape_.cpus) return -EINVAL;
  const CpuSlots& slots = cpu_[cpu_index]->slots;
  int n = 0;
  for (int i = 0; i < shape_.debug_registers; ++i) {
    const Request* r = slots.debug_register(i);
    out_by_slot[i] = r != nullptr ? r->id : 0;
    if (r != nullptr) ++n;
  }
  return n;
}

RequestId PmuArbiter::OnCounter(int cpu_index, int counter) const {
  if (cpu_index < 0 || cpu_index >= shape_.cpus) return 0;
  const Request* r = cpu_[cpu_index]->slots.OnCounter(counter);
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
  x.time_enabled = SatSub(r.context->Now(now), r.enabled_base);
  x.time_running = r.running + (r.on_cpu >= 0 ? SatSub(now, r.on_since) : 0);
  // Running time is only ever spent while the context is active, so it
  // can't exceed enabled time except through clock skew between CPUs.
  x.time_running = std::min(x.time_running, x.time_enabled);
  const CounterScale s = ScaleCounter(x.value, x.time_enabled, x.time_running);
  x.counted = s.counted;
  x.ratio = s.ratio;
  x.scaled = s.scaled;
  *out = x;
  return 0;
}

void PmuArbiter::Describe(uint64_t now, std::vector<Holder>* out) const {
  out->clear();
  out->reserve(requests_.size());
  for (const auto& [id, rp] : requests_) {
    const Request& r = *rp;
    Holder h{};
    h.cpu = r.context->is_cpu ? r.context->cpu : -1;
    h.pid = r.context->is_cpu ? -1 : r.context->pid;
    h.breakpoint = r.resource == ResourceClass::kBreakpoint;
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
