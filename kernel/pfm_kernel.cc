#include "kernel/pfm_kernel.h"

#include <cassert>

namespace pfm {

Kernel::Kernel(const MachineInfo& machine, const KernelOptions& options)
    : machine_(machine),
      running_(machine.cpus),
      ds_(&running_, options.ds),
      arbiter_(machine, options.mux_interval_ns, &running_) {
  KernelLockGuard l(&lock_);
  ds_.set_pebs_router(this);
  arbiter_.set_schedule_observer(this);
}

Kernel::~Kernel() {
  KernelLockGuard l(&lock_);
  ds_.set_pebs_router(nullptr);
  arbiter_.set_schedule_observer(nullptr);
}

// ---- the owner's verbs ----

int Kernel::AttachConsumer(const ConsumerParams& params, uint64_t now,
                           ErrorDetail* d) {
  lock_.AssertHeld();
  const int id = ds_.Attach(params, now, d);
  // A schedule listener starts from what is on hardware now.
  if (id > 0 && (params.req.flags & PFM_CONSUMER_SCHEDULE))
    arbiter_.TellOnHardware(params.session, now);
  return id;
}

void Kernel::DetachConsumer(ConsumerId id, uint64_t now) {
  lock_.AssertHeld();
  ds_.Detach(id, now);
}

Ring* Kernel::ConsumerRing(ConsumerId id) const {
  lock_.AssertHeld();
  return ds_.ring(id);
}

int Kernel::ConsumerStatsOf(ConsumerId id, ConsumerStats* out) const {
  lock_.AssertHeld();
  return ds_.Stats(id, out);
}

int64_t Kernel::ResizeTaskBuffer(int32_t pid, uint32_t bts_records, uint64_t now,
                                 ErrorDetail* d) {
  lock_.AssertHeld();
  return ds_.ResizeTaskContext(pid, bts_records, now, d);
}

uint64_t Kernel::HeldBytes() const {
  lock_.AssertHeld();
  return ds_.HeldBytes();
}

void Kernel::DrainCpu(int cpu, uint64_t now) {
  lock_.AssertHeld();
  ds_.Drain(cpu, now);
}

int Kernel::AddRequest(const pfm_pmu_req& req, uint64_t session, const char* label,
                       uint64_t now, ErrorDetail* d) {
  lock_.AssertHeld();
  return arbiter_.Add(req, session, label, now, d);
}

void Kernel::RemoveRequest(RequestId id, uint64_t now) {
  lock_.AssertHeld();
  arbiter_.Remove(id, now);
}

int Kernel::ReadRequest(RequestId id, uint64_t now, PmuArbiter::Reading* out) const {
  lock_.AssertHeld();
  return arbiter_.Read(id, now, out);
}

void Kernel::DescribeHolders(uint64_t now, std::vector<PmuArbiter::Holder>* out) const {
  lock_.AssertHeld();
  arbiter_.Describe(now, out);
}

uint64_t Kernel::Rotations() const {
  lock_.AssertHeld();
  return arbiter_.rotations();
}

TaskId Kernel::Running(int cpu) const {
  lock_.AssertHeld();
  return running_.on(cpu);
}

// ---- CoreHooks ----
// Virtual overrides cannot carry the capability requirement for clang's
// analysis (callers hold the lock through the CoreHooks interface), so each
// asserts it at run time and tells the analysis so.

DsArea* Kernel::Area(int cpu) {
  lock_.AssertHeld();
  return ds_.Area(cpu);
}

void Kernel::DsInterrupt(int cpu, uint64_t now_ns) {
  lock_.AssertHeld();
  ds_.Drain(cpu, now_ns);
}

void Kernel::ContextSwitch(int cpu, uint64_t now_ns, TaskId prev, TaskId next,
                           bool preempt) {
  lock_.AssertHeld();
  assert(cpu >= 0 && cpu < running_.cpus());
  // The DS allocator drains what ran (the table still says so), the table
  // turns to `next`, the arbiter installs next's counters.
  ds_.Switch(cpu, now_ns, prev, next, preempt);  // drains with prev's counters
  running_.Set(cpu, next);
  arbiter_.SwitchOut(cpu, now_ns);
  arbiter_.SwitchIn(cpu, next, now_ns);
}

void Kernel::TaskExit(TaskId task, uint64_t now_ns, int64_t status) {
  lock_.AssertHeld();
  ds_.TaskExit(task, now_ns, status);
}

TraceConfig Kernel::TaskConfig(int cpu, TaskId task) {
  lock_.AssertHeld();
  return ds_.Config(cpu, task);
}

void Kernel::TaskCreated(TaskId parent, TaskId child, uint64_t) {
  lock_.AssertHeld();
  ds_.TaskCreated(parent, child);
}

void Kernel::TaskExec(TaskId task, uint64_t now_ns) {
  lock_.AssertHeld();
  ds_.TaskExec(task, now_ns);
}

void Kernel::TaskDetached(TaskId task, uint64_t) {
  lock_.AssertHeld();
  ds_.TaskDetached(task);
}

bool Kernel::TaskHeld(TaskId task) {
  lock_.AssertHeld();
  return ds_.Held(task);
}

int Kernel::ScheduledCounters(int cpu, ScheduledCounter* out, int max) {
  lock_.AssertHeld();
  return arbiter_.Scheduled(cpu, out, max);
}

void Kernel::AddCount(uint32_t request, uint64_t delta) {
  lock_.AssertHeld();
  arbiter_.AddCount(request, delta);
}

void Kernel::Tick(int cpu, uint64_t now_ns) {
  lock_.AssertHeld();
  // A rotation may give a PEBS counter to another event: samples already in
  // the buffer belong to the one that held it.
  if (ds_.Area(cpu)->pebs_count() != 0) ds_.Drain(cpu, now_ns);
  arbiter_.Tick(cpu, now_ns);
}

DsArea* Kernel::TaskArea(TaskId task) {
  lock_.AssertHeld();
  return ds_.TaskArea(task.pid);
}

void Kernel::TaskDsInterrupt(TaskId task, int cpu, uint64_t now_ns) {
  lock_.AssertHeld();
  ds_.DrainTask(task, cpu, now_ns);
}

void Kernel::TaskSignaled(TaskId task, uint64_t now_ns, int signo) {
  lock_.AssertHeld();
  ds_.TaskCrashed(task, now_ns, signo);
}

// Called back by the DS allocator from inside a drain, i.e. with the lock
// held by whoever started the drain.
void Kernel::OnSchedule(const ScheduleChange& change) {
  lock_.AssertHeld();
  pfm_record rec{};
  rec.type = PFM_REC_SCHEDULE;
  rec.cpu = static_cast<uint16_t>(change.cpu);
  rec.misc = change.on ? PFM_MISC_SCHED_ON : 0;
  rec.time = change.now;
  rec.pid = static_cast<uint32_t>(change.pid);
  rec.tid = static_cast<uint32_t>(change.pid);
  rec.u.sched.request = change.request;
  rec.u.sched.slot = static_cast<uint32_t>(change.slot);
  ds_.NotifySession(change.session, rec);
}

uint32_t Kernel::OwnerOf(int cpu, int counter) const {
  lock_.AssertHeld();
  return arbiter_.OnCounter(cpu, counter);
}

}  // namespace pfm
