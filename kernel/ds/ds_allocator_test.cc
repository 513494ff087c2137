#include "kernel/ds/ds_allocator.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernel/uapi/ring_format.h"

namespace pfm {
namespace {

constexpr uint64_t kUser = 0x401000;
constexpr uint64_t kKernel = 0xffffffff81000000ull;

class FixedRouter : public PebsRouter {
 public:
  uint32_t owner[PFM_DS_MAX_PEBS_COUNTERS] = {};
  uint32_t OwnerOf(int, int counter) const override {
    return counter >= 0 && counter < PFM_DS_MAX_PEBS_COUNTERS ? owner[counter]
                                                              : 0;
  }
};

// Plays the driver: writes through the installed area and drains on the
// threshold interrupt, as the sim and ptrace drivers do.
class Driver {
 public:
  explicit Driver(DsAllocator* ds) : ds_(ds) {}
  void Branch(int cpu, uint64_t from, uint64_t to, uint64_t now) {
    pfm_bts_raw r{from, to, PFM_BTS_RAW_PREDICTED};
    if (ds_->Area(cpu)->WriteBts(r) == DsArea::kInterrupt) ds_->Drain(cpu, now);
  }
  void Pebs(int cpu, uint64_t ip, uint64_t counters, uint64_t tsc) {
    pfm_pebs_raw p{};
    p.ip = p.eventing_ip = ip;
    p.applicable_counters = counters;
    p.tsc = tsc;
    if (ds_->Area(cpu)->WritePebs(p) == DsArea::kInterrupt) ds_->Drain(cpu, tsc);
  }

 private:
  DsAllocator* ds_;
};

ConsumerParams Task(int32_t pid, pfm_bts_mode bts, uint64_t ring_bytes = 1 << 20,
                    uint32_t filter = PFM_FILTER_USER) {
  ConsumerParams p;
  p.req.ctx_kind = PFM_CTX_TASK;
  p.req.pid = pid;
  p.req.bts = bts;
  p.req.filter = filter;
  p.req.format = PFM_FORMAT_FIXED;
  p.req.ring_bytes = ring_bytes;
  p.session = 1;
  return p;
}

std::vector<pfm_record> Records(DsAllocator& ds, int id, uint16_t type = 0) {
  std::vector<pfm_record> all, out;
  ds.ring(id)->Snapshot(&all);
  for (const pfm_record& r : all)
    if (type == 0 || r.type == type) out.push_back(r);
  return out;
}

void ExpectInvariant(const DsAllocator& ds) {
  const char* why = "";
  EXPECT_TRUE(ds.CheckInvariant(&why)) << why;
}

TEST(DsAllocator, HistoryKeepsNewestRecordsInOrder) {
  DsLimits lim;
  lim.task_bts_records = 256;
  DsAllocator ds(2, lim);
  ConsumerParams p = Task(1000, PFM_BTS_HISTORY);
  p.history_records = 10;
  ErrorDetail d;
  const int id = ds.Attach(p, 0, &d);
  ASSERT_GT(id, 0) << d.message;
  Driver drv(&ds);
  ds.Switch(0, 100, TaskId{0, 0}, TaskId{1000, 1000}, false);
  for (uint64_t i = 0; i < 5000; ++i) drv.Branch(0, kUser + i * 16, kUser + i * 16 + 8, 100 + i);
  ds.Switch(0, 6000, TaskId{1000, 1000}, TaskId{0, 0}, false);
  std::vector<pfm_record> b = Records(ds, id, PFM_REC_BRANCH);
  ASSERT_EQ(b.size(), 10u);
  for (int k = 0; k < 10; ++k) {
    EXPECT_EQ(b[k].u.branch.from, kUser + (4990 + k) * 16);
    EXPECT_EQ(b[k].pid, 1000u);
    if (k) {
      EXPECT_GE(b[k].time, b[k - 1].time);
    }
  }
  ExpectInvariant(ds);
}

TEST(DsAllocator, DebuggerAndProfilerShareOneTask) {
  DsLimits lim;
  lim.task_bts_records = 128;
  DsAllocator ds(1, lim);
  ConsumerParams dbg = Task(1000, PFM_BTS_HISTORY);
  dbg.history_records = 50;
  const int d_id = ds.Attach(dbg, 0, nullptr);
  const int p_id = ds.Attach(Task(1000, PFM_BTS_LOSSLESS, 1 << 20), 0, nullptr);
  ASSERT_GT(d_id, 0);
  ASSERT_GT(p_id, 0);
  Driver drv(&ds);
  ds.Switch(0, 10, TaskId{0, 0}, TaskId{1000, 1000}, false);
  for (uint64_t i = 0; i < 3000; ++i) drv.Branch(0, kUser + i, kUser + i + 100, 10 + i);
  ds.Drain(0, 4000);
  EXPECT_EQ(Records(ds, d_id, PFM_REC_BRANCH).size(), 50u);
  std::vector<pfm_record> all = Records(ds, p_id, PFM_REC_BRANCH);
  ASSERT_EQ(all.size(), 3000u);
  for (uint64_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i].u.branch.from, kUser + i);
  ConsumerStats st;
  ASSERT_EQ(ds.Stats(p_id, &st), 0);
  EXPECT_EQ(st.lost, 0u);
}

TEST(DsAllocator, UserOnlyConsumerNeverSeesKernelFrom) {
  DsAllocator ds(1, DsLimits{});
  const int user = ds.Attach(Task(1000, PFM_BTS_LOSSLESS), 0, nullptr);
  const int all = ds.Attach(Task(1000, PFM_BTS_LOSSLESS, 1 << 20, PFM_FILTER_ALL), 0, nullptr);
  ASSERT_GT(user, 0);
  ASSERT_GT(all, 0);
  TraceConfig tc = ds.Config(0, TaskId{1000, 1000});
  EXPECT_TRUE(tc.bts_user);
  EXPECT_TRUE(tc.bts_kernel);  // the union: trace both, filter per consumer
  Driver drv(&ds);
  ds.Switch(0, 1, TaskId{0, 0}, TaskId{1000, 1000}, false);
  for (int i = 0; i < 100; ++i) drv.Branch(0, i % 3 ? kUser + i : kKernel + i, kUser, 2 + i);
  ds.Drain(0, 200);
  int kernel_seen = 0;
  for (const pfm_record& r : Records(ds, user, PFM_REC_BRANCH)) {
    EXPECT_LT(r.u.branch.from, kKernel);
    EXPECT_FALSE(r.misc & PFM_MISC_BRANCH_KERNEL_FROM);
  }
  for (const pfm_record& r : Records(ds, all, PFM_REC_BRANCH))
    kernel_seen += (r.misc & PFM_MISC_BRANCH_KERNEL_FROM) ? 1 : 0;
  EXPECT_EQ(kernel_seen, 34);
  EXPECT_EQ(Records(ds, user, PFM_REC_BRANCH).size(), 66u);
}

// Every field of a translated BTS record, in both formats: type (a soft-BTS
// gap marker becomes a GAP record whose flags are 0), cpu, misc (predicted
// bit from the flags, kernel bit from `from`), pid/tid, from/to/flags, the
// union's unused bytes zero, and times spread over the drain's window.
TEST(DsAllocator, TranslatesEveryFieldOfBtsRecords) {
  for (pfm_format format : {PFM_FORMAT_FIXED, PFM_FORMAT_COMPACT}) {
    SCOPED_TRACE(format);
    DsAllocator ds(2, DsLimits{});
    ConsumerParams p = Task(1000, PFM_BTS_LOSSLESS, 1 << 20, PFM_FILTER_ALL);
    p.req.format = format;
    const int id = ds.Attach(p, 0, nullptr);
    ASSERT_GT(id, 0);
    ds.Switch(1, 100, TaskId{0, 0}, TaskId{1000, 1001}, false);
    const std::vector<pfm_bts_raw> in = {
        {kUser + 1, kUser + 2, PFM_BTS_RAW_PREDICTED},
        {kUser + 3, kUser + 4, 0},
        {kKernel + 5, kUser + 6, PFM_BTS_RAW_PREDICTED},
        {kUser + 7, kUser + 8, PFM_BTS_RAW_GAP | PFM_BTS_RAW_PREDICTED},
        {kKernel + 9, kKernel + 10, 0},
        {kUser + 11, kUser + 12, PFM_BTS_RAW_GAP},
        {kUser + 13, kUser + 14, PFM_BTS_RAW_PREDICTED}};
    for (const pfm_bts_raw& r : in) ds.Area(1)->WriteBts(r);
    ds.Drain(1, 100 + 7 * 10 + 3);  // a window of 73 over 7 records
    std::vector<pfm_record> got;
    for (const pfm_record& r : Records(ds, id))
      if (r.type == PFM_REC_BRANCH || r.type == PFM_REC_GAP) got.push_back(r);
    ASSERT_EQ(got.size(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      SCOPED_TRACE(i);
      const pfm_record& r = got[i];
      const bool gap = (in[i].flags & PFM_BTS_RAW_GAP) != 0;
      EXPECT_EQ(r.type, gap ? PFM_REC_GAP : PFM_REC_BRANCH);
      EXPECT_EQ(r.cpu, 1);
      EXPECT_EQ(r.misc,
                ((in[i].flags & PFM_BTS_RAW_PREDICTED) ? PFM_MISC_BRANCH_PREDICTED : 0u) |
                    (in[i].from >= kKernel ? PFM_MISC_BRANCH_KERNEL_FROM : 0u));
      EXPECT_EQ(r.pid, 1000u);
      EXPECT_EQ(r.tid, 1001u);
      EXPECT_EQ(r.u.branch.from, in[i].from);
      EXPECT_EQ(r.u.branch.to, in[i].to);
      EXPECT_EQ(r.u.branch.flags, gap ? 0 : in[i].flags);
      // floor(73 * (i + 1) / 7) past the window's start.
      EXPECT_EQ(r.time, 100 + 73 * (i + 1) / 7);
      for (size_t b = sizeof(r.u.branch); b < sizeof(r.u.raw); ++b)
        ASSERT_EQ(r.u.raw[b], 0) << b;
    }
  }
}

// A drain is translated and fanned out in batches, each consumer taking runs
// of the records its filter accepts: across batch boundaries and runs of
// every length, each consumer still gets exactly its records, in order.
TEST(DsAllocator, BatchedFanOutGivesEachFilterExactlyItsRecordsInOrder) {
  DsAllocator ds(1, DsLimits{});
  ConsumerParams kernel_only = Task(1000, PFM_BTS_LOSSLESS, 1 << 20,
                                    PFM_FILTER_KERNEL);
  kernel_only.req.format = PFM_FORMAT_COMPACT;
  const int user = ds.Attach(Task(1000, PFM_BTS_LOSSLESS), 0, nullptr);
  const int kern = ds.Attach(kernel_only, 0, nullptr);
  const int all = ds.Attach(
      Task(1000, PFM_BTS_LOSSLESS, 1 << 20, PFM_FILTER_ALL), 0, nullptr);
  ASSERT_GT(user, 0);
  ASSERT_GT(kern, 0);
  ASSERT_GT(all, 0);
  ds.Switch(0, 1, TaskId{0, 0}, TaskId{1000, 1000}, false);
  // Runs of 1..700 records alternating user/kernel; ids in `to`. Fewer
  // than the DS buffer's threshold, so it is one drain of many batches.
  std::vector<uint64_t> want_user, want_kernel;
  uint64_t id = 0;
  bool in_kernel = false;
  for (uint64_t run : {700, 1, 1, 3, 255, 256, 257, 2, 300}) {
    for (uint64_t k = 0; k < run; ++k, ++id) {
      pfm_bts_raw r{in_kernel ? kKernel + id : kUser + id, id, 0};
      ASSERT_EQ(ds.Area(0)->WriteBts(r), DsArea::kStored);
      (in_kernel ? want_kernel : want_user).push_back(id);
    }
    in_kernel = !in_kernel;
  }
  ds.Drain(0, 10'000);
  auto ids = [&](int c) {
    std::vector<uint64_t> v;
    for (const pfm_record& r : Records(ds, c, PFM_REC_BRANCH))
      v.push_back(r.u.branch.to);
    return v;
  };
  EXPECT_EQ(ids(user), want_user);
  EXPECT_EQ(ids(kern), want_kernel);
  std::vector<uint64_t> want_all(id);
  for (uint64_t i = 0; i < id; ++i) want_all[i] = i;
  EXPECT_EQ(ids(all), want_all);
  ConsumerStats su, sk, sa;
  ASSERT_EQ(ds.Stats(user, &su), 0);
  ASSERT_EQ(ds.Stats(kern, &sk), 0);
  ASSERT_EQ(ds.Stats(all, &sa), 0);
  EXPECT_EQ(su.filtered, want_kernel.size());
  EXPECT_EQ(sk.filtered, want_user.size());
  EXPECT_EQ(sa.filtered, 0u);
  EXPECT_EQ(sa.records, id);  // no switch records: none asked for
}

// A drain translates user branches straight into the first user consumer's
// lossless fixed ring and copies them from there: that ring, a second fixed
// one, a compact one and a catch-all all end with the same records, across
// ring wraps and a reader that lets the direct ring fill up (then the drain
// falls back to its own batch and the direct ring counts losses).
TEST(DsAllocator, DirectTranslationGivesEveryConsumerTheSameRecords) {
  DsAllocator ds(1, DsLimits{});
  ConsumerParams compact = Task(1000, PFM_BTS_LOSSLESS, 1 << 22);
  compact.req.format = PFM_FORMAT_COMPACT;
  ConsumerParams cpu;
  cpu.req.ctx_kind = PFM_CTX_CPU;
  cpu.req.cpu = 0;
  cpu.req.bts = PFM_BTS_LOSSLESS;
  cpu.req.filter = PFM_FILTER_USER;
  cpu.req.format = PFM_FORMAT_FIXED;
  cpu.req.ring_bytes = 1 << 22;
  const int direct = ds.Attach(Task(1000, PFM_BTS_LOSSLESS, 1 << 16), 0, nullptr);
  const int fixed = ds.Attach(Task(1000, PFM_BTS_LOSSLESS, 1 << 22), 0, nullptr);
  const int comp = ds.Attach(compact, 0, nullptr);
  const int catch_all = ds.Attach(cpu, 0, nullptr);
  ASSERT_GT(direct, 0);
  ASSERT_GT(fixed, 0);
  ASSERT_GT(comp, 0);
  ASSERT_GT(catch_all, 0);
  ds.Switch(0, 1, TaskId{0, 0}, TaskId{1000, 1000}, false);
  Driver drv(&ds);
  // 20,000 branches: the direct ring (1024 records) fills and loses; the
  // others keep everything.
  for (uint64_t i = 0; i < 20000; ++i) drv.Branch(0, kUser + i % 4096, i, 2 + i);
  ds.Drain(0, 30000);
  std::vector<pfm_record> a = Records(ds, fixed, PFM_REC_BRANCH);
  std::vector<pfm_record> b = Records(ds, comp, PFM_REC_BRANCH);
  std::vector<pfm_record> c = Records(ds, catch_all, PFM_REC_BRANCH);
  ASSERT_EQ(a.size(), 20000u);
  ASSERT_EQ(b.size(), a.size());
  ASSERT_EQ(c.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].u.branch.to, i);
    ASSERT_EQ(memcmp(&a[i], &b[i], sizeof(a[i])), 0) << i;
    ASSERT_EQ(memcmp(&a[i], &c[i], sizeof(a[i])), 0) << i;
  }
  // The direct ring kept its first records, then counted the rest lost.
  ConsumerStats sd;
  ASSERT_EQ(ds.Stats(direct, &sd), 0);
  EXPECT_GT(sd.lost, 0u);
  EXPECT_EQ(sd.records + sd.lost, 20000u);
  std::vector<pfm_record> d = Records(ds, direct, PFM_REC_BRANCH);
  ASSERT_FALSE(d.empty());
  for (size_t i = 0; i < d.size(); ++i)
    ASSERT_EQ(memcmp(&d[i], &a[i], sizeof(a[i])), 0) << i;
}

// The data area of a consumer's ring, as a reader maps it.
std::vector<uint8_t> RingData(DsAllocator& ds, int id) {
  Ring* ring = ds.ring(id);
  const size_t bytes = PFM_RING_HEADER_BYTES + ring->config().data_bytes;
  void* m = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, ring->fd(), 0);
  EXPECT_NE(m, MAP_FAILED);
  const uint8_t* d = static_cast<const uint8_t*>(m) + PFM_RING_HEADER_BYTES;
  std::vector<uint8_t> out(d, d + ring->config().data_bytes);
  munmap(m, bytes);
  return out;
}

ConsumerParams CompactTask(pfm_bts_mode mode, uint64_t bytes) {
  ConsumerParams p = Task(1000, mode, bytes);
  p.req.format = PFM_FORMAT_COMPACT;
  p.req.flags = PFM_CONSUMER_SWITCHES;
  p.history_records = 3000;
  return p;
}

// One time slice of task 1000 on CPU 0: switched in, 3000 branches in short
// blocks inside 64 KiB of text with now and then a far call, switched out.
void RunSlice(DsAllocator* ds, uint64_t now) {
  ds->Switch(0, now, TaskId{0, 0}, TaskId{1000, 1000}, false);
  Driver drv(ds);
  uint64_t pc = kUser;
  for (uint64_t i = 0; i < 3000; ++i) {
    const uint64_t to = i % 97 == 0 ? 0x7f0000001000 + i
                                    : kUser + (i * 2654435761u) % 65536;
    drv.Branch(0, pc + 2 + i % 40, to, now + i);
    pc = to;
  }
  ds->Switch(0, now + 3000, TaskId{1000, 1000}, TaskId{0, 0}, true);
}

// Compact consumers that take the same records share one encoding of each
// batch (encode once, copy to every ring): consumers attached together get
// byte for byte what a lone compact consumer of the same stream gets, in
// both modes, with switches between drains.
TEST(DsAllocator, CompactConsumersSharingAnEncodingGetALoneConsumersBytes) {
  DsAllocator shared(1, DsLimits{}), alone(1, DsLimits{}),
      alone_history(1, DsLimits{});
  const int a = shared.Attach(CompactTask(PFM_BTS_LOSSLESS, 1 << 22), 0, nullptr);
  const int b = shared.Attach(CompactTask(PFM_BTS_LOSSLESS, 1 << 22), 0, nullptr);
  const int h = shared.Attach(CompactTask(PFM_BTS_HISTORY, 0), 0, nullptr);
  const int ref = alone.Attach(CompactTask(PFM_BTS_LOSSLESS, 1 << 22), 0, nullptr);
  const int ref_h =
      alone_history.Attach(CompactTask(PFM_BTS_HISTORY, 0), 0, nullptr);
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  ASSERT_GT(h, 0);
  ASSERT_GT(ref, 0);
  ASSERT_GT(ref_h, 0);
  for (int slice = 0; slice < 40; ++slice)
    for (DsAllocator* ds : {&shared, &alone, &alone_history})
      RunSlice(ds, 1 + 5000 * static_cast<uint64_t>(slice));
  const std::vector<uint8_t> want = RingData(alone, ref);
  EXPECT_EQ(RingData(shared, a), want);
  EXPECT_EQ(RingData(shared, b), want);
  EXPECT_EQ(RingData(shared, h), RingData(alone_history, ref_h));
  ConsumerStats st;
  ASSERT_EQ(shared.Stats(a, &st), 0);
  EXPECT_EQ(st.lost, 0u);
  EXPECT_EQ(st.records, 40u * (3000 + 2));
  ASSERT_EQ(shared.Stats(h, &st), 0);
  EXPECT_GT(st.overwritten, 0u);  // the history ring wrapped
}

// The fused BTS drain (compact consumers only: raw records encoded without
// being translated) gives every ring the bytes, counts and losses the
// translate-then-encode drain gives, which a fixed consumer attached beside
// them forces. The stream has predicted-bit flips, other flag bits, far
// jumps, irregular drain times, slices with kernel branches and soft-BTS gap
// markers (those batches cannot be fused), a kernel-only consumer (its
// filtered count), a one-thread consumer of another thread, and a small
// lossless ring nobody reads (it fills: the fused drain must give way).
TEST(DsAllocator, FusedDrainGivesTheBytesOfTheTranslatedRecords) {
  DsLimits lim;
  lim.task_bts_records = 700;  // drains of 700 records: a full and a part batch
  DsAllocator fused(1, lim), ref(1, lim);
  auto attach_all = [](DsAllocator& ds, std::vector<int>* ids) {
    ids->push_back(ds.Attach(CompactTask(PFM_BTS_LOSSLESS, 1 << 22), 0, nullptr));
    ids->push_back(ds.Attach(CompactTask(PFM_BTS_HISTORY, 0), 0, nullptr));
    ConsumerParams small = CompactTask(PFM_BTS_LOSSLESS, 0);
    small.req.ring_bytes = 2 * PFM_RING_CHUNK;  // read now and then: fills
    ids->push_back(ds.Attach(small, 0, nullptr));
    ConsumerParams kern = CompactTask(PFM_BTS_LOSSLESS, 1 << 20);
    kern.req.filter = PFM_FILTER_KERNEL;
    ids->push_back(ds.Attach(kern, 0, nullptr));
    ConsumerParams other = CompactTask(PFM_BTS_LOSSLESS, 1 << 20);
    other.req.tid = 1001;
    ids->push_back(ds.Attach(other, 0, nullptr));
    ConsumerParams all = CompactTask(PFM_BTS_LOSSLESS, 1 << 22);
    all.req.filter = PFM_FILTER_ALL;  // takes the kernel slices whole
    ids->push_back(ds.Attach(all, 0, nullptr));
  };
  std::vector<int> f, r;
  attach_all(fused, &f);
  attach_all(ref, &r);
  for (int id : f) ASSERT_GT(id, 0);
  for (int id : r) ASSERT_GT(id, 0);
  // The reference's fixed consumer: no fusing there.
  ASSERT_GT(ref.Attach(Task(1000, PFM_BTS_LOSSLESS, 1 << 24), 0, nullptr), 0);
  std::mt19937_64 rng(16);
  uint64_t now = 1;
  uint64_t to = kUser;
  for (int slice = 0; slice < 60; ++slice) {
    const bool kernel_slice = slice % 7 == 3;
    const uint64_t start = now;
    for (DsAllocator* ds : {&fused, &ref})
      ds->Switch(0, start, TaskId{0, 0}, TaskId{1000, 1000}, false);
    for (int k = 0; k < 2000; ++k) {
      pfm_bts_raw b;
      b.from = to + 2 + rng() % 60;
      b.to = rng() % 50 == 0 ? 0x7f0000000000 + rng() % (1 << 30)
                             : kUser + (rng() % 4096) * 4;
      b.flags = rng() % 8 ? PFM_BTS_RAW_PREDICTED : 0;
      if (rng() % 500 == 0) b.flags |= 1;
      if (kernel_slice && k % 300 == 5) b.from = kKernel + k;
      if (kernel_slice && k == 1500) b.flags = PFM_BTS_RAW_GAP;
      to = b.to;
      // Irregular drain times: sometimes many ns per record, sometimes
      // fewer ns than records.
      now += rng() % 4 == 0 ? rng() % 5000 : 0;
      for (DsAllocator* ds : {&fused, &ref})
        if (ds->Area(0)->WriteBts(b) == DsArea::kInterrupt) ds->Drain(0, now);
      ++now;
    }
    for (DsAllocator* ds : {&fused, &ref})
      ds->Switch(0, now, TaskId{1000, 1000}, TaskId{0, 0}, slice % 2 == 0);
    now += 100;
    {
      // Between slices the small ring's reader catches up: its LOST record goes in next.
      for (auto [ds, id] : {std::pair{&fused, f[2]}, std::pair{&ref, r[2]}}) {
        void* m = mmap(nullptr, PFM_RING_HEADER_BYTES, PROT_READ | PROT_WRITE,
                       MAP_SHARED, ds->ring(id)->fd(), 0);
        ASSERT_NE(m, MAP_FAILED);
        auto* hdr = static_cast<pfm_ring_header*>(m);
        __atomic_store_n(&hdr->tail, __atomic_load_n(&hdr->head, __ATOMIC_ACQUIRE),
                         __ATOMIC_RELEASE);
        munmap(m, PFM_RING_HEADER_BYTES);
      }
    }
  }
  EXPECT_GT(fused.fused_batches(), 60u);
  EXPECT_EQ(ref.fused_batches(), 0u);
  for (size_t i = 0; i < f.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(RingData(fused, f[i]), RingData(ref, r[i]));
    ConsumerStats a, b;
    ASSERT_EQ(fused.Stats(f[i], &a), 0);
    ASSERT_EQ(ref.Stats(r[i], &b), 0);
    EXPECT_EQ(a.records, b.records);
    EXPECT_EQ(a.lost, b.lost);
    EXPECT_EQ(a.overwritten, b.overwritten);
    EXPECT_EQ(a.filtered, b.filtered);
  }
  ConsumerStats st;
  ASSERT_EQ(fused.Stats(f[2], &st), 0);
  EXPECT_GT(st.lost, 0u);      // the small ring filled
  ASSERT_EQ(fused.Stats(f[3], &st), 0);
  EXPECT_GT(st.filtered, 0u);  // the kernel-only consumer saw user branches
  ExpectInvariant(fused);
}

// One run of the test below: the reader pauses up to `spin_max` iterations
// between reads.
void RunFusedDrainWithRacingReader(int spin_max) {
  DsLimits lim;
  lim.task_bts_records = 4096;  // 8 batches a drain
  DsAllocator ds(1, lim);
  ConsumerParams p = CompactTask(PFM_BTS_LOSSLESS, 2 * PFM_RING_CHUNK);
  p.req.flags = 0;
  const int id = ds.Attach(p, 0, nullptr);
  ASSERT_GT(id, 0);
  Ring* ring = ds.ring(id);
  const uint64_t data_bytes = ring->config().data_bytes;
  const size_t map_bytes = PFM_RING_HEADER_BYTES + data_bytes;
  void* m = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                 ring->fd(), 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* hdr = static_cast<pfm_ring_header*>(m);
  const uint8_t* data = static_cast<const uint8_t*>(m) + PFM_RING_HEADER_BYTES;
  std::atomic<bool> stop{false};
  std::vector<pfm_record> seen;
  bool malformed = false;
  auto consume = [&] {
    const uint64_t head = __atomic_load_n(&hdr->head, __ATOMIC_ACQUIRE);
    const uint64_t tail = __atomic_load_n(&hdr->tail, __ATOMIC_RELAXED);
    std::vector<pfm_record> got;
    if (DecodeRingSnapshot(data, data_bytes, PFM_FORMAT_COMPACT, tail, head, 0,
                           &got) != 0)
      malformed = true;
    seen.insert(seen.end(), got.begin(), got.end());
    __atomic_store_n(&hdr->tail, head, __ATOMIC_RELEASE);
  };
  std::thread reader([&] {
    std::mt19937_64 rng(7);
    while (!stop.load(std::memory_order_relaxed)) {
      consume();
      for (int spin = static_cast<int>(rng() % spin_max); spin > 0; --spin)
        asm volatile("" ::: "memory");
    }
  });
  constexpr uint64_t kBranches = 400000;
  ds.Switch(0, 1, TaskId{0, 0}, TaskId{1000, 1000}, false);
  uint64_t now = 2;
  for (uint64_t i = 0; i < kBranches; ++i) {
    const pfm_bts_raw b{kUser + 16 * i, kUser + 16 * i + 8,
                        i % 3 ? PFM_BTS_RAW_PREDICTED : 0};
    if (ds.Area(0)->WriteBts(b) == DsArea::kInterrupt) ds.Drain(0, now += 1000);
  }
  ds.Switch(0, now + 1000, TaskId{1000, 1000}, TaskId{0, 0}, false);
  stop = true;
  reader.join();
  consume();
  munmap(m, map_bytes);
  ASSERT_FALSE(malformed);
  EXPECT_GT(ds.fused_batches(), 0u);
  uint64_t next = 0, branches = 0, lost = 0, pending = 0;
  for (const pfm_record& r : seen) {
    if (r.type == PFM_REC_LOST) {
      pending += r.u.lost.count;
      lost += r.u.lost.count;
      continue;
    }
    if (r.type != PFM_REC_BRANCH) continue;
    const uint64_t index = (r.u.branch.from - kUser) / 16;
    ASSERT_EQ(index, next + pending) << "branch " << branches;
    next = index + 1;
    pending = 0;
    ++branches;
  }
  ConsumerStats st;
  ASSERT_EQ(ds.Stats(id, &st), 0);
  // Losses at the very end have no record after them to carry their LOST
  // record: the stats count them all.
  EXPECT_EQ(branches + st.lost, kBranches);
  EXPECT_LE(lost, st.lost);
  std::printf("fused drain with a racing reader (pauses < %d): %llu branches "
              "read, %llu lost, %llu fused batches\n",
              spin_max, static_cast<unsigned long long>(branches),
              static_cast<unsigned long long>(st.lost),
              static_cast<unsigned long long>(ds.fused_batches()));
}

// Losses in a fused drain: a small lossless compact ring whose reader, in
// another thread, consumes at its own pace while the drains run, so that a
// batch may find the ring full (its records go the translating way, the
// rest counted lost) and the next one, in the same drain, room again. The
// LOST record must come right where the losses are: every branch the reader
// decodes is the one after the previous branch, or after the previous
// branch and the LOST record's count.
TEST(DsAllocator, FusedDrainPutsLostRecordsWhereTheLossesAre) {
  // The race the test is after (room again between two batches of a drain)
  // needs the reader's pauses to be about a drain's length: several.
  for (int spin_max : {2000, 8000, 20000, 60000}) {
    SCOPED_TRACE(spin_max);
    RunFusedDrainWithRacingReader(spin_max);
  }
}

// A compact consumer attached later has its chunks end elsewhere: the
// shared encoding then carries reset markers, and every consumer still
// decodes to exactly the records a fixed consumer attached with it gets.
TEST(DsAllocator, LateCompactConsumerSharesTheEncodingAndDecodesTheSame) {
  DsAllocator ds(1, DsLimits{});
  ConsumerParams fixed = Task(1000, PFM_BTS_LOSSLESS, 1 << 24);
  fixed.req.flags = PFM_CONSUMER_SWITCHES;
  const int early = ds.Attach(CompactTask(PFM_BTS_LOSSLESS, 1 << 22), 0, nullptr);
  const int early_fixed = ds.Attach(fixed, 0, nullptr);
  ASSERT_GT(early, 0);
  ASSERT_GT(early_fixed, 0);
  int late = 0, late_fixed = 0, late_history = 0;
  for (int slice = 0; slice < 30; ++slice) {
    const uint64_t now = 1 + 5000 * static_cast<uint64_t>(slice);
    if (slice == 7) {
      late = ds.Attach(CompactTask(PFM_BTS_LOSSLESS, 1 << 22), now, nullptr);
      late_fixed = ds.Attach(fixed, now, nullptr);
      late_history = ds.Attach(CompactTask(PFM_BTS_HISTORY, 0), now, nullptr);
      ASSERT_GT(late, 0);
      ASSERT_GT(late_fixed, 0);
      ASSERT_GT(late_history, 0);
    }
    RunSlice(&ds, now);
  }
  auto expect_same = [&](int compact, int fixed_id, size_t keep) {
    std::vector<pfm_record> got = Records(ds, compact);
    std::vector<pfm_record> want = Records(ds, fixed_id);
    if (keep != 0) want.erase(want.begin(), want.end() - keep);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(memcmp(&got[i], &want[i], sizeof(pfm_record)), 0) << i;
  };
  expect_same(early, early_fixed, 0);
  expect_same(late, late_fixed, 0);
  expect_same(late_history, late_fixed, 3000);
  EXPECT_GT(Records(ds, late).size(), 60000u);
}

TEST(DsAllocator, CatchAllSeesEveryTaskWithSwitchesBetween) {
  DsAllocator ds(2, DsLimits{});
  ConsumerParams p;
  p.req.ctx_kind = PFM_CTX_CPU;
  p.req.cpu = 1;
  p.req.bts = PFM_BTS_LOSSLESS;
  p.req.filter = PFM_FILTER_ALL;
  p.req.format = PFM_FORMAT_FIXED;
  p.req.flags = PFM_CONSUMER_SWITCHES;
  p.req.ring_bytes = 1 << 20;
  const int cpu = ds.Attach(p, 0, nullptr);
  ASSERT_GT(cpu, 0);
  // Task 1001 is traced by its own consumer too: the catch-all still sees it.
  const int t = ds.Attach(Task(1001, PFM_BTS_LOSSLESS), 0, nullptr);
  ASSERT_GT(t, 0);
  Driver drv(&ds);
  uint64_t now = 10;
  TaskId prev{0, 0};
  for (int round = 0; round < 6; ++round) {
    TaskId next{1000 + round % 2, 1000 + round % 2};
    ds.Switch(1, now, prev, next, round % 2 == 0);
    for (int i = 0; i < 5; ++i) drv.Branch(1, kUser + next.pid, kUser, ++now);
    prev = next;
    now += 10;
  }
  ds.Switch(1, now, prev, TaskId{0, 0}, false);
  std::vector<pfm_record> recs = Records(ds, cpu);
  int branches[2] = {0, 0};
  int32_t running = 0;
  for (const pfm_record& r : recs) {
    if (r.type == PFM_REC_SWITCH_IN) running = r.pid;
    if (r.type == PFM_REC_SWITCH_OUT) {
      EXPECT_EQ(static_cast<int32_t>(r.pid), running);
      running = 0;
    }
    if (r.type == PFM_REC_BRANCH) {
      EXPECT_EQ(static_cast<int32_t>(r.pid), running) << "branch outside its task's switch-in";
      EXPECT_EQ(r.u.branch.from, kUser + r.pid);
      ++branches[r.pid - 1000];
    }
  }
  EXPECT_EQ(branches[0], 15);
  EXPECT_EQ(branches[1], 15);
  EXPECT_EQ(Records(ds, t, PFM_REC_BRANCH).size(), 15u);
  EXPECT_EQ(Records(ds, cpu, PFM_REC_SWITCH_IN).size(), 6u);
  EXPECT_EQ(Records(ds, cpu, PFM_REC_SWITCH_OUT).size(), 6u);
  ExpectInvariant(ds);
}

TEST(DsAllocator, LosslessCountsLossesWhenReaderFallsBehind) {
  DsLimits lim;
  lim.task_bts_records = 64;
  DsAllocator ds(1, lim);
  const int id = ds.Attach(Task(1000, PFM_BTS_LOSSLESS, 8192), 0, nullptr);
  ASSERT_GT(id, 0);
  Driver drv(&ds);
  ds.Switch(0, 1, TaskId{0, 0}, TaskId{1000, 1000}, false);
  for (int i = 0; i < 1000; ++i) drv.Branch(0, kUser + i, kUser, 2 + i);
  ds.Drain(0, 2000);
  ConsumerStats st;
  ASSERT_EQ(ds.Stats(id, &st), 0);
  EXPECT_GT(st.lost, 0u);
  // Nothing silently disappears: written + lost accounts for every branch.
  const size_t written = Records(ds, id, PFM_REC_BRANCH).size();
  EXPECT_EQ(written + st.lost, 1000u);
}

TEST(DsAllocator, BlockConsumerHoldsTaskInsteadOfLosing) {
  DsLimits lim;
  lim.task_bts_records = 64;
  lim.task_pebs_records = 8;
  DsAllocator ds(1, lim);
  ConsumerParams p = Task(1000, PFM_BTS_LOSSLESS, 64 << 10);
  p.req.flags = PFM_CONSUMER_BLOCK;
  ErrorDetail d;
  const int id = ds.Attach(p, 0, &d);
  ASSERT_GT(id, 0) << d.message;
  Ring* ring = ds.ring(id);
  void* map = mmap(nullptr, PFM_RING_HEADER_BYTES, PROT_READ | PROT_WRITE,
                   MAP_SHARED, ring->fd(), 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* hdr = static_cast<pfm_ring_header*>(map);
  Driver drv(&ds);
  ds.Switch(0, 1, TaskId{0, 0}, TaskId{1000, 1000}, false);
  uint64_t written = 0, held_times = 0;
  // The driver obeys Held: it stops writing when held; the "reader" then
  // frees the ring (tail = head) and the task runs again.
  for (int step = 0; step < 200; ++step) {
    if (ds.Held(TaskId{1000, 1000})) {
      ++held_times;
      __atomic_store_n(&hdr->tail, __atomic_load_n(&hdr->head, __ATOMIC_ACQUIRE),
                       __ATOMIC_RELEASE);
      continue;
    }
    for (int i = 0; i < 64; ++i, ++written) drv.Branch(0, kUser + written, kUser, 10 + written);
  }
  ds.Drain(0, 100000);
  ConsumerStats st;
  ASSERT_EQ(ds.Stats(id, &st), 0);
  EXPECT_GT(held_times, 0u);
  EXPECT_EQ(st.lost, 0u);
  EXPECT_EQ(st.records, written);
  munmap(map, PFM_RING_HEADER_BYTES);
}

TEST(DsAllocator, RefusesBlockRingTooSmallForOneDrain) {
  DsAllocator ds(1, DsLimits{});
  ConsumerParams p = Task(1000, PFM_BTS_LOSSLESS, 8192);
  p.req.flags = PFM_CONSUMER_BLOCK;
  ErrorDetail d;
  EXPECT_EQ(ds.Attach(p, 0, &d), -EINVAL);
  EXPECT_NE(std::string(d.message).find("block ring needs at least"), std::string::npos);
  EXPECT_EQ(ds.ContextBytes(1000, -1), 0u) << "nothing half-allocated";
}

TEST(DsAllocator, PebsRoutedToTheEventThatHeldTheCounter) {
  DsAllocator ds(1, DsLimits{});
  FixedRouter router;
  router.owner[0] = 7;
  router.owner[1] = 9;
  ds.set_pebs_router(&router);
  ConsumerParams a = Task(1000, PFM_BTS_LOSSLESS);
  a.pebs_request = 7;
  a.pebs_period = 1000;
  ConsumerParams b = Task(1000, PFM_BTS_OFF);
  b.pebs_request = 9;
  b.pebs_period = 5000;
  const int ia = ds.Attach(a, 0, nullptr);
  const int ib = ds.Attach(b, 0, nullptr);
  ASSERT_GT(ia, 0);
  ASSERT_GT(ib, 0);
  TraceConfig tc = ds.Config(0, TaskId{1000, 1000});
  EXPECT_EQ(tc.pebs_counters, 3u);
  EXPECT_EQ(tc.pebs_reset[0], 1000u);
  EXPECT_EQ(tc.pebs_reset[1], 5000u);
  Driver drv(&ds);
  ds.Switch(0, 100, TaskId{0, 0}, TaskId{1000, 1000}, false);
  for (int i = 0; i < 10; ++i) {
    drv.Branch(0, kUser + i, kUser, 0);
    drv.Pebs(0, 0x500000 + i, i % 2 ? 2 : 1, 100 + 10 * i + 5);
  }
  ds.Drain(0, 300);
  std::vector<pfm_record> ra = Records(ds, ia), rb = Records(ds, ib);
  int pa = 0;
  for (size_t k = 0; k < ra.size(); ++k) {
    if (k) {
      EXPECT_GE(ra[k].time, ra[k - 1].time) << "BTS and PEBS interleave by time";
    }
    if (ra[k].type == PFM_REC_PEBS) {
      EXPECT_EQ(ra[k].u.pebs.event, 7u);
      ++pa;
    }
  }
  EXPECT_EQ(pa, 5);
  ASSERT_EQ(rb.size(), 5u);
  for (const pfm_record& r : rb) {
    EXPECT_EQ(r.type, PFM_REC_PEBS);
    EXPECT_EQ(r.u.pebs.event, 9u);
    EXPECT_EQ(r.u.pebs.counter, 1u);
  }
}

TEST(DsAllocator, AttachAndDetachWhileRecordsFlow) {
  DsLimits lim;
  lim.task_bts_records = 32;
  DsAllocator ds(2, lim);
  Driver drv(&ds);
  ds.Switch(0, 1, TaskId{0, 0}, TaskId{1000, 1000}, false);
  std::vector<int> ids;
  uint64_t now = 2;
  for (int round = 0; round < 50; ++round) {
    if (round % 3 == 0) {
      const int id = ds.Attach(Task(1000, PFM_BTS_LOSSLESS, 64 << 10), now, nullptr);
      ASSERT_GT(id, 0);
      ids.push_back(id);
    }
    if (round % 5 == 4 && !ids.empty()) {
      ds.Detach(ids.front(), now);
      ds.Detach(ids.front(), now);  // twice is safe
      ids.erase(ids.begin());
    }
    for (int i = 0; i < 40; ++i) drv.Branch(0, kUser + i, kUser, ++now);
    ExpectInvariant(ds);
  }
  for (int id : ids) ds.Detach(id, now);
  EXPECT_EQ(ds.ContextBytes(1000, -1), 0u);
  // With no consumer left, the task's writes go nowhere harmful.
  for (int i = 0; i < 1000; ++i) drv.Branch(0, kUser, kUser, ++now);
  ExpectInvariant(ds);
}

TEST(DsAllocator, ExitEndsRingsWithRecordsReadable) {
  DsAllocator ds(1, DsLimits{});
  const int id = ds.Attach(Task(1000, PFM_BTS_LOSSLESS), 0, nullptr);
  ConsumerParams hp = Task(1000, PFM_BTS_HISTORY);
  hp.history_records = 4;
  const int hist = ds.Attach(hp, 0, nullptr);
  Driver drv(&ds);
  ds.Switch(0, 1, TaskId{0, 0}, TaskId{1000, 1000}, false);
  for (int i = 0; i < 10; ++i) drv.Branch(0, kUser + i, kUser, 2 + i);
  ds.Switch(0, 20, TaskId{1000, 1000}, TaskId{0, 0}, false);
  ds.TaskExit(TaskId{1000, 1000}, 21, 0);
  std::vector<pfm_record> r = Records(ds, id);
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r.back().type, PFM_REC_EXIT);
  EXPECT_EQ(Records(ds, id, PFM_REC_BRANCH).size(), 10u);
  // The history keeps its newest branches: the exit takes none of its slots.
  std::vector<pfm_record> h = Records(ds, hist);
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h.back().type, PFM_REC_BRANCH);
  EXPECT_EQ(h.back().u.branch.from, kUser + 9);
  ErrorDetail d;
  EXPECT_EQ(ds.Attach(Task(1000, PFM_BTS_LOSSLESS), 22, &d), -ESRCH);
}

bool RingEnded(DsAllocator& ds, int id) {
  void* m = mmap(nullptr, PFM_RING_HEADER_BYTES, PROT_READ, MAP_SHARED, ds.ring(id)->fd(), 0);
  if (m == MAP_FAILED) return false;
  const bool ended =
      (static_cast<const pfm_ring_header*>(m)->flags & PFM_RING_F_ENDED) != 0;
  munmap(m, PFM_RING_HEADER_BYTES);
  return ended;
}

// perf's -t TID: a consumer of one thread of a task context gets that
// thread's branches, switches and exit, nothing of its siblings', and its
// ring ends when the thread exits; the whole-process consumer goes on. Both
// formats (the compact one shares the whole-batch encoding path).
TEST(DsAllocator, OneThreadConsumerGetsOnlyThatThreadAndEndsWithIt) {
  DsAllocator ds(1, DsLimits{});
  const int whole = ds.Attach(Task(1000, PFM_BTS_LOSSLESS), 0, nullptr);
  ConsumerParams one = Task(1000, PFM_BTS_LOSSLESS);
  one.req.tid = 1001;
  one.req.flags |= PFM_CONSUMER_SWITCHES;
  const int fixed = ds.Attach(one, 0, nullptr);
  one.req.format = PFM_FORMAT_COMPACT;
  const int compact = ds.Attach(one, 0, nullptr);
  ASSERT_GT(whole, 0);
  ASSERT_GT(fixed, 0);
  ASSERT_GT(compact, 0);
  ds.TaskCreated(TaskId{1000, 1000}, TaskId{1000, 1001});
  const TaskId main{1000, 1000}, worker{1000, 1001};
  uint64_t now = 10;
  auto branches = [&](TaskId t, int n, uint64_t from) {
    ds.Switch(0, now++, TaskId{0, 0}, t, false);
    for (int i = 0; i < n; ++i)
      ASSERT_NE(ds.TaskArea(1000)->WriteBts(pfm_bts_raw{from + i, kUser, 0}), DsArea::kDropped);
    ds.DrainTask(t, 0, now++);
    ds.Switch(0, now++, t, TaskId{0, 0}, false);
  };
  branches(main, 5, kUser + 0x100);
  branches(worker, 7, kUser + 0x200);
  branches(main, 3, kUser + 0x300);
  ds.TaskExit(worker, now++, 0);
  EXPECT_TRUE(RingEnded(ds, fixed));
  EXPECT_TRUE(RingEnded(ds, compact));
  EXPECT_FALSE(RingEnded(ds, whole));
  branches(main, 4, kUser + 0x400);
  for (int id : {fixed, compact}) {
    SCOPED_TRACE(id == fixed ? "fixed" : "compact");
    std::vector<pfm_record> r = Records(ds, id);
    for (const pfm_record& rec : r) EXPECT_EQ(rec.tid, 1001u) << rec.type;
    std::vector<pfm_record> b = Records(ds, id, PFM_REC_BRANCH);
    ASSERT_EQ(b.size(), 7u);
    for (int i = 0; i < 7; ++i) EXPECT_EQ(b[i].u.branch.from, kUser + 0x200 + i);
    EXPECT_EQ(Records(ds, id, PFM_REC_SWITCH_IN).size(), 1u);
    EXPECT_EQ(Records(ds, id, PFM_REC_SWITCH_OUT).size(), 1u);
    ASSERT_FALSE(r.empty());
    EXPECT_EQ(r.back().type, PFM_REC_EXIT);
  }
  EXPECT_EQ(Records(ds, whole, PFM_REC_BRANCH).size(), 5u + 7u + 3u + 4u);
  EXPECT_EQ(Records(ds, whole, PFM_REC_EXIT).size(), 1u);
  ds.TaskExit(main, now++, 0);
  EXPECT_TRUE(RingEnded(ds, whole));
  ExpectInvariant(ds);
}

// A child process an inherited trace follows shares its group's context
// while it lives; once its last thread is gone its pid is free, and a new
// process there (perhaps another user's) is outside the group: its
// consumers get a context of their own, never the group's records.
TEST(DsAllocator, AChildProcessLeavesItsGroupWithItsLastThread) {
  DsAllocator ds(1, DsLimits{});
  const int group = ds.Attach(Task(1000, PFM_BTS_LOSSLESS), 0, nullptr);
  ASSERT_GT(group, 0);
  EXPECT_EQ(ds.LiveTaskContextOfConsumer(group), 1000);
  const TaskId root{1000, 1000}, child{1002, 1002}, child_thread{1002, 1003},
      other_child{1004, 1004};
  ds.TaskCreated(root, child);
  ds.TaskCreated(child, child_thread);
  ds.TaskCreated(root, other_child);
  EXPECT_EQ(ds.TaskContextOf(1002), 1000);
  EXPECT_EQ(ds.TaskContextOf(1004), 1000);
  uint64_t now = 10;
  ds.TaskExit(child_thread, now++, 0);
  EXPECT_EQ(ds.TaskContextOf(1002), 1000) << "the child process still has a thread";
  ds.TaskExit(child, now++, 0);
  EXPECT_EQ(ds.TaskContextOf(1002), 1002) << "pid 1002 still maps to the group";
  EXPECT_EQ(ds.TaskContextOf(1004), 1000);
  // A new process at 1002: its own context.
  const int stranger = ds.Attach(Task(1002, PFM_BTS_LOSSLESS), now, nullptr);
  ASSERT_GT(stranger, 0);
  EXPECT_EQ(ds.LiveTaskContextOfConsumer(stranger), 1002);
  EXPECT_EQ(ds.LiveTaskContextOfConsumer(group), 1000);
  // A detached child leaves the same way.
  ds.TaskDetached(other_child);
  EXPECT_EQ(ds.TaskContextOf(1004), 1004);
  // The group's end: its context is no longer live for its consumers.
  ds.TaskExit(root, now++, 0);
  EXPECT_EQ(ds.LiveTaskContextOfConsumer(group), 0);
  EXPECT_EQ(ds.LiveTaskContextOfConsumer(stranger), 1002);
  EXPECT_EQ(ds.LiveTaskContextOfConsumer(9999), 0);
  ExpectInvariant(ds);
}

TEST(DsAllocator, RefusesBadRequestsNamingTheField) {
  DsAllocator ds(2, DsLimits{});
  ErrorDetail d;
  ConsumerParams p = Task(1000, PFM_BTS_LOSSLESS);
  p.req.filter = 9;
  EXPECT_EQ(ds.Attach(p, 0, &d), -EINVAL);
  EXPECT_NE(std::string(d.message).find("filter"), std::string::npos);
  p = Task(1000, PFM_BTS_LOSSLESS);
  p.req.ctx_kind = PFM_CTX_CPU;
  p.req.cpu = 5;
  EXPECT_EQ(ds.Attach(p, 0, &d), -EINVAL);
  EXPECT_NE(std::string(d.message).find("cpu 5"), std::string::npos);
  p = Task(1000, PFM_BTS_HISTORY);
  p.history_records = 0;
  EXPECT_EQ(ds.Attach(p, 0, &d), -EINVAL);
  p = Task(1000, PFM_BTS_LOSSLESS);
  p.req.tid = -3;
  EXPECT_EQ(ds.Attach(p, 0, &d), -EINVAL);
  EXPECT_NE(std::string(d.message).find("tid -3"), std::string::npos) << d.message;
  p = Task(1000, PFM_BTS_LOSSLESS);
  p.req.ctx_kind = PFM_CTX_CPU;
  p.req.cpu = 0;
  p.req.tid = 1001;
  EXPECT_EQ(ds.Attach(p, 0, &d), -EINVAL);
  ExpectInvariant(ds);
}

TEST(DsAllocator, RefusesConsumerBeyondContextLimitNamingHolders) {
  DsLimits lim;
  lim.max_consumers_per_context = 2;
  DsAllocator ds(1, lim);
  ConsumerParams p = Task(1000, PFM_BTS_LOSSLESS, 8192);
  p.session = 4;
  ASSERT_GT(ds.Attach(p, 0, nullptr), 0);
  p.session = 5;
  ASSERT_GT(ds.Attach(p, 0, nullptr), 0);
  ErrorDetail d;
  EXPECT_EQ(ds.Attach(p, 0, &d), -EBUSY);
  EXPECT_NE(std::string(d.message).find("sessions 4, 5"), std::string::npos) << d.message;
}

TEST(DsAllocator, SwitchRecordsGoToTheTaskThatSwitchedNotTheInstalledOne) {
  // Host tracers of two tasks report on the same CPU number, interleaved.
  DsAllocator ds(1, DsLimits{});
  ConsumerParams a = Task(1000, PFM_BTS_LOSSLESS);
  a.req.flags = PFM_CONSUMER_SWITCHES;
  ConsumerParams b = Task(2000, PFM_BTS_LOSSLESS);
  b.req.flags = PFM_CONSUMER_SWITCHES;
  const int ia = ds.Attach(a, 0, nullptr), ib = ds.Attach(b, 0, nullptr);
  ds.Switch(0, 10, TaskId{0, 0}, TaskId{1000, 1000}, false);
  ds.Switch(0, 20, TaskId{0, 0}, TaskId{2000, 2000}, false);
  ds.Switch(0, 30, TaskId{1000, 1000}, TaskId{0, 0}, false);
  for (const pfm_record& r : Records(ds, ia)) EXPECT_EQ(r.pid, 1000u);
  for (const pfm_record& r : Records(ds, ib)) EXPECT_EQ(r.pid, 2000u);
  EXPECT_EQ(Records(ds, ia, PFM_REC_SWITCH_OUT).size(), 1u);
  EXPECT_EQ(Records(ds, ib, PFM_REC_SWITCH_OUT).size(), 0u);
  ExpectInvariant(ds);
}

TEST(DsAllocator, BranchTimesAreSpreadEvenlyOverTheDrainWindow) {
  DsAllocator ds(1, DsLimits{});
  const int id = ds.Attach(Task(1000, PFM_BTS_LOSSLESS), 0, nullptr);
  Driver drv(&ds);
  ds.Switch(0, 100, TaskId{0, 0}, TaskId{1000, 1000}, false);
  for (int i = 0; i < 3; ++i) drv.Branch(0, kUser + i, kUser, 0);
  ds.Drain(0, 110);  // window (100, 110]: floor(10 * k / 3) for k = 1..3
  for (int i = 0; i < 7; ++i) drv.Branch(0, kUser + i, kUser, 0);
  ds.Drain(0, 1000110);  // (110, 1000110]: 7 records, uneven steps
  std::vector<pfm_record> b = Records(ds, id, PFM_REC_BRANCH);
  ASSERT_EQ(b.size(), 10u);
  EXPECT_EQ(b[0].time, 103u);
  EXPECT_EQ(b[1].time, 106u);
  EXPECT_EQ(b[2].time, 110u);
  for (int k = 1; k <= 7; ++k)
    EXPECT_EQ(b[2 + k].time, 110u + 1000000u * k / 7) << k;
}

TEST(DsAllocator, ResizeWritesResizedNotice) {
  DsAllocator ds(1, DsLimits{});
  const int id = ds.Attach(Task(1000, PFM_BTS_LOSSLESS), 0, nullptr);
  const uint64_t before = ds.ContextBytes(1000, -1);
  const int64_t after = ds.ResizeTaskContext(1000, 256, 5, nullptr);
  ASSERT_GT(after, 0);
  EXPECT_LT(static_cast<uint64_t>(after), before);
  std::vector<pfm_record> r = Records(ds, id, PFM_REC_RESIZED);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].u.resized.old_bytes, before);
  EXPECT_EQ(r[0].u.resized.new_bytes, static_cast<uint64_t>(after));
}

}  // namespace
}  // namespace pfm
