// Over 600 lines, on purpose: drains, fan-out and context lifetime share
// the private Context/Consumer records and the translation batch, and the
// record path stays in one translation unit so the compiler inlines it
// (docs/PERFORMANCE.md, fanout).
#include "kernel/ds/ds_allocator.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "kernel/uapi/ring_format.h"

namespace pfm {
namespace {

// The worst case bytes `records` records take in a ring of either format,
// with chunk padding (a record never straddles a chunk).
uint64_t WorstCaseBytes(uint64_t records) {
  const uint64_t data = records * PFM_RECORD_FIXED_SIZE;
  return data + (data / PFM_RING_CHUNK + 1) * PFM_RECORD_FIXED_SIZE;
}

}  // namespace

struct DsAllocator::Consumer {
  ConsumerId id = 0;
  ConsumerParams p;
  std::unique_ptr<Ring> ring;
  Context* ctx = nullptr;  // task context, or null for a CPU catch-all
  int cpu = -1;            // CPU catch-all consumers
  uint64_t block_refused = 0;
  uint64_t filtered = 0;
  uint64_t reserve_bytes = 0;  // block: free space below which the task is held
  bool frozen = false;         // history frozen at a crash, or ended

  bool bts() const { return p.req.bts != PFM_BTS_OFF; }
  bool user() const { return (p.req.filter & PFM_FILTER_USER) != 0; }
  bool kernel() const { return (p.req.filter & PFM_FILTER_KERNEL) != 0; }
  bool switches() const { return (p.req.flags & PFM_CONSUMER_SWITCHES) != 0; }
  bool block() const { return (p.req.flags & PFM_CONSUMER_BLOCK) != 0; }
  // One thread's records only (pfm_consumer_req::tid).
  bool one_thread() const { return p.req.tid != 0; }
  bool takes_tid(uint32_t tid) const {
    return p.req.tid == 0 || static_cast<uint32_t>(p.req.tid) == tid;
  }
};

struct DsAllocator::Context {
  int32_t pid = 0;
  std::unique_ptr<DsArea> area;
  std::vector<Consumer*> consumers;
  uint64_t last_drain_ns = 0;
  int running_cpu = -1;
  bool exited = false;
};

struct DsAllocator::CpuState {
  // The running task (running_->on(cpu))'s context, if traced and
  // installed here.
  Context* running_ctx = nullptr;  // the running task's context, if traced
  uint64_t switch_in_ns = 0;
  std::unique_ptr<DsArea> area;    // catch-all buffers, while consumers exist
  uint64_t last_drain_ns = 0;
  std::vector<Consumer*> consumers;  // catch-all consumers
};

uint64_t DsAllocator::RingDataBytes(const ConsumerParams& params) {
  if (params.req.bts == PFM_BTS_HISTORY)
    return HistoryRingBytes(params.history_records);
  return RingDataBytesFor(params.req.ring_bytes);
}

DsAllocator::DsAllocator(int cpus, const DsLimits& limits)
    : DsAllocator(nullptr, limits, cpus) {}

DsAllocator::DsAllocator(const RunningTasks* running, const DsLimits& limits)
    : DsAllocator(running, limits, running->cpus()) {}

DsAllocator::DsAllocator(const RunningTasks* running, const DsLimits& limits,
                         int cpus)
    : limits_(limits),
      own_running_(running == nullptr ? std::make_unique<RunningTasks>(cpus)
                                      : nullptr),
      running_(running == nullptr ? own_running_.get() : running) {
  assert(cpus > 0 && running_->cpus() == cpus);
  for (int i = 0; i < cpus; ++i) {
    cpus_.push_back(std::make_unique<CpuState>());
    cpus_.back()->consumers.reserve(limits_.max_consumers_per_context);
  }
  dummy_ = std::make_unique<DsArea>(-1, 256, 256, 8, 8);
  batch_.reset(new pfm_record[kFanOutBatch]);
  compact_batch_ = std::make_unique<CompactBatch>(kFanOutBatch);
}

DsAllocator::~DsAllocator() = default;

DsAllocator::Context* DsAllocator::TaskContext(int32_t pid) const {
  auto it = tasks_.find(RootOf(pid));
  return it == tasks_.end() ? nullptr : it->second.get();
}

DsAllocator::Context* DsAllocator::LiveTaskContext(int32_t pid) const {
  Context* ctx = pid != 0 ? TaskContext(pid) : nullptr;
  return ctx != nullptr && !ctx->exited ? ctx : nullptr;
}

// A request that cannot be reconciled with a context's holders is refused
// naming them. Everything else is a union: user-only and kernel+user
// consumers share one stream, filtered per consumer.
int DsAllocator::Reconcile(const ConsumerParams& p, const Context* ctx,
                           ErrorDetail* detail) const {
  const std::vector<Consumer*>* holders =
      ctx ? &ctx->consumers
          : (p.req.ctx_kind == PFM_CTX_CPU ? &cpus_[p.req.cpu]->consumers
                                           : nullptr);
  if (holders == nullptr ||
      holders->size() < limits_.max_consumers_per_context)
    return 0;
  std::string who;
  for (size_t i = 0; i < holders->size() && i < 8; ++i) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%s%llu", i ? ", " : "",
             static_cast<unsigned long long>((*holders)[i]->p.session));
    who += buf;
  }
  if (p.req.ctx_kind == PFM_CTX_TASK)
    return SetError(detail, -EBUSY,
                    "task %d already has %zu consumers of its Debug Store "
                    "(sessions %s%s)",
                    p.req.pid, holders->size(), who.c_str(),
                    holders->size() > 8 ? ", ..." : "");
  return SetError(detail, -EBUSY,
                  "cpu %d already has %zu catch-all consumers (sessions %s%s)",
                  p.req.cpu, holders->size(), who.c_str(),
                  holders->size() > 8 ? ", ..." : "");
}

int DsAllocator::Attach(const ConsumerParams& params, uint64_t now,
                        ErrorDetail* detail) {
  const pfm_consumer_req& r = params.req;
  if (r.ctx_kind != PFM_CTX_TASK && r.ctx_kind != PFM_CTX_CPU)
    return SetError(detail, -EINVAL, "context kind %u: expected task or cpu",
                    r.ctx_kind);
  if (r.ctx_kind == PFM_CTX_TASK && r.pid <= 0)
    return SetError(detail, -EINVAL, "pid %d: expected a positive pid", r.pid);
  if (r.tid < 0 || (r.tid != 0 && r.ctx_kind != PFM_CTX_TASK))
    return SetError(detail, -EINVAL,
                    "tid %d: expected 0 (every thread) or a thread of a task "
                    "context", r.tid);
  if (r.ctx_kind == PFM_CTX_CPU && (r.cpu < 0 || r.cpu >= cpus()))
    return SetError(detail, -EINVAL, "cpu %d: this machine has cpus 0..%d",
                    r.cpu, cpus() - 1);
  if (r.bts > PFM_BTS_LOSSLESS)
    return SetError(detail, -EINVAL, "bts mode %u: expected off, history or "
                    "lossless", r.bts);
  if (r.filter < PFM_FILTER_USER || r.filter > PFM_FILTER_ALL)
    return SetError(detail, -EINVAL, "filter %u: expected user, kernel or all",
                    r.filter);
  if (r.format != PFM_FORMAT_FIXED && r.format != PFM_FORMAT_COMPACT)
    return SetError(detail, -EINVAL, "format %u: expected fixed or compact",
                    r.format);
  constexpr uint32_t kKnownFlags =
      PFM_CONSUMER_BLOCK | PFM_CONSUMER_SWITCHES | PFM_CONSUMER_SCHEDULE;
  if (r.flags & ~kKnownFlags)
    return SetError(detail, -EINVAL, "consumer flags 0x%x: unknown bits 0x%x",
                    r.flags, r.flags & ~kKnownFlags);
  const bool block = (r.flags & PFM_CONSUMER_BLOCK) != 0;
  if (block && (r.bts != PFM_BTS_LOSSLESS || r.ctx_kind != PFM_CTX_TASK))
    return SetError(detail, -EINVAL,
                    "block applies to a lossless consumer of a task only");
  if (r.bts == PFM_BTS_OFF && params.pebs_request == 0 &&
      !(r.flags & (PFM_CONSUMER_SWITCHES | PFM_CONSUMER_SCHEDULE)))
    return SetError(detail, -EINVAL,
                    "a consumer needs at least one of BTS, PEBS, switches or "
                    "the schedule");
  Context* ctx = r.ctx_kind == PFM_CTX_TASK ? TaskContext(r.pid) : nullptr;
  if (ctx != nullptr && ctx->exited)
    return SetError(detail, -ESRCH, "task %d has exited", r.pid);
  if (int err = Reconcile(params, ctx, detail); err < 0) return err;

  // The ring: history keeps history_records newest records; lossless gets
  // at least the requested bytes, rounded up to a power of two.
  RingConfig rc;
  rc.format = static_cast<pfm_format>(r.format);
  const bool history = r.bts == PFM_BTS_HISTORY;
  uint64_t reserve = 0;
  if (history) {
    if (params.history_records == 0)
      return SetError(detail, -EINVAL, "a history ring needs at least one "
                      "record");
    rc.mode = PFM_RING_HISTORY;
    rc.history_records = params.history_records;
    rc.data_bytes = RingDataBytes(params);
  } else {
    rc.mode = PFM_RING_LOSSLESS;
    rc.block = block;
    if (r.ring_bytes > kMaxRingDataBytes)
      return SetError(detail, -EINVAL, "ring of %llu bytes: at most %llu",
                      static_cast<unsigned long long>(r.ring_bytes),
                      static_cast<unsigned long long>(kMaxRingDataBytes));
    rc.data_bytes = RingDataBytes(params);
    if (block) {
      const uint64_t per_drain = limits_.task_bts_records +
                                 limits_.task_pebs_records +
                                 kBlockReserveSlack;
      reserve = WorstCaseBytes(per_drain) + PFM_RING_CHUNK;
      if (rc.data_bytes < 2 * reserve)
        return SetError(detail, -EINVAL,
                        "a block ring needs at least %llu bytes (twice what "
                        "one drain of the task's DS buffer can write); "
                        "asked for %llu",
                        static_cast<unsigned long long>(
                            RingDataBytesFor(2 * reserve)),
                        static_cast<unsigned long long>(r.ring_bytes));
    }
  }
  assert(IsPowerOfTwo(rc.data_bytes));
  char name[48];
  snprintf(name, sizeof(name), "pfm-ring-%u", next_id_);
  std::unique_ptr<Ring> ring;
  if (int err = Ring::Create(rc, name, &ring, detail); err < 0) return err;

  // Everything that can fail has; from here on nothing does.
  auto c = std::make_unique<Consumer>();
  c->id = next_id_++;
  c->p = params;
  c->ring = std::move(ring);
  c->reserve_bytes = reserve;
  if (r.ctx_kind == PFM_CTX_TASK) {
    if (ctx == nullptr) {
      auto nc = std::make_unique<Context>();
      nc->pid = r.pid;
      nc->area = std::make_unique<DsArea>(
          -1, limits_.task_bts_records, limits_.task_bts_records,
          limits_.task_pebs_records, limits_.task_pebs_records);
      nc->consumers.reserve(limits_.max_consumers_per_context);
      nc->last_drain_ns = now;
      ctx = nc.get();
      tasks_[r.pid] = std::move(nc);
      // A task already running somewhere switches to its own buffers now;
      // what it wrote before went to the CPU's buffers.
      for (int cpu = 0; cpu < cpus(); ++cpu) {
        CpuState& cs = *cpus_[cpu];
        if (running_->on(cpu).pid != r.pid) continue;
        Drain(cpu, now);
        cs.running_ctx = ctx;
        ctx->running_cpu = cpu;
      }
    }
    c->ctx = ctx;
    ctx->consumers.push_back(c.get());
  } else {
    CpuState& cs = *cpus_[r.cpu];
    if (!cs.area) {
      cs.area = std::make_unique<DsArea>(
          r.cpu, limits_.cpu_bts_records, limits_.cpu_bts_records,
          limits_.cpu_pebs_records, limits_.cpu_pebs_records);
      cs.last_drain_ns = now;
      // The dummy area may hold what an untraced task wrote: not ours.
      if (cs.running_ctx == nullptr) {
        dummy_->ResetBts();
        dummy_->ResetPebs();
      }
    }
    c->cpu = r.cpu;
    cs.consumers.push_back(c.get());
  }
  const ConsumerId id = c->id;
  if (r.flags & PFM_CONSUMER_SCHEDULE)
    schedule_consumers_[params.session].push_back(c.get());
  consumers_[id] = std::move(c);
  return static_cast<int>(id);
}

void DsAllocator::FreeContextIfEmpty(Context* ctx) {
  if (!ctx->consumers.empty()) return;
  for (auto& cs : cpus_) {
    if (cs->running_ctx == ctx) cs->running_ctx = nullptr;
  }
  tasks_.erase(ctx->pid);
}

void DsAllocator::Detach(ConsumerId id, uint64_t now) {
  auto it = consumers_.find(id);
  if (it == consumers_.end()) return;
  Consumer* c = it->second.get();
  // Bring the consumer up to date before it leaves.
  if (c->ctx != nullptr && c->ctx->running_cpu >= 0 &&
      cpus_[c->ctx->running_cpu]->running_ctx == c->ctx)
    Drain(c->ctx->running_cpu, now);
  if (c->cpu >= 0) Drain(c->cpu, now);
  c->ring->End();
  if (c->p.req.flags & PFM_CONSUMER_SCHEDULE) {
    auto sit = schedule_consumers_.find(c->p.session);
    if (sit != schedule_consumers_.end()) {
      auto& v = sit->second;
      v.erase(std::remove(v.begin(), v.end(), c), v.end());
      if (v.empty()) schedule_consumers_.erase(sit);
    }
  }
  if (c->ctx != nullptr) {
    auto& v = c->ctx->consumers;
    v.erase(std::remove(v.begin(), v.end(), c), v.end());
    Context* ctx = c->ctx;
    consumers_.erase(it);
    FreeContextIfEmpty(ctx);
    return;
  }
  CpuState& cs = *cpus_[c->cpu];
  cs.consumers.erase(std::remove(cs.consumers.begin(), cs.consumers.end(), c),
                     cs.consumers.end());
  if (cs.consumers.empty()) cs.area.reset();
  consumers_.erase(it);
}

Ring* DsAllocator::ring(ConsumerId id) const {
  auto it = consumers_.find(id);
  return it == consumers_.end() ? nullptr : it->second->ring.get();
}

int DsAllocator::Stats(ConsumerId id, ConsumerStats* out) const {
  auto it = consumers_.find(id);
  if (it == consumers_.end()) return -ENOENT;
  const Consumer& c = *it->second;
  out->records = c.ring->records();
  out->lost = c.ring->lost() + c.block_refused;
  out->overwritten = c.ring->overwritten();
  out->filtered = c.filtered;
  return 0;
}

uint64_t DsAllocator::ContextBytes(int32_t pid, int cpu) const {
  if (pid > 0) {
    const Context* ctx = TaskContext(pid);
    return ctx ? ctx->area->bytes() : 0;
  }
  if (cpu < 0 || cpu >= cpus()) return 0;
  return cpus_[cpu]->area ? cpus_[cpu]->area->bytes() : 0;
}

uint64_t DsAllocator::HeldBytes() const {
  uint64_t n = 0;
  for (const auto& [id, c] : consumers_) n += c->ring->mapped_bytes();
  for (const auto& [pid, ctx] : tasks_) n += ctx->area->bytes();
  for (const auto& cs : cpus_)
    if (cs->area) n += cs->area->bytes();
  return n;
}

int64_t DsAllocator::ResizeTaskContext(int32_t pid, uint32_t bts_records,
                                       uint64_t now, ErrorDetail* detail) {
  Context* ctx = TaskContext(pid);
  if (ctx == nullptr)
    return SetError(detail, -ENOENT, "task %d has no DS context", pid);
  bts_records = std::max(bts_records, limits_.min_bts_records);
  const uint64_t old_bytes = ctx->area->bytes();
  if (ctx->running_cpu >= 0 && cpus_[ctx->running_cpu]->running_ctx == ctx)
    Drain(ctx->running_cpu, now);
  const uint32_t pebs = static_cast<uint32_t>(ctx->area->save_area()
                                                  .pebs_absolute_maximum /
                                              sizeof(pfm_pebs_raw));
  ctx->area = std::make_unique<DsArea>(-1, bts_records, bts_records, pebs,
                                       pebs);
  pfm_record rec{};
  rec.type = PFM_REC_RESIZED;
  rec.time = now;
  rec.pid = static_cast<uint32_t>(pid);
  rec.tid = static_cast<uint32_t>(pid);
  rec.cpu = static_cast<uint16_t>(std::max(ctx->running_cpu, 0));
  rec.u.resized.old_bytes = old_bytes;
  rec.u.resized.new_bytes = ctx->area->bytes();
  for (Consumer* c : ctx->consumers) Deliver(c, rec);  // every thread's area
  return static_cast<int64_t>(ctx->area->bytes());
}

DsArea* DsAllocator::Area(int cpu) {
  assert(cpu >= 0 && cpu < cpus());
  CpuState& cs = *cpus_[cpu];
  if (cs.running_ctx != nullptr) return cs.running_ctx->area.get();
  if (cs.area) return cs.area.get();
  return dummy_.get();
}

void DsAllocator::Drain(int cpu, uint64_t now) {
  assert(cpu >= 0 && cpu < cpus());
  CpuState& cs = *cpus_[cpu];
  if (cs.running_ctx != nullptr) {
    Context* ctx = cs.running_ctx;
    uint64_t since = std::max(ctx->last_drain_ns, cs.switch_in_ns);
    DrainArea(*ctx->area, ctx, cpu, running_->on(cpu), now, &since);
    ctx->last_drain_ns = since;
  } else if (cs.area) {
    uint64_t since = std::max(cs.last_drain_ns, cs.switch_in_ns);
    DrainArea(*cs.area, nullptr, cpu, running_->on(cpu), now, &since);
    cs.last_drain_ns = since;
  } else {
    dummy_->ResetBts();
    dummy_->ResetPebs();
  }
}

DsArea* DsAllocator::TaskArea(int32_t pid) const {
  Context* ctx = LiveTaskContext(pid);
  return ctx != nullptr ? ctx->area.get() : nullptr;
}

void DsAllocator::DrainTask(TaskId task, int cpu, uint64_t now) {
  if (cpu < 0 || cpu >= cpus()) cpu = 0;
  Context* ctx = LiveTaskContext(task.pid);
  if (ctx == nullptr) return;
  uint64_t since = ctx->last_drain_ns;
  DrainArea(*ctx->area, ctx, cpu, task, now, &since);
  ctx->last_drain_ns = since;
}

// Translates and fans out every record of `area`, oldest first, then resets
// it. BTS times are interpolated over (since, now]; PEBS records carry their
// own time (the TSC, in ns of the driver's clock), clamped into the same
// window so a consumer's stream stays in time order. On return *since = now.
void DsAllocator::DrainArea(DsArea& area, Context* task_ctx, int cpu,
                            TaskId task, uint64_t now, uint64_t* since) {
  const uint64_t t0 = std::min(*since, now);
  const size_t nb = area.bts_count();
  const size_t np = area.pebs_count();
  const pfm_bts_raw* bts = area.bts_records();
  const pfm_pebs_raw* pebs = area.pebs_records();
  // Record i's time is t0 + floor((now - t0) * (i + 1) / nb).
  BtsClock clock(t0, now - t0, nb);
  size_t i = 0, j = 0, k = 0;
  const uint16_t cpu16 = static_cast<uint16_t>(cpu);
  const BtsOrigin origin{cpu16, static_cast<uint32_t>(task.pid),
                         static_cast<uint32_t>(task.tid)};
  pfm_record* const out = batch_.get();
  auto flush_if_full = [&] {
    if (k == kFanOutBatch) {
      FanOut(task_ctx, cpu, out, k);
      k = 0;
    }
  };
  if (np == 0) {
    // The common drain, BTS only: no merge, a tight translation loop. When
    // the first user-mode consumer's ring is a lossless fixed one with room,
    // a batch is translated straight into it (one copy fewer) and, if it
    // holds user branches only (it takes them all), committed there and
    // copied to the others from it. Otherwise the batch goes through out[].
    // When every consumer is a compact ring that takes them all, a batch of
    // user branches is encoded straight from the raw records, never
    // translated (the fused drain).
    Consumer* direct = DirectConsumer(task_ctx, cpu);
    Consumer* fused[kMaxSharedRings];
    size_t nfused = 0;
    const bool fuse = FusedCompactConsumers(task_ctx, cpu, origin.tid, fused,
                                            &nfused);
    while (i < nb) {
      const size_t run = std::min(nb - i, kFanOutBatch);
      if (fuse && DeliverFusedBts(task_ctx, cpu, fused, nfused, bts + i, run,
                                  origin, &clock)) {
        i += run;
        continue;
      }
      pfm_record* dst = direct ? direct->ring->ReserveFixed(run) : nullptr;
      pfm_record* to = dst ? dst : out;
      uint32_t kernel_from = 0;
      // The clock in locals whose address is not taken (the stores into
      // the records could alias the clock's fields, which would be
      // reloaded after each), advanced on the time itself (one register
      // fewer than t0 + acc_q, which the loop runs out of); the records'
      // constant words made once.
      const BtsWords words(origin);
      const uint64_t step_q = clock.step_q, step_r = clock.step_r;
      const uint64_t nrec = clock.n;
      uint64_t time = clock.Peek(), acc_r = clock.acc_r;
      for (size_t r = 0; r < run; ++r) {
        TranslateBts(bts[i + r], time, words, &to[r]);
        kernel_from |= to[r].misc;
        acc_r += step_r;
        uint64_t wrapped;
        const bool below = __builtin_sub_overflow(acc_r, nrec, &wrapped);
        acc_r = below ? acc_r : wrapped;
        time += step_q + !below;
      }
      clock.acc_q = time - clock.t0;
      clock.acc_r = acc_r;
      i += run;
      if (dst != nullptr && !(kernel_from & PFM_MISC_BRANCH_KERNEL_FROM)) {
        direct->ring->CommitFixed(run);
        FanOut(task_ctx, cpu, dst, run, direct, /*user_branches=*/true);
        continue;
      }
      // Kernel branches in the batch: filtered per consumer, from out[].
      // Else (no lossless fixed ring to translate into) the scan told
      // whether they are user branches only, which FanOut need not redo.
      if (dst != nullptr) std::memcpy(out, dst, run * sizeof(pfm_record));
      FanOut(task_ctx, cpu, out, run, nullptr,
             !(kernel_from & PFM_MISC_BRANCH_KERNEL_FROM));
    }
  }
  const BtsWords words(origin);
  while (i < nb || j < np) {
    const uint64_t tb = i < nb ? clock.Peek() : UINT64_MAX;
    const uint64_t tp =
        j < np ? std::min<uint64_t>(std::max<uint64_t>(pebs[j].tsc, t0), now) : UINT64_MAX;
    if (tb <= tp) {
      TranslateBts(bts[i++], clock.Next(), words, &out[k++]);
    } else {
      const pfm_pebs_raw& p = pebs[j++];
      pfm_record& rec = out[k++];
      std::memset(&rec, 0, sizeof(rec));
      rec.cpu = cpu16;
      rec.pid = origin.pid;
      rec.tid = origin.tid;
      rec.type = PFM_REC_PEBS;
      rec.time = tp;
      rec.u.pebs.ip = p.eventing_ip ? p.eventing_ip : p.ip;
      rec.u.pebs.addr = p.data_linear_address;
      rec.u.pebs.latency = p.latency;
      rec.u.pebs.data_src = p.data_source;
      // The applicable-counters mask names the counter(s) that overflowed;
      // the sample belongs to whoever held the lowest of them.
      const uint64_t mask = p.applicable_counters;
      const int counter = mask ? __builtin_ctzll(mask) : -1;
      rec.u.pebs.counter = static_cast<uint32_t>(counter);
      rec.u.pebs.event =
          (router_ != nullptr && counter >= 0) ? router_->OwnerOf(cpu, counter)
                                               : 0;
    }
    flush_if_full();
  }
  if (k > 0) FanOut(task_ctx, cpu, out, k);
  area.ResetBts();
  area.ResetPebs();
  *since = now;
}

void DsAllocator::Deliver(Consumer* c, const pfm_record& rec) {
  if (c->frozen) return;
  if (c->ring->Write(rec) == Ring::kWouldBlock) ++c->block_refused;
}

void DsAllocator::DeliverRun(Consumer* c, const pfm_record* recs, size_t n) {
  if (c->frozen || n == 0) return;
  c->block_refused +=
      n - c->ring->WriteValidBatch(recs, n, compact_batch_.get());
}

namespace {
// Where a batch shared by the rings of cs[0, k) starts: their chunk offsets,
// and the state to encode from (the first ring's decoder's); returns whether
// it must start from a reset state instead (see DeliverShared).
template <typename C>
bool SharedStart(C* const* cs, size_t k, uint32_t* offsets, CodecState* st) {
  bool reset = !cs[0]->ring->DecoderState(st);
  for (size_t m = 0; m < k; ++m) {
    offsets[m] = cs[m]->ring->ChunkOffset();
    if (!reset && m > 0) reset = !cs[m]->ring->DecoderAt(*st);
  }
  return reset;
}
}  // namespace

// The encoder starts from the first ring's decoder state; rings that are
// elsewhere (one got a record the others did not, or lost some) make the
// batch start from a reset state, which costs every ring one reset marker
// and a record encoded from scratch, once.
void DsAllocator::DeliverShared(Consumer* const* cs, size_t k,
                                const pfm_record* recs, size_t n) {
  CompactBatch& b = *compact_batch_;
  if (n > b.max_records()) {  // FanOut's batches are never larger
    for (size_t m = 0; m < k; ++m) DeliverRun(cs[m], recs, n);
    return;
  }
  CodecState st;
  uint32_t offsets[kMaxSharedRings];
  const bool reset = SharedStart(cs, k, offsets, &st);
  b.Encode(recs, n, offsets, k, reset, &st);
  for (size_t m = 0; m < k; ++m)
    cs[m]->block_refused += n - cs[m]->ring->WriteCompactBatch(b, m, recs);
}

DsAllocator::Consumer* DsAllocator::DirectConsumer(Context* task_ctx,
                                                   int cpu) const {
  // Only a lossless fixed ring can lend its slots (Ring::ReserveFixed).
  auto ok = [](Consumer* c) {
    return !c->frozen && c->bts() && c->user() && !c->one_thread() &&
           c->p.req.format == PFM_FORMAT_FIXED &&
           c->p.req.bts == PFM_BTS_LOSSLESS;
  };
  if (task_ctx != nullptr)
    for (Consumer* c : task_ctx->consumers)
      if (ok(c)) return c;
  for (Consumer* c : cpus_[cpu]->consumers)
    if (ok(c)) return c;
  return nullptr;
}

bool DsAllocator::FusedCompactConsumers(Context* task_ctx, int cpu,
                                        uint32_t tid, Consumer** cs,
                                        size_t* k) const {
  // What FanOut does with a batch of one thread's user branches, consumer
  // by consumer: nothing for those that take no branches or not this
  // thread's; filtered (counted) for those that take kernel branches only;
  // the whole batch for the others (frozen ones drop it), shared among the
  // compact rings that can take a shared batch. Any other ring: no fusing.
  size_t n = 0;
  auto fits = [&](Consumer* c) {
    if (!c->bts() || !c->takes_tid(tid) || !c->user() || c->frozen)
      return true;
    if (!c->ring->CompactBatchReady() || n == kMaxSharedRings) return false;
    cs[n++] = c;
    return true;
  };
  if (task_ctx != nullptr)
    for (Consumer* c : task_ctx->consumers)
      if (!fits(c)) return false;
  for (Consumer* c : cpus_[cpu]->consumers)
    if (!fits(c)) return false;
  *k = n;
  return n > 0;
}

bool DsAllocator::DeliverFusedBts(Context* task_ctx, int cpu,
                                  Consumer* const* cs, size_t k,
                                  const pfm_bts_raw* raw, size_t n,
                                  const BtsOrigin& origin, BtsClock* clock) {
  CompactBatch& b = *compact_batch_;
  assert(k >= 1 && n <= b.max_records());
  // A ring that lost records since FusedCompactConsumers looked (an earlier
  // batch of this drain did not fit) writes its LOST record first: the
  // translating path does that.
  for (size_t m = 0; m < k; ++m)
    if (!cs[m]->ring->CompactBatchReady()) return false;
  CodecState st;
  uint32_t offsets[kMaxSharedRings];
  const bool reset = SharedStart(cs, k, offsets, &st);
  BtsClock c = *clock;
  if (!b.EncodeBts(raw, n, origin, &c, offsets, k, reset, &st)) return false;
  for (size_t m = 0; m < k; ++m)
    if (!cs[m]->ring->CompactBatchFits(b, m)) return false;
  for (size_t m = 0; m < k; ++m) {
    [[maybe_unused]] const size_t took =
        cs[m]->ring->WriteCompactBatch(b, m, nullptr);
    assert(took == n);  // it fits: all of it, from the bytes
  }
  // FanOut's filter counts what kernel-only consumers did not take.
  auto count = [&](Consumer* x) {
    if (x->bts() && x->takes_tid(origin.tid) && !x->user()) x->filtered += n;
  };
  if (task_ctx != nullptr)
    for (Consumer* x : task_ctx->consumers) count(x);
  for (Consumer* x : cpus_[cpu]->consumers) count(x);
  *clock = c;
  ++fused_batches_;
  return true;
}

namespace {
// Whether every record of the batch is one thread's (a task drain's are).
bool OneTid(const pfm_record* recs, size_t n) {
  for (size_t i = 1; i < n; ++i)
    if (recs[i].tid != recs[0].tid) return false;
  return true;
}
}  // namespace

void DsAllocator::FanOut(Context* task_ctx, int cpu, const pfm_record* recs,
                         size_t n, const Consumer* skip,
                         bool user_branches) {
  // The common batch: user-mode branches only, which every user BTS
  // consumer takes whole.
  if (!user_branches) {
    user_branches = true;
    for (size_t i = 0; i < n && user_branches; ++i)
      user_branches = recs[i].type == PFM_REC_BRANCH &&
                      !(recs[i].misc & PFM_MISC_BRANCH_KERNEL_FROM);
  }
  auto accept = [](Consumer* c, const pfm_record& rec) {
    if (!c->takes_tid(rec.tid)) return false;
    switch (rec.type) {
      case PFM_REC_BRANCH:
        if (!c->bts()) return false;
        if ((rec.misc & PFM_MISC_BRANCH_KERNEL_FROM) ? !c->kernel()
                                                     : !c->user()) {
          ++c->filtered;
          return false;
        }
        return true;
      case PFM_REC_PEBS:
        return c->p.pebs_request != 0 && rec.u.pebs.event == c->p.pebs_request;
      case PFM_REC_SWITCH_IN:
      case PFM_REC_SWITCH_OUT:
        return c->switches();
      case PFM_REC_GAP:  // a gap in the branches: for who takes branches
        return c->bts();
      default:
        return true;
    }
  };
  // Compact consumers that take the whole batch share one encoding.
  Consumer* shared[kMaxSharedRings];
  size_t nshared = 0;
  auto whole = [&](Consumer* c) {
    if (!c->frozen && c->ring->CompactBatchReady() &&
        nshared < kMaxSharedRings) {
      shared[nshared++] = c;
      return;
    }
    DeliverRun(c, recs, n);
  };
  auto deliver = [&](Consumer* c) {
    if (user_branches && c->bts() && c->user() &&
        (!c->one_thread() || (n > 0 && c->takes_tid(recs[0].tid) && OneTid(recs, n)))) {
      whole(c);
      return;
    }
    // accept() is called once per record: it counts what it filters.
    size_t start = 0;
    bool in_run = false, cut = false;
    for (size_t i = 0; i < n; ++i) {
      if (accept(c, recs[i])) {
        if (!in_run) start = i;
        in_run = true;
      } else {
        cut = true;
        if (in_run) DeliverRun(c, recs + start, i - start);
        in_run = false;
      }
    }
    if (!cut) {
      whole(c);
    } else if (in_run) {
      DeliverRun(c, recs + start, n - start);
    }
  };
  if (task_ctx != nullptr)
    for (Consumer* c : task_ctx->consumers)
      if (c != skip) deliver(c);
  for (Consumer* c : cpus_[cpu]->consumers)
    if (c != skip) deliver(c);
  if (nshared == 1) {
    DeliverRun(shared[0], recs, n);
  } else if (nshared > 1) {
    DeliverShared(shared, nshared, recs, n);
  }
}

void DsAllocator::Switch(int cpu, uint64_t now, TaskId prev, TaskId next,
                         bool preempt) {
  assert(cpu >= 0 && cpu < cpus());
  CpuState& cs = *cpus_[cpu];
  Drain(cpu, now);
  // `self` switched out or in, `other` on the other side of the switch.
  auto emit = [&](uint16_t type, TaskId self, TaskId other, Context* ctx) {
    pfm_record rec{};
    rec.type = type;
    rec.cpu = static_cast<uint16_t>(cpu);
    rec.time = now;
    rec.misc = preempt ? PFM_MISC_SWITCH_PREEMPT : 0;
    rec.pid = static_cast<uint32_t>(self.pid);
    rec.tid = static_cast<uint32_t>(self.tid);
    rec.u.sw.other_pid = static_cast<uint32_t>(other.pid);
    rec.u.sw.other_tid = static_cast<uint32_t>(other.tid);
    FanOut(ctx, cpu, rec);
  };
  if (cs.running_ctx != nullptr) cs.running_ctx->running_cpu = -1;
  // prev's own context, not the one installed here: on the host, tracers of
  // different tasks report switches on the same CPU number independently.
  if (prev.pid != 0)
    emit(PFM_REC_SWITCH_OUT, prev, next, LiveTaskContext(prev.pid));
  if (own_running_) own_running_->Set(cpu, next);
  cs.switch_in_ns = now;
  Context* next_ctx = LiveTaskContext(next.pid);
  cs.running_ctx = next_ctx;
  if (next_ctx != nullptr) next_ctx->running_cpu = cpu;
  if (next.pid != 0) emit(PFM_REC_SWITCH_IN, next, prev, next_ctx);
}

void DsAllocator::TaskCreated(TaskId parent, TaskId child) {
  const int32_t root = RootOf(parent.pid);
  auto [it, fresh] = group_live_.emplace(root, 1);
  ++it->second;
  // A new process of the group, or a new thread of one (the root's own
  // threads are counted by group_live_ alone).
  if (child.pid != root) {
    Member& m = family_[child.pid];
    m.root = root;
    ++m.live;
  }
}

void DsAllocator::MemberGone(int32_t root, TaskId task) {
  if (task.pid == root) return;
  auto m = family_.find(task.pid);
  if (m != family_.end() && m->second.root == root && --m->second.live == 0) family_.erase(m);
}

void DsAllocator::ForgetGroup(int32_t root) {
  for (auto it = family_.begin(); it != family_.end();)
    it = it->second.root == root ? family_.erase(it) : std::next(it);
}

int32_t DsAllocator::LiveTaskContextOfConsumer(ConsumerId id) const {
  auto it = consumers_.find(id);
  if (it == consumers_.end()) return 0;
  const Context* ctx = it->second->ctx;
  return ctx != nullptr && !ctx->exited ? ctx->pid : 0;
}

void DsAllocator::TaskDetached(TaskId task) {
  const int32_t root = RootOf(task.pid);
  auto g = group_live_.find(root);
  if (g == group_live_.end()) return;
  if (--g->second > 0) {
    MemberGone(root, task);
    return;
  }
  group_live_.erase(g);
  ForgetGroup(root);
}

void DsAllocator::TaskExec(TaskId task, uint64_t now) {
  Context* ctx = LiveTaskContext(RootOf(task.pid));
  if (ctx == nullptr) return;
  pfm_record rec{};
  rec.type = PFM_REC_EXEC;
  rec.time = now;
  rec.pid = static_cast<uint32_t>(task.pid);
  rec.tid = static_cast<uint32_t>(task.tid);
  for (Consumer* c : ctx->consumers)
    if (c->p.req.bts != PFM_BTS_HISTORY && !c->frozen && c->takes_tid(rec.tid))
      Deliver(c, rec);
}

void DsAllocator::TaskExit(TaskId task, uint64_t now, int64_t status) {
  const int32_t root = RootOf(task.pid);
  if (auto g = group_live_.find(root); g != group_live_.end()) {
    if (g->second > 1) {
      // One of several: its EXIT goes out, the context goes on.
      --g->second;
      MemberGone(root, task);
      Context* ctx = LiveTaskContext(root);
      if (ctx == nullptr) return;
      pfm_record rec{};
      rec.type = PFM_REC_EXIT;
      rec.time = now;
      rec.pid = static_cast<uint32_t>(task.pid);
      rec.tid = static_cast<uint32_t>(task.tid);
      rec.u.exit.status = status;
      for (Consumer* c : ctx->consumers) {
        if (c->frozen || !c->takes_tid(rec.tid)) continue;
        if (c->p.req.bts != PFM_BTS_HISTORY) Deliver(c, rec);
        // A one-thread consumer ends with its thread, as perf -t does.
        if (c->one_thread()) {
          c->ring->End();
          c->frozen = true;
        }
      }
      return;
    }
    group_live_.erase(g);
    ForgetGroup(root);
  }
  Context* ctx = TaskContext(root);
  if (ctx == nullptr || ctx->exited) return;
  for (int cpu = 0; cpu < cpus(); ++cpu) {
    CpuState& cs = *cpus_[cpu];
    if (cs.running_ctx != ctx) continue;
    Drain(cpu, now);
    cs.running_ctx = nullptr;
  }
  ctx->running_cpu = -1;
  ctx->exited = true;
  pfm_record rec{};
  rec.type = PFM_REC_EXIT;
  rec.time = now;
  rec.pid = static_cast<uint32_t>(task.pid);
  rec.tid = static_cast<uint32_t>(task.tid);
  rec.u.exit.status = status;
  for (Consumer* c : ctx->consumers) {
    // A history ring's N slots are for the newest N branches ("how did I get
    // here"); its end is the ring's ENDED flag, the status is in the session.
    // A one-thread consumer whose thread is not the last: ended all the same
    // (the process is gone), without another thread's EXIT.
    if (c->p.req.bts != PFM_BTS_HISTORY && !c->frozen && c->takes_tid(rec.tid))
      Deliver(c, rec);
    c->ring->End();
    c->frozen = true;
  }
}

void DsAllocator::TaskCrashed(TaskId task, uint64_t now, int signo) {
  Context* ctx = TaskContext(task.pid);
  if (ctx == nullptr) return;
  if (ctx->running_cpu >= 0 && cpus_[ctx->running_cpu]->running_ctx == ctx)
    Drain(ctx->running_cpu, now);
  for (Consumer* c : ctx->consumers) {
    if (c->p.req.bts != PFM_BTS_HISTORY || c->frozen) continue;
    c->frozen = true;
    c->ring->End();
  }
  (void)signo;
}

void DsAllocator::Notify(int32_t pid, const pfm_record& rec) {
  Context* ctx = TaskContext(pid);
  if (ctx == nullptr) return;
  for (Consumer* c : ctx->consumers) Deliver(c, rec);
}

void DsAllocator::NotifySession(uint64_t session, const pfm_record& rec) {
  if (schedule_consumers_.empty()) return;
  auto it = schedule_consumers_.find(session);
  if (it == schedule_consumers_.end()) return;
  for (Consumer* c : it->second) Deliver(c, rec);
}

TraceConfig DsAllocator::Config(int cpu, TaskId task) const {
  TraceConfig tc;
  if (cpu < 0 || cpu >= cpus()) return tc;
  const Context* ctx = LiveTaskContext(task.pid);
  auto add = [&](const Consumer* c) {
    if (c->frozen) return;
    if (c->bts()) {
      tc.bts_user |= c->user();
      tc.bts_kernel |= c->kernel();
    }
    if (c->p.pebs_request == 0 || router_ == nullptr) return;
    for (int k = 0; k < PFM_DS_MAX_PEBS_COUNTERS; ++k) {
      if (router_->OwnerOf(cpu, k) != c->p.pebs_request) continue;
      tc.pebs_counters |= 1u << k;
      tc.pebs_reset[k] = c->p.pebs_period;
    }
  };
  if (ctx != nullptr)
    for (const Consumer* c : ctx->consumers) add(c);
  if (task.pid != 0)
    for (const Consumer* c : cpus_[cpu]->consumers) add(c);
  return tc;
}

bool DsAllocator::Held(TaskId task) const {
  const Context* ctx = TaskContext(task.pid);
  if (ctx == nullptr || ctx->exited) return false;
  for (const Consumer* c : ctx->consumers) {
    if (c->block() && !c->frozen && c->ring->FreeBytes() < c->reserve_bytes)
      return true;
  }
  return false;
}

bool DsAllocator::CheckInvariant(const char** why) const {
  for (const auto& [id, c] : consumers_) {
    const std::vector<Consumer*>& list =
        c->ctx ? c->ctx->consumers : cpus_[c->cpu]->consumers;
    if (std::find(list.begin(), list.end(), c.get()) == list.end()) {
      *why = "a consumer is missing from its context's list";
      return false;
    }
  }
  for (const auto& [pid, ctx] : tasks_) {
    if (ctx->consumers.empty()) {
      *why = "a task context without consumers was kept";
      return false;
    }
  }
  for (int cpu = 0; cpu < cpus(); ++cpu) {
    const CpuState* cs = cpus_[cpu].get();
    if (cs->consumers.empty() != !cs->area) {
      *why = "a catch-all area exists without consumers (or the reverse)";
      return false;
    }
    if (cs->running_ctx && cs->running_ctx->pid != running_->on(cpu).pid) {
      *why = "a CPU's installed context is not its running task's";
      return false;
    }
  }
  return true;
}

}  // namespace pfm
