// The DS resource allocator: owns every context's BTS/PEBS configuration and
// fans one hardware stream out to many consumers (DESIGN §3).
//
// Contexts
//   - a task context (pid) owns its own DS buffers (a DsArea), installed on
//     the CPU the task runs on, as Linux's old ds.c did: per-task buffers, so
//     records are attributed to the task exactly and a held task's records
//     never mix with the next task's;
//   - a CPU context (the catch-all) owns a DsArea per CPU, installed while an
//     untraced task runs there. Its consumers also see the records of traced
//     tasks running on that CPU (copied from the task's area at drain).
//   The hardware configuration of a task is the union of what its consumers
//   and the CPU's catch-all consumers need (TraceConfig): user-only plus
//   kernel+user traces both, and each consumer filters by the privilege of
//   the branch's `from`.
//
// Consumers
//   Each has its own Ring (kernel/ds/ring.h): size, mode (history /
//   lossless, optionally block), format (fixed / compact), filter, and which
//   record kinds it wants (BTS, PEBS of one arbiter request, switches).
//
// Drain (threshold interrupt, context switch, exit, or on demand)
//   BTS records carry no time in hardware: a drain stamps them with times
//   interpolated evenly between the previous drain of that area and now
//   (resolution = drain interval). PEBS records carry their TSC. BTS and
//   PEBS are merged by time, translated once to pfm_record (cpu, pid, tid of
//   the context's task) and copied to every consumer whose filter accepts
//   them. The drain allocates nothing. Compact consumers that take a whole
//   batch get it encoded once and copy the bytes (kernel/uapi/ring_format.h,
//   CompactBatch; docs/rings.md).
//
// Block mode
//   A lossless `block` consumer never loses: Held(task) turns true while its
//   ring has less free space than one full drain can write (kBlockReserve
//   records), and the driver then holds the task (the sim and ptrace drivers
//   can). A driver that writes anyway makes the consumer count losses.
//
// Not thread-safe: the caller (the Kernel facade, under pfmd's kernel lock)
// serialises every call, hooks included.
#ifndef PFM_KERNEL_DS_DS_ALLOCATOR_H_
#define PFM_KERNEL_DS_DS_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "kernel/drivers/driver.h"
#include "kernel/ds/ds_area.h"
#include "kernel/running_tasks.h"
#include "kernel/ds/ring.h"
#include "kernel/uapi/bts_translate.h"
#include "kernel/uapi/pfm_error.h"
#include "kernel/uapi/pfm_uapi.h"
#include "kernel/uapi/ring_format.h"

namespace pfm {

using ConsumerId = uint32_t;

// Who held hardware counter `counter` on `cpu` when a PEBS record was
// written (the arbiter, through the facade): PEBS routing.
class PebsRouter {
 public:
  virtual ~PebsRouter() = default;
  virtual uint32_t OwnerOf(int cpu, int counter) const = 0;
};

struct DsLimits {
  uint32_t task_bts_records = 2048;  // per task context
  uint32_t task_pebs_records = 64;
  uint32_t cpu_bts_records = 2048;   // per CPU catch-all area
  uint32_t cpu_pebs_records = 64;
  uint32_t min_bts_records = 128;    // a shrunk area never goes below
  size_t max_consumers_per_context = 64;
};

// What one consumer wants, beyond the uapi request.
struct ConsumerParams {
  pfm_consumer_req req{};
  uint64_t session = 0;          // owner, for messages and listings
  uint64_t history_records = 0;  // history mode: records a snapshot returns
  uint32_t pebs_request = 0;     // arbiter request whose PEBS samples it gets
  uint64_t pebs_period = 0;      // sample period of that request
};

struct ConsumerStats {
  uint64_t records = 0;   // records written into the ring
  uint64_t lost = 0;      // ring losses + records a blocked ring refused
  uint64_t overwritten = 0;
  uint64_t filtered = 0;  // branches its filter rejected
};

class DsAllocator {
 public:
  // Records per drain a block consumer must always have room for.
  static constexpr uint64_t kBlockReserveSlack = 16;

  // The data bytes of the ring Attach creates for `params` (history: enough
  // for history_records; lossless: ring_bytes rounded up to a power of two,
  // at least two chunks), so callers can charge it before it exists.
  static uint64_t RingDataBytes(const ConsumerParams& params);

  // Inside the Kernel: what runs where is `running` (kernel/running_tasks.h),
  // which the caller writes after Switch() and which outlives this.
  DsAllocator(const RunningTasks* running, const DsLimits& limits);
  // On its own (tests, benchmarks): a table of its own, written by Switch().
  DsAllocator(int cpus, const DsLimits& limits);
  ~DsAllocator();
  DsAllocator(const DsAllocator&) = delete;
  DsAllocator& operator=(const DsAllocator&) = delete;

  int cpus() const { return static_cast<int>(cpus_.size()); }
  const DsLimits& limits() const { return limits_; }

  // Attaches a consumer: creates its ring (sized from req.ring_bytes) and,
  // if needed, the context and its DS buffers. Returns the consumer id (> 0)
  // or -EINVAL (bad request, with the field named), -EBUSY (a request that
  // cannot be reconciled with the context's holders, naming them), -ENOMEM.
  // Nothing is left allocated on failure.
  int Attach(const ConsumerParams& params, uint64_t now, ErrorDetail* detail);
  // Detaches; drains first so the consumer's ring holds everything up to now
  // (the ring stays mapped by clients that have it). Frees the context when
  // its last consumer leaves. Safe on unknown ids and twice.
  void Detach(ConsumerId id, uint64_t now);

  Ring* ring(ConsumerId id) const;
  int Stats(ConsumerId id, ConsumerStats* out) const;
  // Bytes of the DS buffers of a context (for memory accounting): the task
  // context of `pid`, or the catch-all of `cpu` when pid < 0. 0 if none.
  uint64_t ContextBytes(int32_t pid, int cpu) const;
  // All trace memory held now: every consumer's ring (header + data) and
  // every context's DS buffers (tasks' and live catch-alls'), what memory
  // accounting must add up to (not the per-CPU areas of an idle machine).
  uint64_t HeldBytes() const;
  // The task whose context `pid`'s consumers join: the first pid of its
  // task group (a process its driver reported as a child of a traced one
  // shares its parent's context), else pid itself.
  int32_t TaskContextOf(int32_t pid) const { return RootOf(pid); }
  // The pid of the live task context consumer `id` is attached to; 0 for a
  // CPU consumer, one whose task context has exited, or no such consumer.
  int32_t LiveTaskContextOfConsumer(ConsumerId id) const;
  // Shrinks (or grows) a task context's BTS buffer to `bts_records` (never
  // below limits().min_bts_records): drains it, reallocates, and writes a
  // RESIZED record to its consumers. Returns the new size in bytes or -errno.
  int64_t ResizeTaskContext(int32_t pid, uint32_t bts_records, uint64_t now,
                            ErrorDetail* detail);

  // ---- the hardware side (called through CoreHooks) ----
  // The area a driver writes for whatever runs on `cpu` now.
  DsArea* Area(int cpu);
  // Drains the area installed on `cpu` (threshold interrupt / on demand).
  void Drain(int cpu, uint64_t now);
  // The area of `task`'s live context (task-level drivers write it, see
  // CoreHooks::TaskArea), or null. Valid until the context is resized or
  // released.
  DsArea* TaskArea(int32_t pid) const;
  // Drains `task`'s own area as having run on `cpu`, then resets it.
  void DrainTask(TaskId task, int cpu, uint64_t now);
  // Drains prev's records, emits SWITCH_OUT/IN, installs next's area. The
  // running table must still say `prev` for `cpu` (the drain's records are
  // its); the Kernel sets `next` after.
  void Switch(int cpu, uint64_t now, TaskId prev, TaskId next, bool preempt);
  // The task exited: EXIT record to its consumers (not history rings). The
  // exit of a group's last live task (or of a task never in a group) ends
  // the context: its rings end (records stay readable).
  void TaskExit(TaskId task, uint64_t now, int64_t status);
  // Task groups (CoreHooks::TaskCreated): `child` joins the group of
  // `parent`; a child process's records go to the context of the group's
  // first process (the one consumers attached to), with their own pid and
  // tid. A group's live tasks are counted from its first TaskCreated (the
  // first task counts as one).
  void TaskCreated(TaskId parent, TaskId child);
  // `task` is no longer traced (CoreHooks::TaskDetached): it leaves its
  // group without an EXIT; a group left empty is forgotten (its pids may be
  // reused).
  void TaskDetached(TaskId task);
  // The task exec'd (CoreHooks::TaskExec): an EXEC record to the consumers
  // of its context (not history rings, as EXIT), after its branches from
  // before the exec (the driver hands those over first).
  void TaskExec(TaskId task, uint64_t now);
  // The task got a fatal signal: history consumers of the task freeze (their
  // ring ends), so the snapshot shows how it got there.
  void TaskCrashed(TaskId task, uint64_t now, int signo);
  // Writes `rec` (stamped by the caller) to the consumers of `task`'s context
  // (COUNTER updates and other notices).
  void Notify(int32_t pid, const pfm_record& rec);
  // Writes `rec` to the consumers of `session` that asked for the schedule
  // (PFM_CONSUMER_SCHEDULE). O(1) when none did.
  void NotifySession(uint64_t session, const pfm_record& rec);
  TraceConfig Config(int cpu, TaskId task) const;
  bool Held(TaskId task) const;

  void set_pebs_router(const PebsRouter* r) { router_ = r; }

  // Invariant check for tests: every context's consumer list is consistent.
  bool CheckInvariant(const char** why) const;
  // Batches of BTS records the fused drain encoded straight from the DS
  // area (docs/rings.md, "The fused BTS drain"), for tests and benchmarks.
  uint64_t fused_batches() const { return fused_batches_; }

 private:
  struct Consumer;
  struct Context;
  struct CpuState;

  DsAllocator(const RunningTasks* running, const DsLimits& limits, int cpus);
  Context* TaskContext(int32_t pid) const;
  // The context of a task that still runs traced: null for pid 0 (idle or
  // untraced), no context, or one whose task exited.
  Context* LiveTaskContext(int32_t pid) const;
  void DrainArea(DsArea& area, Context* task_ctx, int cpu, TaskId task,
                 uint64_t now, uint64_t* last_drain_ns);
  void Deliver(Consumer* c, const pfm_record& rec);
  void DeliverRun(Consumer* c, const pfm_record* recs, size_t n);
  // Gives recs[0..n) to k >= 2 compact consumers that take all of them:
  // encoded once (compact_batch_), copied to each ring.
  void DeliverShared(Consumer* const* cs, size_t k, const pfm_record* recs,
                     size_t n);
  // Copies recs[0..n) (translated, normalized) to every consumer of the
  // task context and of `cpu`'s catch-all whose filter accepts them: each
  // consumer takes maximal runs of accepted records with one WriteBatch.
  // `skip`: a consumer that already has the records (the drain translated
  // them straight into its ring).
  // `user_branches`: the caller knows recs are all user-mode branches.
  void FanOut(Context* task_ctx, int cpu, const pfm_record* recs, size_t n,
              const Consumer* skip = nullptr, bool user_branches = false);
  // The consumer a drain of BTS records may translate straight into: the
  // first live user-mode BTS consumer (task context first), or null.
  Consumer* DirectConsumer(Context* task_ctx, int cpu) const;
  // The fused BTS drain (docs/rings.md): when every consumer that takes
  // any of a batch of `tid`'s user branches is a compact ring that takes all
  // of it, fills cs[0, *k) with them in FanOut's order and returns true.
  bool FusedCompactConsumers(Context* task_ctx, int cpu, uint32_t tid,
                             Consumer** cs, size_t* k) const;
  // Encodes raw[0, n) once, with their translation, for the k consumers
  // FusedCompactConsumers named and copies the bytes to each: what FanOut of
  // the translated records would have done, with the same bytes. Returns
  // false, having changed nothing (*clock included), when a record is not a
  // user branch (IsUserBranch; the encoder stops there) or some ring would
  // not take all of them now (a lossless ring not drained): then the caller
  // translates the batch and fans it out.
  bool DeliverFusedBts(Context* task_ctx, int cpu, Consumer* const* cs,
                       size_t k, const pfm_bts_raw* raw, size_t n,
                       const BtsOrigin& origin, BtsClock* clock);
  void FanOut(Context* task_ctx, int cpu, const pfm_record& rec) {
    FanOut(task_ctx, cpu, &rec, 1);
  }
  int Reconcile(const ConsumerParams& p, const Context* ctx,
                ErrorDetail* detail) const;
  void FreeContextIfEmpty(Context* ctx);

  DsLimits limits_;
  std::unique_ptr<RunningTasks> own_running_;  // only when on its own
  const RunningTasks* running_;
  const PebsRouter* router_ = nullptr;
  ConsumerId next_id_ = 1;
  std::map<ConsumerId, std::unique_ptr<Consumer>> consumers_;
  std::map<int32_t, std::unique_ptr<Context>> tasks_;  // by pid
  // Task groups: a child process's pid -> the group's first pid and that
  // process's live tasks (threads), and the live tasks of every group a
  // driver reported (by first pid). A child process leaves family_ with its
  // last task: its pid may then be reused by a process outside the group.
  struct Member {
    int32_t root = 0;
    uint32_t live = 0;
  };
  std::map<int32_t, Member> family_;
  std::map<int32_t, uint32_t> group_live_;
  int32_t RootOf(int32_t pid) const {
    auto it = family_.find(pid);
    return it == family_.end() ? pid : it->second.root;
  }
  // One task of group `root` is gone (exited or detached): its process
  // leaves family_ with its last one; the group's count is the caller's.
  void MemberGone(int32_t root, TaskId task);
  // Group `root` has no live task left: its children leave family_.
  void ForgetGroup(int32_t root);
  // Consumers that asked for their session's SCHEDULE records, by session.
  std::map<uint64_t, std::vector<Consumer*>> schedule_consumers_;
  std::vector<std::unique_ptr<CpuState>> cpus_;
  // An area no one reads, installed when nothing on a CPU is traced, so a
  // driver that writes anyway never touches freed or foreign memory.
  std::unique_ptr<DsArea> dummy_;
  // A drain translates up to kFanOutBatch records here, then fans them out:
  // small enough to stay in L1/L2 while it is copied to every consumer.
  static constexpr size_t kFanOutBatch = 512;
  std::unique_ptr<pfm_record[]> batch_;
  // Compact consumers' encodings of a batch (kFanOutBatch records): shared
  // by those taking all of it, else each consumer's own.
  std::unique_ptr<CompactBatch> compact_batch_;
  uint64_t fused_batches_ = 0;
};

}  // namespace pfm

#endif  // PFM_KERNEL_DS_DS_ALLOCATOR_H_
