#include "kernel/uapi/ring_format.h"

#include <cerrno>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace pfm {
namespace {

pfm_record Branch(uint64_t id) {
  pfm_record r;
  memset(&r, 0, sizeof(r));
  r.type = PFM_REC_BRANCH;
  r.cpu = 1;
  r.pid = 77;
  r.tid = 78;
  r.time = 1000 + 250 * id;
  r.u.branch.from = 0x401000 + (id * 37) % 4096;
  r.u.branch.to = id;  // the record's identity
  return r;
}

// A big record (escaped in compact: 63 bytes), so chunks end with PADs.
pfm_record Pebs(uint64_t id) {
  pfm_record r = Branch(id);
  r.type = PFM_REC_PEBS;
  r.u.pebs = {~id, ~id, ~id, ~id, UINT32_MAX, static_cast<uint32_t>(id)};
  return r;
}

uint64_t IdOf(const pfm_record& r) {
  return r.type == PFM_REC_PEBS ? r.u.pebs.counter : r.u.branch.to;
}

// A data area written as the ring writer does (no wrap-around handling
// beyond the position mask; callers stay within one ring's worth).
struct Area {
  pfm_format format;
  std::vector<uint8_t> data;
  uint64_t head = 0;
  CodecState st;
  std::vector<uint64_t> starts;  // each record's position

  Area(pfm_format f, uint64_t data_bytes, uint64_t first = 0)
      : format(f), data(data_bytes, 0xAB), head(first) {}

  void Write(const pfm_record& rec) {
    const uint64_t mask = data.size() - 1;
    uint8_t bytes[PFM_RECORD_FIXED_SIZE];
    uint64_t start = head;
    size_t n = sizeof(pfm_record);
    if (format == PFM_FORMAT_FIXED) {
      memcpy(bytes, &rec, n);
    } else {
      n = PlaceCompactRecord(head, rec, &st, bytes, &start);
      ASSERT_GT(n, 0u);
      if (start != head) data[head & mask] = PFM_REC_PAD;
    }
    for (size_t i = 0; i < n; ++i) data[(start + i) & mask] = bytes[i];
    starts.push_back(start);
    head = start + n;
  }
};

TEST(RingFormat, ValidDataBytesArePowersOfTwoFromTwoChunksToOneGiB) {
  EXPECT_FALSE(IsValidRingDataBytes(0));
  EXPECT_FALSE(IsValidRingDataBytes(PFM_RING_CHUNK));
  EXPECT_TRUE(IsValidRingDataBytes(2 * PFM_RING_CHUNK));
  EXPECT_FALSE(IsValidRingDataBytes(3 * PFM_RING_CHUNK));
  EXPECT_TRUE(IsValidRingDataBytes(1ull << 30));
  EXPECT_FALSE(IsValidRingDataBytes(1ull << 31));
  EXPECT_EQ(kMaxRingDataBytes, 1ull << 30);
}

TEST(RingFormat, DataBytesForRoundsUpToAValidShapeAndSaturates) {
  EXPECT_EQ(RingDataBytesFor(0), kMinRingDataBytes);
  EXPECT_EQ(RingDataBytesFor(64), kMinRingDataBytes);
  EXPECT_EQ(RingDataBytesFor(8192), 8192u);
  EXPECT_EQ(RingDataBytesFor(8193), 16384u);
  EXPECT_EQ(RingDataBytesFor(1ull << 30), 1ull << 30);
  EXPECT_FALSE(IsValidRingDataBytes(RingDataBytesFor((1ull << 30) + 1)));
  // No power of two holds these: the answer is one no ring accepts.
  EXPECT_EQ(RingDataBytesFor(UINT64_MAX), 1ull << 63);
  EXPECT_FALSE(IsValidRingDataBytes(RingDataBytesFor(UINT64_MAX)));
}

TEST(RingFormat, TailChunkRuleHoldsBackTheChunkOfTail) {
  constexpr uint64_t kData = 4 * PFM_RING_CHUNK;
  // Tail mid-chunk: head may reach the start of tail's chunk plus a ring.
  const uint64_t tail = 5 * PFM_RING_CHUNK + 100;
  EXPECT_TRUE(RingHeadAllowed(tail, 9 * PFM_RING_CHUNK, kData));
  EXPECT_FALSE(RingHeadAllowed(tail, 9 * PFM_RING_CHUNK + 1, kData));
  EXPECT_FALSE(RingHeadAllowed(tail, 5 * PFM_RING_CHUNK - 1, kData));
  EXPECT_EQ(RingRoom(tail, tail, kData), kData - 100);
  EXPECT_EQ(RingRoom(tail, 9 * PFM_RING_CHUNK, kData), 0u);
  EXPECT_EQ(RingRoom(tail, tail - 1, kData), 0u);
  // Positions near 2^64 (a hostile header) do not wrap the bound.
  const uint64_t far = UINT64_MAX - 10;
  EXPECT_TRUE(RingHeadAllowed(far, UINT64_MAX, kData));
  EXPECT_FALSE(RingHeadAllowed(0, UINT64_MAX, kData));
  EXPECT_FALSE(RingHeadAllowed(UINT64_MAX - kData - 4096, UINT64_MAX, kData));
}

TEST(RingFormat, SyncPointIsTheChunkStartForCompactOnly) {
  EXPECT_EQ(RingSyncPoint(PFM_FORMAT_COMPACT, 3 * 4096 + 640), 3u * 4096);
  EXPECT_EQ(RingSyncPoint(PFM_FORMAT_FIXED, 3 * 4096 + 640), 3u * 4096 + 640);
}

TEST(RingFormat, CompactRecordThatDoesNotFitStartsTheNextChunkFromScratch) {
  CodecState st;
  uint8_t out[kMaxCompactRecordBytes];
  uint64_t start = 0;
  // Mid-chunk with room: placed at head, encoded against the state.
  ASSERT_GT(PlaceCompactRecord(0, Branch(1), &st, out, &start), 0u);
  const size_t delta = PlaceCompactRecord(10, Branch(2), &st, out, &start);
  EXPECT_EQ(start, 10u);
  // 10 bytes before the chunk end a PEBS record (tens of bytes) cannot fit.
  const uint64_t head = PFM_RING_CHUNK - 10;
  ASSERT_GT(EncodedSize(Pebs(3), st), 10u);
  const size_t n = PlaceCompactRecord(head, Pebs(3), &st, out, &start);
  EXPECT_EQ(start, uint64_t{PFM_RING_CHUNK});
  EXPECT_EQ(n, EncodedSize(Pebs(3), CodecState()));
  // It is the chunk's first record: the state was reset before it.
  CodecState fresh;
  pfm_record got;
  EXPECT_EQ(DecodeRecord(out, n, &fresh, &got), static_cast<int>(n));
  EXPECT_EQ(IdOf(got), 3u);
  // At a chunk start the state resets even if the record would fit.
  CodecState used = st;
  const size_t first = PlaceCompactRecord(2 * PFM_RING_CHUNK, Branch(4), &used,
                                          out, &start);
  CodecState reset;
  EXPECT_EQ(first, EncodedSize(Branch(4), reset));
  EXPECT_GT(delta, 0u);
  // Not a ring record type: nothing placed, state untouched mid-chunk.
  pfm_record pad = Branch(5);
  pad.type = PFM_REC_PAD;
  CodecState before = used;
  EXPECT_EQ(PlaceCompactRecord(3 * PFM_RING_CHUNK + 8, pad, &used, out,
                               &start),
            0u);
  EXPECT_EQ(memcmp(&before, &used, sizeof(used)), 0);
}

// A writer that does not know the decoder's state (a shared batch stopped
// part-way) starts its next record with a reset marker, except where the
// record starts a chunk anyway.
TEST(RingFormat, CompactRecordAfterAnUnknownStateStartsWithAResetMarker) {
  CodecState st;
  uint8_t out[kMaxCompactUnitBytes];
  uint64_t start = 0;
  ASSERT_GT(PlaceCompactRecord(0, Branch(1), &st, out, &start), 0u);
  CodecState stale = st;
  const size_t n =
      PlaceCompactRecord(100, Branch(2), &stale, out, &start, /*reset=*/true);
  EXPECT_EQ(start, 100u);
  EXPECT_EQ(out[0], kResetMarker);
  EXPECT_EQ(n, 1 + EncodedSize(Branch(2), CodecState()));
  CodecState dec = st;  // whatever the reader had: the marker resets it
  pfm_record got;
  ASSERT_EQ(DecodeRecord(out, n, &dec, &got), static_cast<int>(n));
  EXPECT_EQ(IdOf(got), 2u);
  // At a chunk start no marker is needed; where marker and record do not
  // fit, the record starts the next chunk without one.
  EXPECT_EQ(PlaceCompactRecord(PFM_RING_CHUNK, Branch(3), &stale, out, &start,
                               true),
            EncodedSize(Branch(3), CodecState()));
  EXPECT_NE(out[0], kResetMarker);
  const size_t m = PlaceCompactRecord(2 * PFM_RING_CHUNK - 2, Pebs(4), &stale,
                                      out, &start, true);
  EXPECT_EQ(start, 2u * PFM_RING_CHUNK);
  EXPECT_NE(out[0], kResetMarker);
  EXPECT_EQ(m, EncodedSize(Pebs(4), CodecState()));
}

class EachFormat : public ::testing::TestWithParam<pfm_format> {};

TEST_P(EachFormat, CursorWalksRecordsAcrossPadsAndWraps) {
  constexpr uint64_t kData = 2 * PFM_RING_CHUNK;
  // Start past a wrap, so positions exceed data_bytes.
  Area a(GetParam(), kData, 3 * kData);
  for (uint64_t id = 0; id < 100; ++id) a.Write(id % 3 ? Branch(id) : Pebs(id));
  ASSERT_LE(a.head - 3 * kData, kData);
  RingCursor cur;
  cur.pos = 3 * kData;
  pfm_record r;
  uint64_t at = 0;
  for (uint64_t id = 0; id < 100; ++id) {
    ASSERT_EQ(cur.Next(a.data.data(), kData, GetParam(), a.head, &r, &at), 1);
    EXPECT_EQ(IdOf(r), id);
    EXPECT_EQ(at, a.starts[id]);
  }
  EXPECT_EQ(cur.Next(a.data.data(), kData, GetParam(), a.head, &r, &at), 0);
  EXPECT_EQ(cur.pos, a.head);
}

// NextBatch (the reader's fast path) returns what Next does record by
// record, whatever the batch size, across PADs and wraps; at malformed data
// it returns the records before it, then the error.
TEST_P(EachFormat, CursorBatchesAreNextOneByOne) {
  constexpr uint64_t kData = 8 * PFM_RING_CHUNK;
  // Past a wrap: positions exceed data_bytes.
  Area a(GetParam(), kData, 5 * kData + 3 * PFM_RING_CHUNK);
  for (uint64_t id = 0; id < 300; ++id) a.Write(id % 3 ? Branch(id) : Pebs(id));
  ASSERT_LE(a.head - 5 * kData, 2 * kData);
  const uint64_t first = 5 * kData + 3 * PFM_RING_CHUNK;
  for (size_t max : {1, 2, 7, 64, 1000}) {
    RingCursor cur;
    cur.pos = first;
    std::vector<pfm_record> got(max);
    uint64_t id = 0;
    for (;;) {
      const int n = cur.NextBatch(a.data.data(), kData, GetParam(), a.head,
                                  got.data(), max);
      ASSERT_GE(n, 0);
      if (n == 0) break;
      for (int i = 0; i < n; ++i) ASSERT_EQ(IdOf(got[i]), id++) << max;
    }
    EXPECT_EQ(id, 300u);
    EXPECT_EQ(cur.pos, a.head);
  }
  // Corrupt record 200: 200 records, then -EINVAL with pos on it.
  a.data[a.starts[200] & (kData - 1)] = 0xdf;  // type 223 / escaped type 13: unknown
  RingCursor cur;
  cur.pos = first;
  std::vector<pfm_record> got(1000);
  uint64_t total = 0;
  int n;
  while ((n = cur.NextBatch(a.data.data(), kData, GetParam(), a.head,
                            got.data(), got.size())) > 0)
    total += static_cast<uint64_t>(n);
  EXPECT_EQ(n, -EINVAL);
  EXPECT_EQ(total, 200u);
  EXPECT_EQ(cur.pos, a.starts[200]);
}

TEST_P(EachFormat, CursorRefusesARecordCutByEnd) {
  Area a(GetParam(), 2 * PFM_RING_CHUNK);
  a.Write(Pebs(1));
  RingCursor cur;
  pfm_record r;
  uint64_t at = 0;
  EXPECT_EQ(cur.Next(a.data.data(), a.data.size(), GetParam(), a.head - 1, &r,
                     &at),
            -EINVAL);
  EXPECT_EQ(cur.pos, 0u);
}

TEST(RingFormat, CursorRefusesAPadNotFollowedByTheNextChunk) {
  std::vector<uint8_t> data(2 * PFM_RING_CHUNK, 0);  // all PAD
  RingCursor cur;
  pfm_record r;
  uint64_t at = 0;
  EXPECT_EQ(cur.Next(data.data(), data.size(), PFM_FORMAT_COMPACT, 100, &r,
                     &at),
            -EINVAL);
  // Near 2^64 the chunk end wraps; still refused, not looped on.
  cur.pos = UINT64_MAX - 100;
  EXPECT_EQ(cur.Next(data.data(), data.size(), PFM_FORMAT_COMPACT, UINT64_MAX,
                     &r, &at),
            -EINVAL);
}

TEST(RingFormat, SnapshotBaseSkipsChunksTheWriterMayHaveReused) {
  constexpr uint64_t kData = 4 * PFM_RING_CHUNK;
  EXPECT_EQ(RingSnapshotBase(4096 + 7, 4096 + 100, kData), 4096u);
  // Head a whole ring above tail's chunk: still intact.
  EXPECT_EQ(RingSnapshotBase(4096 + 7, 4096 + kData, kData), 4096u);
  // Beyond: the first chunk start at or above head - data_bytes.
  EXPECT_EQ(RingSnapshotBase(4096 + 7, 4096 + kData + 1, kData), 8192u);
  EXPECT_EQ(RingSnapshotBase(0, 10 * kData, kData), 9 * kData);
  EXPECT_EQ(RingSnapshotBase(0, 10 * kData + 5, kData), 9 * kData + 4096);
}

TEST_P(EachFormat, SnapshotKeepsRecordsFromTailAndTheNewestKeep) {
  constexpr uint64_t kData = 4 * PFM_RING_CHUNK;
  Area a(GetParam(), kData);
  for (uint64_t id = 0; id < 150; ++id) a.Write(id % 5 ? Branch(id) : Pebs(id));
  ASSERT_LE(a.head, kData);
  std::vector<pfm_record> out;
  // Tail on record 40's start, mid-chunk in compact: decoding starts at the
  // chunk's sync point and skips what lies below tail.
  ASSERT_EQ(DecodeRingSnapshot(a.data.data(), kData, GetParam(), a.starts[40],
                               a.head, 0, &out),
            0);
  ASSERT_EQ(out.size(), 110u);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(IdOf(out[i]), 40 + i);
  ASSERT_EQ(DecodeRingSnapshot(a.data.data(), kData, GetParam(), 0, a.head, 25,
                               &out),
            0);
  ASSERT_EQ(out.size(), 25u);
  EXPECT_EQ(IdOf(out.front()), 125u);
  EXPECT_EQ(IdOf(out.back()), 149u);
  // A tail above head (the writer moved on): nothing, and no error.
  ASSERT_EQ(DecodeRingSnapshot(a.data.data(), kData, GetParam(), a.head + 1,
                               a.head, 0, &out),
            0);
  EXPECT_TRUE(out.empty());
}

TEST_P(EachFormat, SnapshotOfMalformedDataIsEinvalAndEmpty) {
  constexpr uint64_t kData = 2 * PFM_RING_CHUNK;
  Area a(GetParam(), kData);
  for (uint64_t id = 0; id < 10; ++id) a.Write(Branch(id));
  a.data[a.starts[5]] = 0xdf;  // type 223 (fixed), escaped type 13 (compact): unknown
  std::vector<pfm_record> out(3);
  uint64_t bad = 0;
  EXPECT_EQ(DecodeRingSnapshot(a.data.data(), kData, GetParam(), 0, a.head, 0,
                               &out, &bad),
            -EINVAL);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(bad, a.starts[5]);
}

INSTANTIATE_TEST_SUITE_P(Formats, EachFormat,
                         ::testing::Values(PFM_FORMAT_FIXED,
                                           PFM_FORMAT_COMPACT),
                         [](const auto& info) {
                           return info.param == PFM_FORMAT_FIXED
                                      ? std::string("Fixed")
                                      : std::string("Compact");
                         });

}  // namespace
}  // namespace pfm
