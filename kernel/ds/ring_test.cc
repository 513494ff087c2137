#include "kernel/ds/ring.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernel/uapi/compact_codec.h"
#include "kernel/uapi/ring_format.h"

namespace pfm {
namespace {

// A minimal consumer on its own mapping of the memfd, as another process
// would have (the real one is libpfm-bts's RingReader, which kernel/ must not
// depend on).
class TestReader {
 public:
  explicit TestReader(int fd) {
    struct stat sb;
    EXPECT_EQ(fstat(fd, &sb), 0);
    bytes_ = static_cast<size_t>(sb.st_size);
    void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(m, MAP_FAILED);
    map_ = static_cast<uint8_t*>(m);
    hdr_ = reinterpret_cast<pfm_ring_header*>(map_);
    data_ = map_ + PFM_RING_HEADER_BYTES;
    cur_.pos = __atomic_load_n(&hdr_->tail, __ATOMIC_ACQUIRE);
  }
  ~TestReader() { munmap(map_, bytes_); }

  const pfm_ring_header& hdr() const { return *hdr_; }

  // Decodes up to `max` records; lossless: publishes tail (in history mode
  // the writer owns it).
  std::vector<pfm_record> Consume(size_t max = SIZE_MAX) {
    std::vector<pfm_record> out;
    const uint64_t head = __atomic_load_n(&hdr_->head, __ATOMIC_ACQUIRE);
    pfm_record r;
    uint64_t at;
    while (out.size() < max) {
      const int n = cur_.Next(data_, hdr_->data_bytes,
                              static_cast<pfm_format>(hdr_->format), head, &r,
                              &at);
      EXPECT_GE(n, 0);
      if (n <= 0) break;
      out.push_back(r);
    }
    if (hdr_->mode == PFM_RING_LOSSLESS)
      __atomic_store_n(&hdr_->tail, cur_.pos, __ATOMIC_RELEASE);
    return out;
  }

 private:
  size_t bytes_ = 0;
  uint8_t* map_ = nullptr;
  pfm_ring_header* hdr_ = nullptr;
  uint8_t* data_ = nullptr;
  RingCursor cur_;
};

pfm_record Branch(uint64_t id) {
  pfm_record r;
  memset(&r, 0, sizeof(r));
  r.type = PFM_REC_BRANCH;
  r.cpu = 1;
  r.pid = 77;
  r.tid = 78;
  r.time = 1000 + 250 * id;
  r.misc = id % 7 == 0 ? 0 : PFM_MISC_BRANCH_PREDICTED;
  r.u.branch.from = 0x401000 + (id * 37) % 4096;
  r.u.branch.to = id;  // the record's identity, for order checks
  r.u.branch.flags = id % 7 == 0 ? 0 : PFM_BTS_RAW_PREDICTED;
  return r;
}

// A mixed stream: mostly branches, some big (escaped) PEBS records and
// switches, so compact chunks end at varied offsets with PADs.
pfm_record Mixed(uint64_t id) {
  pfm_record r = Branch(id);
  if (id % 11 == 5) {
    r.type = PFM_REC_PEBS;
    r.misc = 0;
    r.u.pebs = {~id, ~id, ~id, ~id, UINT32_MAX, static_cast<uint32_t>(id)};
    r.cpu = static_cast<uint16_t>(id);
  } else if (id % 13 == 6) {
    r.type = PFM_REC_SWITCH_OUT;
    r.misc = PFM_MISC_SWITCH_PREEMPT;
    r.u.sw = {static_cast<uint32_t>(id), 9};
  }
  return r;
}

bool Same(const pfm_record& a, const pfm_record& b) {
  return memcmp(&a, &b, sizeof(a)) == 0;
}

std::unique_ptr<Ring> MakeRing(const RingConfig& c) {
  std::unique_ptr<Ring> ring;
  ErrorDetail d;
  EXPECT_EQ(Ring::Create(c, "ring-test", &ring, &d), 0) << d.message;
  return ring;
}

RingConfig History(pfm_format f, uint64_t n) {
  RingConfig c;
  c.mode = PFM_RING_HISTORY;
  c.format = f;
  c.history_records = n;
  c.data_bytes = HistoryRingBytes(n);
  return c;
}

RingConfig Lossless(pfm_format f, uint64_t bytes, bool block = false) {
  RingConfig c;
  c.mode = PFM_RING_LOSSLESS;
  c.format = f;
  c.data_bytes = bytes;
  c.block = block;
  return c;
}

TEST(Ring, HistoryRingBytesIsAPowerOfTwoWithTwoSpareChunks) {
  EXPECT_EQ(HistoryRingBytes(0), 2u * PFM_RING_CHUNK);
  EXPECT_EQ(HistoryRingBytes(1), 4u * PFM_RING_CHUNK);
  EXPECT_EQ(HistoryRingBytes(128), 4u * PFM_RING_CHUNK);  // 8192 + 8192
  EXPECT_EQ(HistoryRingBytes(129), 8u * PFM_RING_CHUNK);
  EXPECT_GT(HistoryRingBytes(UINT64_MAX), kMaxRingDataBytes);
}

TEST(Ring, InitialisesTheUapiHeaderAndSealsTheSize) {
  auto ring = MakeRing(History(PFM_FORMAT_COMPACT, 100));
  ASSERT_NE(ring, nullptr);
  TestReader rd(ring->fd());
  const pfm_ring_header& h = rd.hdr();
  EXPECT_EQ(h.magic, PFM_RING_MAGIC);
  EXPECT_EQ(h.version, PFM_UAPI_VERSION);
  EXPECT_EQ(h.format, PFM_FORMAT_COMPACT);
  EXPECT_EQ(h.mode, PFM_RING_HISTORY);
  EXPECT_EQ(h.header_bytes, 4096u);
  EXPECT_EQ(h.chunk_bytes, static_cast<uint32_t>(PFM_RING_CHUNK));
  EXPECT_EQ(h.data_bytes, HistoryRingBytes(100));
  EXPECT_EQ(h.history_records, 100u);
  EXPECT_EQ(h.flags, 0u);
  EXPECT_EQ(ring->mapped_bytes(), 4096 + HistoryRingBytes(100));
  const int seals = fcntl(ring->fd(), F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW),
            F_SEAL_SHRINK | F_SEAL_GROW);
  EXPECT_NE(ftruncate(ring->fd(), 4096), 0);
}

TEST(Ring, BlockFlagIsPublished) {
  auto ring = MakeRing(Lossless(PFM_FORMAT_FIXED, 8192, true));
  TestReader rd(ring->fd());
  EXPECT_EQ(rd.hdr().flags, static_cast<uint32_t>(PFM_RING_F_BLOCK));
  EXPECT_EQ(rd.hdr().history_records, 0u);
}

TEST(Ring, RefusesBadConfigsWithEinval) {
  struct Case {
    RingConfig c;
    const char* mentions;
  };
  std::vector<Case> cases;
  cases.push_back({Lossless(PFM_FORMAT_FIXED, 12288), "12288"});  // not 2^n
  cases.push_back({Lossless(PFM_FORMAT_FIXED, 4096), "4096"});    // 1 chunk
  cases.push_back({Lossless(PFM_FORMAT_FIXED, 2ull << 30), "2147483648"});
  cases.push_back({Lossless(PFM_FORMAT_FIXED, 0), "data_bytes 0"});
  RingConfig bad_format = Lossless(PFM_FORMAT_FIXED, 8192);
  bad_format.format = static_cast<pfm_format>(3);  // in the enum's range
  cases.push_back({bad_format, "format 3"});
  RingConfig bad_mode = Lossless(PFM_FORMAT_FIXED, 8192);
  bad_mode.mode = static_cast<pfm_ring_mode>(0);
  cases.push_back({bad_mode, "mode 0"});
  RingConfig no_records = History(PFM_FORMAT_FIXED, 10);
  no_records.history_records = 0;
  cases.push_back({no_records, "history_records 0"});
  RingConfig too_small = History(PFM_FORMAT_FIXED, 1000);
  too_small.data_bytes /= 2;
  cases.push_back({too_small, "1000 records"});
  RingConfig block_history = History(PFM_FORMAT_FIXED, 10);
  block_history.block = true;
  cases.push_back({block_history, "block"});
  for (const Case& k : cases) {
    std::unique_ptr<Ring> ring;
    ErrorDetail d;
    EXPECT_EQ(Ring::Create(k.c, "bad", &ring, &d), -EINVAL) << k.mentions;
    EXPECT_EQ(ring, nullptr);
    EXPECT_NE(std::string(d.message).find(k.mentions), std::string::npos)
        << d.message;
  }
}

class EachFormat : public ::testing::TestWithParam<pfm_format> {};

TEST_P(EachFormat, HistoryKeepsNewestRecordsInOrderAcrossWraps) {
  constexpr uint64_t kKeep = 300;
  auto ring = MakeRing(History(GetParam(), kKeep));
  const uint64_t total = 40 * ring->config().data_bytes / 64;  // many wraps
  for (uint64_t id = 0; id < total; ++id)
    ASSERT_EQ(ring->Write(Mixed(id)), Ring::kWritten);
  std::vector<pfm_record> snap;
  ring->Snapshot(&snap);
  ASSERT_EQ(snap.size(), kKeep);
  for (uint64_t i = 0; i < kKeep; ++i) {
    pfm_record want = Mixed(total - kKeep + i);
    NormalizeRecord(&want);
    ASSERT_TRUE(Same(snap[i], want)) << "snapshot index " << i;
  }
  EXPECT_EQ(ring->records(), total);
  EXPECT_EQ(ring->lost(), 0u);
  TestReader rd(ring->fd());
  EXPECT_EQ(rd.hdr().records, total);
  EXPECT_EQ(rd.hdr().overwritten, ring->overwritten());
  EXPECT_EQ(rd.hdr().tail % PFM_RING_CHUNK, 0u);
}

TEST_P(EachFormat, HistoryOverwrittenPlusLiveIsEverythingWritten) {
  auto ring = MakeRing(History(GetParam(), 50));
  std::vector<pfm_record> live;
  for (uint64_t id = 0; id < 5000; ++id) {
    ASSERT_EQ(ring->Write(Mixed(id)), Ring::kWritten);
    if (id % 97 != 0) continue;
    // Every record in [tail, head) is intact and the newest ones.
    TestReader rd(ring->fd());
    live = rd.Consume();
    ASSERT_EQ(ring->overwritten() + live.size(), id + 1) << "after " << id;
    ASSERT_GE(live.size(), std::min<uint64_t>(id + 1, 50));
    ASSERT_EQ(live.back().time, Mixed(id).time);
  }
}

TEST(Ring, FixedHistoryDropsWholeChunksOfSixtyFourRecords) {
  auto ring = MakeRing(History(PFM_FORMAT_FIXED, 64));  // 16 KiB, 256 slots
  ASSERT_EQ(ring->config().data_bytes, 16384u);
  for (uint64_t id = 0; id < 256; ++id) ring->Write(Branch(id));
  EXPECT_EQ(ring->overwritten(), 0u);
  ring->Write(Branch(256));
  EXPECT_EQ(ring->overwritten(), 64u);  // one whole chunk
  for (uint64_t id = 257; id < 1000; ++id) ring->Write(Branch(id));
  // head = 64000 bytes; tail = the lowest chunk start >= head - 16384.
  EXPECT_EQ(ring->overwritten(), (64000 - 16384 + 4095) / 4096 * 64);
}

TEST_P(EachFormat, LosslessCountsLossThenWritesLostRecordBeforeTheNext) {
  auto ring = MakeRing(Lossless(GetParam(), 8192));
  TestReader rd(ring->fd());
  uint64_t id = 0;
  while (ring->Write(Branch(id)) == Ring::kWritten) ++id;
  const uint64_t written = id;
  ASSERT_GT(written, 100u);
  for (int i = 1; i < 5; ++i) EXPECT_EQ(ring->Write(Branch(++id)), Ring::kLost);
  EXPECT_EQ(ring->lost(), 5u);
  EXPECT_EQ(rd.hdr().lost, 5u);

  // In compact, a LOST record may have fitted where the record did not.
  const std::vector<pfm_record> got = rd.Consume();
  ASSERT_GE(got.size(), written);
  for (uint64_t i = 0; i < written; ++i)
    ASSERT_EQ(got[i].u.branch.to, i) << i;
  uint64_t reported = 0;
  for (uint64_t i = written; i < got.size(); ++i) {
    ASSERT_EQ(got[i].type, PFM_REC_LOST);
    reported += got[i].u.lost.count;
  }
  EXPECT_EQ(ring->records(), got.size());
  if (GetParam() == PFM_FORMAT_FIXED) {
    EXPECT_EQ(got.size(), written);
  }

  const pfm_record next = Branch(++id);
  EXPECT_EQ(ring->Write(next), Ring::kWritten);
  const std::vector<pfm_record> after = rd.Consume();
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].type, PFM_REC_LOST);
  EXPECT_EQ(after[0].u.lost.count, 5u - reported);
  EXPECT_EQ(after[0].time, next.time);
  EXPECT_EQ(after[0].pid, next.pid);
  EXPECT_EQ(after[0].tid, next.tid);
  EXPECT_EQ(after[0].cpu, next.cpu);
  EXPECT_TRUE(Same(after[1], next));
  EXPECT_EQ(ring->records(), got.size() + 2);  // LOST records count
}

TEST_P(EachFormat, BlockModeRefusesWithoutCountingThenWritesAfterConsume) {
  auto ring = MakeRing(Lossless(GetParam(), 8192, /*block=*/true));
  TestReader rd(ring->fd());
  uint64_t id = 0;
  Ring::Result r;
  while ((r = ring->Write(Branch(id))) == Ring::kWritten) ++id;
  const uint64_t written = id;
  EXPECT_EQ(r, Ring::kWouldBlock);
  EXPECT_EQ(ring->Write(Branch(id)), Ring::kWouldBlock);
  EXPECT_EQ(ring->Write(Branch(id)), Ring::kWouldBlock);
  EXPECT_EQ(ring->lost(), 0u);
  EXPECT_EQ(ring->records(), written);

  EXPECT_EQ(rd.Consume(PFM_RING_CHUNK / 64).size(), PFM_RING_CHUNK / 64);
  // The tail may now be mid-chunk (compact): make sure a whole chunk is free.
  rd.Consume();
  ASSERT_EQ(ring->Write(Branch(id)), Ring::kWritten);
  const std::vector<pfm_record> got = rd.Consume();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].type, PFM_REC_BRANCH);  // no LOST record: nothing lost
  EXPECT_EQ(got[0].u.branch.to, id);
}

// A random producer against a random consumer: every record seen is in
// order, and each gap in the ids is exactly what the LOST records before it
// report. Some LOST records are followed by another LOST (the LOST fitted,
// the record after it did not).
TEST_P(EachFormat, LostCountsMatchTheGapsExactly) {
  auto ring = MakeRing(Lossless(GetParam(), 8192));
  TestReader rd(ring->fd());
  std::mt19937 rng(5);
  std::vector<pfm_record> seen;
  uint64_t written = 0, lost_results = 0;
  for (uint64_t id = 0; id < 60000; ++id) {
    const Ring::Result r = ring->Write(Mixed(id));
    if (r == Ring::kLost) ++lost_results;
    if (r == Ring::kWritten) ++written;
    if (rng() % 200 == 0) {
      for (const pfm_record& x : rd.Consume(rng() % 300)) seen.push_back(x);
    }
  }
  for (const pfm_record& x : rd.Consume()) seen.push_back(x);
  ASSERT_GT(lost_results, 1000u);
  EXPECT_EQ(ring->lost(), lost_results);

  uint64_t expect_id = 0, lost_reported = 0, pending = 0, lost_lost = 0;
  pfm_record prev;
  memset(&prev, 0, sizeof(prev));
  for (const pfm_record& x : seen) {
    if (x.type == PFM_REC_LOST) {
      pending += x.u.lost.count;
      lost_reported += x.u.lost.count;
      if (prev.type == PFM_REC_LOST) ++lost_lost;
    } else {
      // The id sits in branch.to, PEBS.counter or sw.other_pid.
      const uint64_t got = x.type == PFM_REC_BRANCH ? x.u.branch.to
                           : x.type == PFM_REC_PEBS ? x.u.pebs.counter
                                                    : x.u.sw.other_pid;
      ASSERT_EQ(got, expect_id + pending) << "after " << expect_id;
      expect_id = got + 1;
      pending = 0;
    }
    prev = x;
  }
  // Everything written (LOST records included) was consumed.
  EXPECT_EQ(ring->records(), seen.size());
  EXPECT_LT(written, seen.size());
  // Trailing LOST records (`pending`) report ids after the last one seen;
  // any loss after that is not reported yet.
  EXPECT_EQ(lost_reported - pending + (60000 - expect_id), ring->lost());
  if (GetParam() == PFM_FORMAT_COMPACT) {
    EXPECT_GT(lost_lost, 0u);
  }
}

TEST_P(EachFormat, ReaderMidChunkCanResumeAfterTheWriterWrapped) {
  // Consume part of a chunk, then let the writer fill everything it may:
  // decoding from that chunk's start still yields every unread record (the
  // writer never reuses the chunk holding tail).
  auto ring = MakeRing(Lossless(GetParam(), 16384));
  uint64_t id = 0;
  {
    TestReader rd(ring->fd());
    for (; id < 200; ++id) ASSERT_EQ(ring->Write(Mixed(id)), Ring::kWritten);
    ASSERT_EQ(rd.Consume(90).size(), 90u);
  }
  while (ring->Write(Mixed(id)) == Ring::kWritten) ++id;
  std::vector<pfm_record> snap;
  ring->Snapshot(&snap);
  ASSERT_EQ(snap.size(), id - 90);
  for (size_t i = 0; i < snap.size(); ++i) {
    pfm_record want = Mixed(90 + i);
    NormalizeRecord(&want);
    ASSERT_TRUE(Same(snap[i], want)) << i;
  }
}

TEST_P(EachFormat, FixedAndCompactAgreeOnTheSameStream) {
  auto other = GetParam() == PFM_FORMAT_FIXED ? PFM_FORMAT_COMPACT
                                              : PFM_FORMAT_FIXED;
  auto a = MakeRing(History(GetParam(), 500));
  auto b = MakeRing(History(other, 500));
  auto c = MakeRing(Lossless(GetParam(), 1 << 20));
  auto d = MakeRing(Lossless(other, 1 << 20));
  for (uint64_t id = 0; id < 7000; ++id) {
    pfm_record r = Mixed(id);
    r.u.raw[39] = 0xee;  // garbage outside BRANCH's union part
    a->Write(r);
    b->Write(r);
    c->Write(r);
    d->Write(r);
  }
  std::vector<pfm_record> sa, sb, sc, sd;
  a->Snapshot(&sa);
  b->Snapshot(&sb);
  c->Snapshot(&sc);
  d->Snapshot(&sd);
  ASSERT_EQ(sa.size(), 500u);
  ASSERT_EQ(sb.size(), 500u);
  ASSERT_EQ(sc.size(), 7000u);
  ASSERT_EQ(sd.size(), 7000u);
  for (size_t i = 0; i < sa.size(); ++i) ASSERT_TRUE(Same(sa[i], sb[i])) << i;
  for (size_t i = 0; i < sc.size(); ++i) ASSERT_TRUE(Same(sc[i], sd[i])) << i;
  for (size_t i = 0; i < sa.size(); ++i)
    ASSERT_TRUE(Same(sa[i], sc[7000 - 500 + i])) << i;
}

TEST_P(EachFormat, ChildWritesParentReadsAcrossFork) {
  constexpr uint64_t kRecords = 20000;
  // A small block ring: the child must wait for the parent to drain.
  auto ring = MakeRing(Lossless(GetParam(), 8192, /*block=*/true));
  TestReader rd(ring->fd());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (uint64_t id = 0; id < kRecords; ++id) {
      while (ring->Write(Mixed(id)) == Ring::kWouldBlock) sched_yield();
    }
    ring->End();
    _exit(0);
  }
  uint64_t expect = 0;
  bool child_gone = false;
  for (;;) {
    const bool ended =
        (__atomic_load_n(&rd.hdr().flags, __ATOMIC_ACQUIRE) &
         PFM_RING_F_ENDED) != 0;
    const std::vector<pfm_record> got = rd.Consume();
    for (const pfm_record& x : got) {
      pfm_record want = Mixed(expect);
      NormalizeRecord(&want);
      ASSERT_TRUE(Same(x, want)) << "record " << expect;
      ++expect;
    }
    if (got.empty() && (ended || child_gone)) break;
    if (got.empty()) {
      int status;
      if (waitpid(child, &status, WNOHANG) == child) child_gone = true;
      sched_yield();
    }
  }
  int status = 0;
  if (!child_gone) waitpid(child, &status, 0);
  EXPECT_EQ(expect, kRecords);
  EXPECT_EQ(rd.hdr().records, kRecords);
  EXPECT_EQ(rd.hdr().lost, 0u);
}

// WriteValidBatch is n Writes that stop at the first kWouldBlock: the same
// bytes, header and counts, in every mode, with losses, LOST records, chunk
// ends and wraps. Both rings get the same batches and their readers consume
// the same amounts.
TEST_P(EachFormat, WriteValidBatchIsWriteOneByOne) {
  struct Case {
    const char* name;
    RingConfig cfg;
  };
  const Case cases[] = {
      {"lossless", Lossless(GetParam(), 4 * PFM_RING_CHUNK)},
      {"block", Lossless(GetParam(), 4 * PFM_RING_CHUNK, /*block=*/true)},
      {"history", History(GetParam(), 100)},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    std::unique_ptr<Ring> one = MakeRing(k.cfg), batch = MakeRing(k.cfg);
    TestReader rd_one(one->fd()), rd_batch(batch->fd());
    // Compact: a third ring takes the batches through the batch encoder
    // (pieces of an odd size, so pieces end mid-chunk) and must come out
    // byte for byte the same, losses, LOST records and blocks included.
    std::unique_ptr<Ring> enc = MakeRing(k.cfg);
    TestReader rd_enc(enc->fd());
    CompactBatch scratch(97);
    const bool compact = GetParam() == PFM_FORMAT_COMPACT;
    std::mt19937_64 rng(7);
    uint64_t id = 0;
    std::vector<pfm_record> recs;
    for (int round = 0; round < 400; ++round) {
      recs.clear();
      const size_t n = 1 + rng() % 600;  // up to 2x a history ring
      for (size_t i = 0; i < n; ++i) {
        pfm_record r = Mixed(id++);
        NormalizeRecord(&r);  // WriteValidBatch's precondition
        recs.push_back(r);
      }
      size_t taken_one = n;
      for (size_t i = 0; i < n; ++i) {
        if (one->Write(recs[i]) == Ring::kWouldBlock) {
          taken_one = i;
          break;
        }
      }
      const size_t taken_batch = batch->WriteValidBatch(recs.data(), n);
      ASSERT_EQ(taken_batch, taken_one) << "round " << round;
      if (compact) {
        ASSERT_EQ(enc->WriteValidBatch(recs.data(), n, &scratch), taken_one)
            << "round " << round;
        const pfm_ring_header& e = rd_enc.hdr();
        ASSERT_EQ(e.head, rd_one.hdr().head) << "round " << round;
        ASSERT_EQ(e.records, rd_one.hdr().records);
        ASSERT_EQ(e.lost, rd_one.hdr().lost);
        ASSERT_EQ(e.overwritten, rd_one.hdr().overwritten);
        ASSERT_EQ(memcmp(reinterpret_cast<const uint8_t*>(&e) +
                             PFM_RING_HEADER_BYTES,
                         reinterpret_cast<const uint8_t*>(&rd_one.hdr()) +
                             PFM_RING_HEADER_BYTES,
                         k.cfg.data_bytes),
                  0)
            << "round " << round;
      }
      const pfm_ring_header& a = rd_one.hdr();
      const pfm_ring_header& b = rd_batch.hdr();
      ASSERT_EQ(a.head, b.head) << "round " << round;
      ASSERT_EQ(a.tail, b.tail);
      ASSERT_EQ(a.records, b.records);
      ASSERT_EQ(a.lost, b.lost);
      ASSERT_EQ(a.overwritten, b.overwritten);
      const auto* data_a =
          reinterpret_cast<const uint8_t*>(&a) + PFM_RING_HEADER_BYTES;
      const auto* data_b =
          reinterpret_cast<const uint8_t*>(&b) + PFM_RING_HEADER_BYTES;
      ASSERT_EQ(memcmp(data_a, data_b, k.cfg.data_bytes), 0)
          << "round " << round;
      // Readers keep up sometimes, fall behind sometimes (losses, blocks).
      // History rings are not consumed (the writer owns tail).
      if (k.cfg.mode == PFM_RING_HISTORY) continue;
      const size_t eat = rng() % 3 == 0 ? 0 : rng() % 300;
      const std::vector<pfm_record> got_one = rd_one.Consume(eat);
      const std::vector<pfm_record> got_batch = rd_batch.Consume(eat);
      if (compact) {
        ASSERT_EQ(rd_enc.Consume(eat).size(), got_one.size());
      }
      ASSERT_EQ(got_one.size(), got_batch.size());
      for (size_t i = 0; i < got_one.size(); ++i)
        ASSERT_TRUE(Same(got_one[i], got_batch[i])) << "round " << round;
    }
    // The schedule did exercise what it is meant to.
    if (k.cfg.mode == PFM_RING_HISTORY) {
      EXPECT_GT(batch->overwritten(), 0u);
    } else if (k.cfg.block) {
      EXPECT_EQ(batch->lost(), 0u);  // nothing lost: everything waited
    } else {
      EXPECT_GT(batch->lost(), 100u);
    }
  }
}

// The records of a compact stream as the DS allocator makes them: runs of
// user branches (times stepping by a drain's interpolation), now and then a
// switch, a PEBS record that escapes, a branch that jumps far.
std::vector<pfm_record> SharedStream(uint64_t* id, size_t n,
                                     std::mt19937_64& rng) {
  std::vector<pfm_record> out;
  for (size_t i = 0; i < n; ++i, ++*id) {
    pfm_record r = rng() % 40 == 0 ? Mixed(*id) : Branch(*id);
    if (r.type == PFM_REC_BRANCH) {
      r.time = 1000 + 13 * *id + *id / 3;  // steps of 13 or 14
      r.u.branch.to = 0x402000 + (rng() % 64) * 16;
      if (rng() % 50 == 0) r.u.branch.to = 0x7f0000000000 + *id;
    }
    NormalizeRecord(&r);
    out.push_back(r);
  }
  return out;
}

const uint8_t* DataOf(const TestReader& rd) {
  return reinterpret_cast<const uint8_t*>(&rd.hdr()) + PFM_RING_HEADER_BYTES;
}

// Encode once, copy to every ring: rings whose heads are at the same chunk
// offset get exactly the bytes a lone writer (Write one by one) produces,
// round after round, across chunk ends and wraps.
TEST(Ring, SharedBatchGivesRingsInStepTheBytesOfALoneWriter) {
  constexpr size_t kRings = 3;
  const RingConfig cfg = Lossless(PFM_FORMAT_COMPACT, 4 * PFM_RING_CHUNK);
  std::unique_ptr<Ring> lone = MakeRing(cfg);
  TestReader rd_lone(lone->fd());
  std::vector<std::unique_ptr<Ring>> rings;
  std::vector<std::unique_ptr<TestReader>> readers;
  for (size_t m = 0; m < kRings; ++m) {
    rings.push_back(MakeRing(cfg));
    readers.push_back(std::make_unique<TestReader>(rings.back()->fd()));
  }
  CompactBatch batch(512);
  std::mt19937_64 rng(3);
  uint64_t id = 0;
  size_t reset_segments = 0, segments = 0;
  for (int round = 0; round < 200; ++round) {
    const std::vector<pfm_record> recs = SharedStream(&id, 1 + rng() % 512, rng);
    for (const pfm_record& r : recs) ASSERT_EQ(lone->Write(r), Ring::kWritten);
    CodecState st;
    bool reset = !rings[0]->DecoderState(&st);
    uint32_t offsets[kRings];
    for (size_t m = 0; m < kRings; ++m) {
      ASSERT_TRUE(rings[m]->CompactBatchReady());
      offsets[m] = rings[m]->ChunkOffset();
      reset = reset || !rings[m]->DecoderAt(st);
    }
    EXPECT_FALSE(reset) << "rings in step stay at one decoder state";
    batch.Encode(recs.data(), recs.size(), offsets, kRings, reset, &st);
    segments += batch.segment_count();
    for (size_t g = 0; g < batch.segment_count(); ++g)
      reset_segments += batch.segments()[g].reset;
    for (size_t m = 0; m < kRings; ++m) {
      ASSERT_EQ(rings[m]->WriteCompactBatch(batch, m, recs.data()),
                recs.size());
      ASSERT_EQ(readers[m]->hdr().head, rd_lone.hdr().head) << round;
      ASSERT_EQ(memcmp(DataOf(*readers[m]), DataOf(rd_lone), cfg.data_bytes),
                0)
          << "ring " << m << " round " << round;
    }
    const size_t got = rd_lone.Consume().size();
    for (auto& rd : readers) ASSERT_EQ(rd->Consume().size(), got);
  }
  // Chunks ended inside batches: the encoder cut and reset there.
  EXPECT_GT(reset_segments, 10u);
  EXPECT_GT(segments, 200u);
}

// Rings at different chunk offsets and in both modes share one encoding:
// each decodes to exactly the records it was given (history rings: the
// newest history_records, the sizing guarantee with markers in the
// chunks), and a lossless ring whose reader stalls counts its gaps exactly.
TEST(Ring, SharedBatchAcrossChunkOffsetsDecodesToTheRecordsInEveryRing) {
  struct Member {
    RingConfig cfg;
    uint64_t prefix;  // records written alone first: a chunk offset of its own
    bool stall;       // its reader stops consuming for a while
  };
  const Member members[] = {
      {Lossless(PFM_FORMAT_COMPACT, 16 * PFM_RING_CHUNK), 0, false},
      {Lossless(PFM_FORMAT_COMPACT, 16 * PFM_RING_CHUNK), 7, false},
      {Lossless(PFM_FORMAT_COMPACT, 4 * PFM_RING_CHUNK), 300, true},
      {History(PFM_FORMAT_COMPACT, 200), 41, false},
      {History(PFM_FORMAT_COMPACT, 64), 1000, false},
  };
  constexpr size_t kRings = sizeof(members) / sizeof(members[0]);
  std::vector<std::unique_ptr<Ring>> rings;
  std::vector<std::unique_ptr<TestReader>> readers;
  std::vector<std::vector<pfm_record>> want(kRings), got(kRings);
  std::mt19937_64 rng(11);
  uint64_t id = 1u << 20;
  for (size_t m = 0; m < kRings; ++m) {
    rings.push_back(MakeRing(members[m].cfg));
    readers.push_back(std::make_unique<TestReader>(rings.back()->fd()));
    for (const pfm_record& r : SharedStream(&id, members[m].prefix, rng)) {
      ASSERT_EQ(rings[m]->Write(r), Ring::kWritten);
      want[m].push_back(r);
    }
  }
  CompactBatch batch(300);
  size_t markers = 0;
  for (int round = 0; round < 300; ++round) {
    const std::vector<pfm_record> recs = SharedStream(&id, 1 + rng() % 300, rng);
    CodecState st;
    bool reset = !rings[0]->DecoderState(&st);
    uint32_t offsets[kRings];
    for (size_t m = 0; m < kRings; ++m) {
      offsets[m] = rings[m]->ChunkOffset();
      reset = reset || !rings[m]->DecoderAt(st);
    }
    batch.Encode(recs.data(), recs.size(), offsets, kRings, reset, &st);
    for (size_t g = 0; g < batch.segment_count(); ++g) {
      const CompactSegment& seg = batch.segments()[g];
      if (seg.reset && seg.pad != (uint64_t{1} << kRings) - 1) ++markers;
    }
    for (size_t m = 0; m < kRings; ++m) {
      ASSERT_TRUE(rings[m]->CompactBatchReady() || members[m].stall);
      if (rings[m]->CompactBatchReady()) {
        ASSERT_EQ(rings[m]->WriteCompactBatch(batch, m, recs.data()),
                  recs.size());
      } else {
        // A LOST record waits: the ring takes the batch the old way.
        ASSERT_EQ(rings[m]->WriteValidBatch(recs.data(), recs.size()),
                  recs.size());
      }
      want[m].insert(want[m].end(), recs.begin(), recs.end());
      if (members[m].cfg.mode == PFM_RING_LOSSLESS &&
          !(members[m].stall && round % 50 < 25)) {
        for (const pfm_record& r : readers[m]->Consume()) got[m].push_back(r);
      }
    }
  }
  EXPECT_GT(markers, 50u) << "the rings' chunks end at different places";
  for (size_t m = 0; m < kRings; ++m) {
    SCOPED_TRACE(m);
    if (members[m].cfg.mode == PFM_RING_HISTORY) {
      std::vector<pfm_record> snap;
      rings[m]->Snapshot(&snap);
      const uint64_t keep = members[m].cfg.history_records;
      ASSERT_EQ(snap.size(), keep);
      for (size_t i = 0; i < keep; ++i)
        ASSERT_TRUE(Same(snap[i], want[m][want[m].size() - keep + i])) << i;
      EXPECT_GT(rings[m]->overwritten(), 0u);
      continue;
    }
    for (const pfm_record& r : readers[m]->Consume()) got[m].push_back(r);
    if (!members[m].stall) {
      ASSERT_EQ(got[m].size(), want[m].size());
      for (size_t i = 0; i < got[m].size(); ++i)
        ASSERT_TRUE(Same(got[m][i], want[m][i])) << i;
      continue;
    }
    // The stalled ring: what it kept is in order, and every gap is exactly
    // the count of the LOST record in it.
    ASSERT_GT(rings[m]->lost(), 0u);
    size_t w = 0;
    uint64_t lost_written = 0;
    for (const pfm_record& r : got[m]) {
      if (r.type == PFM_REC_LOST) {
        w += r.u.lost.count;
        lost_written += r.u.lost.count;
        continue;
      }
      ASSERT_LT(w, want[m].size());
      ASSERT_TRUE(Same(r, want[m][w])) << w;
      ++w;
    }
    EXPECT_LE(lost_written, rings[m]->lost());
    EXPECT_EQ(w + (rings[m]->lost() - lost_written), want[m].size());
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, EachFormat,
                         ::testing::Values(PFM_FORMAT_FIXED,
                                           PFM_FORMAT_COMPACT),
                         [](const auto& info) {
                           return info.param == PFM_FORMAT_FIXED
                                      ? std::string("Fixed")
                                      : std::string("Compact");
                         });

TEST(Ring, EndSetsEndedAndIsIdempotent) {
  auto ring = MakeRing(Lossless(PFM_FORMAT_COMPACT, 8192, true));
  TestReader rd(ring->fd());
  EXPECT_EQ(rd.hdr().flags & PFM_RING_F_ENDED, 0u);
  ring->End();
  ring->End();
  EXPECT_EQ(rd.hdr().flags,
            static_cast<uint32_t>(PFM_RING_F_ENDED | PFM_RING_F_BLOCK));
}

TEST(Ring, PadAndUnknownTypesAreCountedLostNotWritten) {
  auto ring = MakeRing(Lossless(PFM_FORMAT_COMPACT, 8192));
  pfm_record pad = Branch(1);
  pad.type = PFM_REC_PAD;
  EXPECT_EQ(ring->Write(pad), Ring::kLost);
  pad.type = PFM_REC_TYPE_MAX;
  EXPECT_EQ(ring->Write(pad), Ring::kLost);
  EXPECT_EQ(ring->records(), 0u);
  EXPECT_EQ(ring->lost(), 2u);
  EXPECT_EQ(ring->Write(Branch(2)), Ring::kWritten);
  std::vector<pfm_record> snap;
  ring->Snapshot(&snap);
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[0].type, PFM_REC_LOST);
  EXPECT_EQ(snap[0].u.lost.count, 2u);
}

}  // namespace
}  // namespace pfm
