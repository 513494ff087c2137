#include "pfm/ring_reader.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernel/uapi/compact_codec.h"
#include "kernel/ds/ring.h"
#include "libpfm-bts/testing/peak_rss.h"

namespace pfm {
namespace {

pfm_record Mixed(uint64_t id) {
  pfm_record r;
  memset(&r, 0, sizeof(r));
  r.type = PFM_REC_BRANCH;
  r.cpu = 2;
  r.pid = 500;
  r.tid = 501;
  r.time = 10'000 + 300 * id;
  r.misc = id % 5 ? PFM_MISC_BRANCH_PREDICTED : 0;
  r.u.branch.from = 0x7f0000001000 + (id * 53) % 8192;
  r.u.branch.to = id;
  r.u.branch.flags = id % 5 ? PFM_BTS_RAW_PREDICTED : 0;
  if (id % 9 == 4) {
    r.type = PFM_REC_PEBS;
    r.misc = 0;
    r.u.pebs = {~id, id, 77, 0x1234, 3, static_cast<uint32_t>(id)};
  }
  return r;
}

uint64_t IdOf(const pfm_record& r) {
  return r.type == PFM_REC_PEBS ? r.u.pebs.counter : r.u.branch.to;
}

void ExpectIs(const pfm_record& got, uint64_t id) {
  pfm_record want = Mixed(id);
  NormalizeRecord(&want);
  EXPECT_EQ(memcmp(&got, &want, sizeof(got)), 0) << "record " << id;
}

std::unique_ptr<Ring> MakeRing(pfm_ring_mode mode, pfm_format format,
                               uint64_t bytes_or_records, bool block = false) {
  RingConfig c;
  c.mode = mode;
  c.format = format;
  c.block = block;
  if (mode == PFM_RING_HISTORY) {
    c.history_records = bytes_or_records;
    c.data_bytes = HistoryRingBytes(bytes_or_records);
  } else {
    c.data_bytes = bytes_or_records;
  }
  std::unique_ptr<Ring> ring;
  ErrorDetail d;
  EXPECT_EQ(Ring::Create(c, "reader-test", &ring, &d), 0) << d.message;
  return ring;
}

RingReader MapOrDie(const Ring& ring) {
  absl::StatusOr<RingReader> r = RingReader::Map(UniqueFd(dup(ring.fd())));
  EXPECT_TRUE(r.ok()) << r.status();
  return std::move(*r);
}

// A sealed memfd with a header we control, for hostile-ring tests.
struct FakeRing {
  UniqueFd fd;
  pfm_ring_header* hdr = nullptr;
  uint8_t* data = nullptr;
  size_t bytes = 0;

  explicit FakeRing(uint64_t data_bytes, uint64_t file_bytes = 0,
                    bool seal = true) {
    bytes = file_bytes ? file_bytes : PFM_RING_HEADER_BYTES + data_bytes;
    fd.reset(memfd_create("fake-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    EXPECT_EQ(ftruncate(fd.get(), static_cast<off_t>(bytes)), 0);
    if (seal) {
      EXPECT_EQ(fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
    }
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd.get(), 0);
    EXPECT_NE(m, MAP_FAILED);
    hdr = static_cast<pfm_ring_header*>(m);
    data = static_cast<uint8_t*>(m) + PFM_RING_HEADER_BYTES;
    hdr->magic = PFM_RING_MAGIC;
    hdr->version = PFM_UAPI_VERSION;
    hdr->format = PFM_FORMAT_COMPACT;
    hdr->mode = PFM_RING_LOSSLESS;
    hdr->header_bytes = PFM_RING_HEADER_BYTES;
    hdr->chunk_bytes = PFM_RING_CHUNK;
    hdr->data_bytes = data_bytes;
  }
  ~FakeRing() { munmap(hdr, bytes); }
  absl::StatusOr<RingReader> Map() {
    return RingReader::Map(UniqueFd(dup(fd.get())));
  }
};

class EachFormat : public ::testing::TestWithParam<pfm_format> {};

TEST_P(EachFormat, ConsumesInOrderAndFreesSpaceForTheWriter) {
  auto ring = MakeRing(PFM_RING_LOSSLESS, GetParam(), 8192, /*block=*/true);
  RingReader rd = MapOrDie(*ring);
  EXPECT_EQ(rd.format(), GetParam());
  EXPECT_EQ(rd.mode(), PFM_RING_LOSSLESS);
  std::vector<pfm_record> got;
  uint64_t next = 0;
  std::mt19937 rng(3);
  // Far more than the ring holds: only consuming lets the writer go on.
  while (next < 5000) {
    while (next < 5000 && ring->Write(Mixed(next)) == Ring::kWritten) ++next;
    rd.Consume(&got, 1 + rng() % 150);
  }
  while (rd.Consume(&got) > 0) {
  }
  ASSERT_EQ(got.size(), 5000u);
  for (uint64_t i = 0; i < got.size(); ++i) ExpectIs(got[i], i);
  EXPECT_TRUE(rd.status().ok());
  EXPECT_EQ(rd.records(), 5000u);
  EXPECT_EQ(rd.lost(), 0u);
  EXPECT_EQ(rd.header().tail, rd.header().head);
}

// Compact rings that shared one encoding of each batch (the DS allocator's
// fan-out): the ring whose chunks end elsewhere than the encoder's other
// ring carries reset markers. The reader consumes both (in random batch
// sizes, through its batch decoder), a second reader mapped mid-chunk
// resumes, and snapshots agree.
TEST(RingReader, ConsumesRingsThatSharedOneEncoding) {
  std::unique_ptr<Ring> rings[2] = {
      MakeRing(PFM_RING_LOSSLESS, PFM_FORMAT_COMPACT, 1 << 20),
      MakeRing(PFM_RING_LOSSLESS, PFM_FORMAT_COMPACT, 1 << 20)};
  // Ring 1 starts with records of its own: its chunk ends differ.
  std::vector<uint64_t> want[2];
  for (uint64_t id = 0; id < 37; ++id) {
    ASSERT_EQ(rings[1]->Write(Mixed(1'000'000 + id)), Ring::kWritten);
    want[1].push_back(1'000'000 + id);
  }
  CompactBatch batch(512);
  std::mt19937 rng(8);
  uint64_t id = 0;
  size_t markers = 0;
  for (int round = 0; round < 100; ++round) {
    std::vector<pfm_record> recs;
    const size_t n = 1 + rng() % 512;
    for (size_t i = 0; i < n; ++i, ++id) {
      recs.push_back(Mixed(id));
      NormalizeRecord(&recs.back());
      want[0].push_back(id);
      want[1].push_back(id);
    }
    CodecState st;
    bool reset = !rings[0]->DecoderState(&st);
    reset = reset || !rings[1]->DecoderAt(st);
    const uint32_t offsets[2] = {rings[0]->ChunkOffset(),
                                 rings[1]->ChunkOffset()};
    batch.Encode(recs.data(), n, offsets, 2, reset, &st);
    for (size_t g = 0; g < batch.segment_count(); ++g)
      markers += batch.segments()[g].reset && batch.segments()[g].pad != 3;
    for (int m = 0; m < 2; ++m)
      ASSERT_EQ(rings[m]->WriteCompactBatch(batch, m, recs.data()), n);
  }
  ASSERT_GT(markers, 10u);
  for (int m = 0; m < 2; ++m) {
    SCOPED_TRACE(m);
    RingReader rd = MapOrDie(*rings[m]);
    // Non-consuming first: the snapshot is every record, as the writer's.
    std::vector<pfm_record> snap;
    ASSERT_TRUE(rd.Snapshot(&snap).ok());
    ASSERT_EQ(snap.size(), want[m].size());
    for (size_t i = 0; i < snap.size(); ++i) ExpectIs(snap[i], want[m][i]);
    std::vector<pfm_record> got;
    // Part of it, then a second reader takes over at the mid-chunk tail.
    while (got.size() < want[m].size() / 3) rd.Consume(&got, 1 + rng() % 700);
    RingReader second = MapOrDie(*rings[m]);
    while (second.Consume(&got, 1 + rng() % 700) > 0) {
    }
    ASSERT_TRUE(rd.status().ok());
    ASSERT_TRUE(second.status().ok()) << second.status();
    ASSERT_EQ(got.size(), want[m].size());
    for (size_t i = 0; i < got.size(); ++i) ExpectIs(got[i], want[m][i]);
    // Consumed: nothing is left, for the reader as for the writer.
    std::vector<pfm_record> writer_snap;
    ASSERT_TRUE(second.Snapshot(&snap).ok());
    rings[m]->Snapshot(&writer_snap);
    EXPECT_TRUE(snap.empty());
    EXPECT_TRUE(writer_snap.empty());
  }
}

TEST_P(EachFormat, SecondReaderResumesAtAMidChunkTail) {
  auto ring = MakeRing(PFM_RING_LOSSLESS, GetParam(), 16384);
  for (uint64_t id = 0; id < 150; ++id) ring->Write(Mixed(id));
  std::vector<pfm_record> got;
  {
    RingReader first = MapOrDie(*ring);
    EXPECT_EQ(first.Consume(&got, 37), 37u);
  }
  // The writer fills all it may before the second reader comes.
  uint64_t id = 150;
  while (ring->Write(Mixed(id)) == Ring::kWritten) ++id;
  RingReader second = MapOrDie(*ring);
  std::vector<pfm_record> snap;
  ASSERT_TRUE(second.Snapshot(&snap).ok());
  EXPECT_EQ(snap.size(), id - 37);
  while (second.Consume(&got) > 0) {
  }
  ASSERT_TRUE(second.status().ok()) << second.status();
  ASSERT_EQ(got.size(), id);
  for (uint64_t i = 0; i < got.size(); ++i) ExpectIs(got[i], i);
  for (uint64_t i = 0; i < snap.size(); ++i) ExpectIs(snap[i], 37 + i);
}

TEST_P(EachFormat, HistorySnapshotMatchesTheWritersAndKeepsTheNewest) {
  auto ring = MakeRing(PFM_RING_HISTORY, GetParam(), 250);
  for (uint64_t id = 0; id < 20000; ++id) ring->Write(Mixed(id));
  RingReader rd = MapOrDie(*ring);
  std::vector<pfm_record> mine, theirs;
  ASSERT_TRUE(rd.Snapshot(&mine).ok());
  ring->Snapshot(&theirs);
  ASSERT_EQ(mine.size(), 250u);
  ASSERT_EQ(theirs.size(), 250u);
  for (size_t i = 0; i < mine.size(); ++i) {
    ExpectIs(mine[i], 20000 - 250 + i);
    EXPECT_EQ(memcmp(&mine[i], &theirs[i], sizeof(pfm_record)), 0);
  }
  std::vector<pfm_record> none;
  EXPECT_EQ(rd.Consume(&none), 0u);  // history rings are not consumed
  EXPECT_EQ(rd.overwritten(), ring->overwritten());
  EXPECT_GT(rd.overwritten(), 0u);
  EXPECT_FALSE(rd.ended());
  ring->End();
  EXPECT_TRUE(rd.ended());
}

TEST_P(EachFormat, ChildWritesParentConsumesAcrossFork) {
  constexpr uint64_t kRecords = 30000;
  auto ring = MakeRing(PFM_RING_LOSSLESS, GetParam(), 8192, /*block=*/true);
  RingReader rd = MapOrDie(*ring);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (uint64_t id = 0; id < kRecords; ++id)
      while (ring->Write(Mixed(id)) == Ring::kWouldBlock) sched_yield();
    ring->End();
    _exit(0);
  }
  std::vector<pfm_record> got;
  bool child_gone = false;
  for (;;) {
    const bool ended = rd.ended();
    const size_t n = rd.Consume(&got);
    if (n == 0 && (ended || child_gone || !rd.status().ok())) break;
    if (n == 0) {
      int status;
      if (waitpid(child, &status, WNOHANG) == child) child_gone = true;
      sched_yield();
    }
  }
  if (!child_gone) waitpid(child, nullptr, 0);
  ASSERT_TRUE(rd.status().ok()) << rd.status();
  ASSERT_EQ(got.size(), kRecords);
  for (uint64_t i = 0; i < kRecords; ++i) ExpectIs(got[i], i);
}

// The writer overwrites while the parent snapshots: every snapshot must be a
// run of consecutive, intact records (torn ones are dropped, not returned).
// The writer runs until the parent has seen enough non-empty snapshots, so a
// loaded machine that schedules the parent late cannot leave the test with
// nothing checked (a fixed record count once finished before the parent's
// first snapshot under a full CI run).
TEST_P(EachFormat, HistorySnapshotsWhileTheWriterRunsAreNeverTorn) {
  constexpr uint64_t kKeep = 200;
  constexpr int kWantNonEmpty = 50;
  constexpr int kMaxSnapshots = 2'000'000;  // bounds the test if none is
  auto ring = MakeRing(PFM_RING_HISTORY, GetParam(), kKeep);
  RingReader rd = MapOrDie(*ring);
  struct Shared {
    int stop;
    uint64_t written;
  };
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* shared = new (mem) Shared{0, 0};
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    uint64_t id = 0;
    for (; id < kKeep || !__atomic_load_n(&shared->stop, __ATOMIC_ACQUIRE);
         ++id)
      ring->Write(Mixed(id));
    __atomic_store_n(&shared->written, id, __ATOMIC_RELEASE);
    ring->End();
    _exit(0);
  }
  std::vector<pfm_record> snap;
  int snapshots = 0, nonempty = 0;
  while (!rd.ended()) {
    ASSERT_TRUE(rd.Snapshot(&snap).ok());
    if (++snapshots >= kMaxSnapshots || nonempty >= kWantNonEmpty)
      __atomic_store_n(&shared->stop, 1, __ATOMIC_RELEASE);
    if (snap.empty()) continue;
    ++nonempty;
    ASSERT_LE(snap.size(), kKeep);
    const uint64_t first = IdOf(snap[0]);
    for (size_t i = 0; i < snap.size(); ++i) ExpectIs(snap[i], first + i);
    if (HasFailure()) break;
  }
  __atomic_store_n(&shared->stop, 1, __ATOMIC_RELEASE);
  waitpid(child, nullptr, 0);
  const uint64_t written = __atomic_load_n(&shared->written, __ATOMIC_ACQUIRE);
  munmap(mem, sizeof(Shared));
  ASSERT_TRUE(rd.Snapshot(&snap).ok());
  ASSERT_EQ(snap.size(), kKeep);
  ExpectIs(snap.back(), written - 1);
  EXPECT_GE(nonempty, kWantNonEmpty) << "of " << snapshots << " snapshots";
  RecordProperty("snapshots", snapshots);
  RecordProperty("written", static_cast<int>(written));
}

// A snapshot copies only the bytes from tail's chunk to head into a ring of
// their own size: with a mid-chunk tail in a ring far bigger than what it
// holds, it gives what the writer's snapshot gives.
TEST_P(EachFormat, SnapshotOfARingMostlyEmptyMatchesTheWriters) {
  auto ring = MakeRing(PFM_RING_LOSSLESS, GetParam(), 1 << 20);
  for (uint64_t id = 0; id < 3000; ++id)
    ASSERT_EQ(ring->Write(Mixed(id)), Ring::kWritten);
  RingReader consumer = MapOrDie(*ring);
  std::vector<pfm_record> got;
  ASSERT_EQ(consumer.Consume(&got, 1234), 1234u);
  ASSERT_NE(consumer.header().tail % PFM_RING_CHUNK, 0u);
  // What it holds would fit a copy smaller than the ring.
  ASSERT_LT(consumer.header().head - consumer.header().tail,
            (uint64_t{1} << 19) - PFM_RING_CHUNK);
  RingReader rd = MapOrDie(*ring);
  std::vector<pfm_record> mine, theirs;
  ASSERT_TRUE(rd.Snapshot(&mine).ok());
  ring->Snapshot(&theirs);
  ASSERT_EQ(mine.size(), 3000u - 1234u);
  ASSERT_EQ(theirs.size(), mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    ExpectIs(mine[i], 1234 + i);
    EXPECT_EQ(memcmp(&mine[i], &theirs[i], sizeof(pfm_record)), 0) << i;
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

TEST(RingReader, MoveKeepsOneMapping) {
  auto ring = MakeRing(PFM_RING_LOSSLESS, PFM_FORMAT_COMPACT, 8192);
  ring->Write(Mixed(1));
  RingReader a = MapOrDie(*ring);
  RingReader b = std::move(a);
  RingReader c = MapOrDie(*ring);
  c = std::move(b);
  std::vector<pfm_record> got;
  EXPECT_EQ(c.Consume(&got), 1u);
  ExpectIs(got[0], 1);
}

TEST(RingReader, RefusesFdsThatAreNotRings) {
  EXPECT_EQ(RingReader::Map(UniqueFd()).status().code(),
            absl::StatusCode::kInvalidArgument);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  close(pipefd[1]);
  EXPECT_EQ(RingReader::Map(UniqueFd(pipefd[0])).status().code(),
            absl::StatusCode::kInvalidArgument);

  struct Case {
    const char* what;
    std::function<void(FakeRing&)> spoil;
  };
  const std::vector<Case> cases = {
      {"magic", [](FakeRing& f) { f.hdr->magic = 0x12345678; }},
      {"version", [](FakeRing& f) { f.hdr->version = 99; }},
      {"header_bytes", [](FakeRing& f) { f.hdr->header_bytes = 64; }},
      {"chunk_bytes", [](FakeRing& f) { f.hdr->chunk_bytes = 512; }},
      {"data_bytes", [](FakeRing& f) { f.hdr->data_bytes = 16384; }},
      {"data_bytes", [](FakeRing& f) { f.hdr->data_bytes = 1ull << 62; }},
      {"format", [](FakeRing& f) { f.hdr->format = 9; }},
      {"mode", [](FakeRing& f) { f.hdr->mode = 0; }},
      {"history", [](FakeRing& f) { f.hdr->mode = PFM_RING_HISTORY; }},
  };
  for (const Case& k : cases) {
    FakeRing f(8192);
    ASSERT_TRUE(f.Map().ok()) << "the unspoiled fake ring maps";
    k.spoil(f);
    absl::StatusOr<RingReader> r = f.Map();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << k.what;
  }
  FakeRing unsealed(8192, 0, /*seal=*/false);
  EXPECT_EQ(unsealed.Map().status().code(), absl::StatusCode::kInvalidArgument);
  // The seal is checked before the size is read (a size read first could
  // shrink before the seal): an unsealed fd of no ring's size is refused
  // for its seal.
  FakeRing unsealed_tiny(8192, /*file_bytes=*/4096, /*seal=*/false);
  absl::Status s = unsealed_tiny.Map().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not sealed against shrinking"),
            std::string::npos)
      << s;
  FakeRing tiny(8192, /*file_bytes=*/4096);
  EXPECT_EQ(tiny.Map().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RingReader, GarbageDataIsDataLossNotACrash) {
  FakeRing f(8192);
  absl::StatusOr<RingReader> r = f.Map();
  ASSERT_TRUE(r.ok());
  // An escaped record with an unknown type.
  memset(f.data, 0xdf, 100);
  __atomic_store_n(&f.hdr->head, 100, __ATOMIC_RELEASE);
  std::vector<pfm_record> out;
  EXPECT_EQ(r->Snapshot(&out).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(r->Consume(&out), 0u);
  EXPECT_EQ(r->status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(r->Consume(&out), 0u);  // stays stopped
}

TEST(RingReader, ImpossibleHeadOrTailIsDataLoss) {
  FakeRing f(8192);
  absl::StatusOr<RingReader> r = f.Map();
  ASSERT_TRUE(r.ok());
  std::vector<pfm_record> out;
  f.hdr->tail = 4096;
  f.hdr->head = 100;  // below tail
  EXPECT_EQ(r->Snapshot(&out).code(), absl::StatusCode::kDataLoss);
  f.hdr->tail = 0;
  f.hdr->head = 1ull << 40;  // more than a ring ahead of our tail
  EXPECT_EQ(r->Consume(&out), 0u);
  EXPECT_EQ(r->status().code(), absl::StatusCode::kDataLoss);
}

// Random data, heads, tails and formats: every outcome is a status, never a
// crash or a read outside the mapping (run under ASan to see the latter).
TEST(RingReader, SurvivesRandomHostileRings) {
  std::mt19937_64 rng(2024);
  int data_loss = 0, ok = 0;
  for (int i = 0; i < 300; ++i) {
    FakeRing f(8192);
    f.hdr->format = rng() % 2 ? PFM_FORMAT_COMPACT : PFM_FORMAT_FIXED;
    f.hdr->mode = rng() % 2 ? PFM_RING_LOSSLESS : PFM_RING_HISTORY;
    f.hdr->history_records = 1 + rng() % 100;
    for (size_t j = 0; j < 8192; ++j) {
      // Mostly small values, as real encodings are, so decoding goes deep.
      f.data[j] = static_cast<uint8_t>(rng() % 4 ? rng() % 0x20 : rng());
    }
    absl::StatusOr<RingReader> r = f.Map();
    ASSERT_TRUE(r.ok());
    uint64_t tail = rng() % 3 ? rng() % 9000 : rng();
    if (i % 5 == 0) tail &= ~uint64_t{PFM_RING_CHUNK - 1};
    // One in five is empty (at a sync point), the rest random.
    const uint64_t head = i % 5 == 0  ? tail
                          : rng() % 3 ? tail + rng() % 9000
                                      : rng();
    f.hdr->tail = tail;
    f.hdr->head = head;
    std::vector<pfm_record> out;
    const absl::Status s = r->Snapshot(&out);
    s.ok() ? ++ok : ++data_loss;
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    }
    for (const pfm_record& x : out) EXPECT_TRUE(IsRecordType(x.type));
    r->Consume(&out);
  }
  EXPECT_GT(data_loss, 0);
  EXPECT_GT(ok, 0);
}

// Snapshot copies only [base, head) into a smaller ring: on any ring no
// writer is changing, what it returns is what decoding the whole data area
// returns (the snapshot of a full copy), for random data, formats, modes,
// sizes and positions, near 2^64 included.
TEST(RingReader, SnapshotDecodesAsAWholeCopyWould) {
  std::mt19937_64 rng(77);
  int ok = 0, data_loss = 0;
  for (int i = 0; i < 600; ++i) {
    const uint64_t data_bytes = uint64_t{8192} << (rng() % 6);
    FakeRing f(data_bytes);
    const bool fixed = rng() % 2;
    f.hdr->format = fixed ? PFM_FORMAT_FIXED : PFM_FORMAT_COMPACT;
    f.hdr->mode = rng() % 2 ? PFM_RING_LOSSLESS : PFM_RING_HISTORY;
    f.hdr->history_records = 1 + rng() % 300;
    if (fixed) {
      // Whole records, now and then a spoiled one.
      for (uint64_t at = 0; at < data_bytes; at += sizeof(pfm_record)) {
        pfm_record x = Mixed(at / sizeof(pfm_record));
        if (rng() % 500 == 0) x.type = 0;
        memcpy(f.data + at, &x, sizeof(x));
      }
    } else {
      for (size_t j = 0; j < data_bytes; ++j)
        f.data[j] = static_cast<uint8_t>(rng() % 4 ? rng() % 0x20 : rng());
    }
    const uint64_t laps = rng() % 3 == 0 ? (rng() >> 20) : rng() % 5;
    uint64_t tail = laps * data_bytes + rng() % data_bytes;
    if (fixed) tail &= ~uint64_t{sizeof(pfm_record) - 1};
    if (rng() % 4 == 0) tail &= ~uint64_t{PFM_RING_CHUNK - 1};
    uint64_t head = tail + rng() % (data_bytes + 3 * PFM_RING_CHUNK);
    if (rng() % 10 == 0) head = tail + rng() % 200;
    if (fixed) head &= ~uint64_t{sizeof(pfm_record) - 1};
    if (head < tail) head = tail;
    f.hdr->tail = tail;
    f.hdr->head = head;
    absl::StatusOr<RingReader> r = f.Map();
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<pfm_record> got, want;
    const absl::Status s = r->Snapshot(&got);
    const int rc = DecodeRingSnapshot(
        f.data, data_bytes, r->format(), tail, head,
        r->mode() == PFM_RING_HISTORY ? f.hdr->history_records : 0, &want);
    ASSERT_EQ(s.ok(), rc == 0) << i << ": " << s;
    s.ok() ? ++ok : ++data_loss;
    ASSERT_EQ(got.size(), want.size()) << i;
    for (size_t k = 0; k < got.size(); ++k)
      ASSERT_EQ(memcmp(&got[k], &want[k], sizeof(pfm_record)), 0) << i;
  }
  EXPECT_GT(ok, 100);
  EXPECT_GT(data_loss, 10);
}

using testing::PeakRssGrowthKib;

// A 256 MiB ring (a sparse memfd: only the pages written are memory) holding
// one record: its snapshot costs what the record's chunk does, not 256 MiB.
// Then records from mid-chunk across a chunk end, at positions laps into the
// ring: the snapshot is those at or above tail, in order.
TEST(RingReader, SnapshotOfALargeRingCopiesOnlyWhatItHolds) {
  constexpr uint64_t kData = 256ull << 20;
  FakeRing f(kData);
  f.hdr->format = PFM_FORMAT_FIXED;
  const uint64_t one = 3 * kData + 5 * PFM_RING_CHUNK;
  const pfm_record rec = Mixed(7);
  memcpy(f.data + (one & (kData - 1)), &rec, sizeof(rec));
  f.hdr->tail = one;
  f.hdr->head = one + sizeof(rec);
  absl::StatusOr<RingReader> r = f.Map();
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<pfm_record> out;
  out.reserve(200);
  absl::Status s;
  const long growth = PeakRssGrowthKib([&] { s = r->Snapshot(&out); });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(memcmp(&out[0], &rec, sizeof(rec)), 0);
  if (growth < 0) {
    ADD_FAILURE() << "cannot reset the peak RSS to measure the snapshot";
  } else {
    EXPECT_LT(growth, 8 * 1024) << "KiB for a snapshot of one record";
  }

  // 100 records from 10 below a mid-chunk tail, past the chunk's end.
  const uint64_t chunk = 7 * kData + 9 * PFM_RING_CHUNK;
  const uint64_t first = chunk + PFM_RING_CHUNK - 50 * sizeof(pfm_record);
  for (uint64_t i = 0; i < 100; ++i) {
    const pfm_record x = Mixed(100 + i);
    memcpy(f.data + ((first + i * sizeof(x)) & (kData - 1)), &x, sizeof(x));
  }
  f.hdr->tail = first + 10 * sizeof(pfm_record);
  f.hdr->head = first + 100 * sizeof(pfm_record);
  ASSERT_TRUE(r->Snapshot(&out).ok());
  ASSERT_EQ(out.size(), 90u);
  for (uint64_t i = 0; i < out.size(); ++i) {
    const pfm_record want = Mixed(110 + i);
    EXPECT_EQ(memcmp(&out[i], &want, sizeof(want)), 0) << i;
  }
}

}  // namespace
}  // namespace pfm
