#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz/codec_fuzz.h"
#include "fuzz/fuzz_targets.h"
#include "kernel/uapi/compact_codec.h"
#include "kernel/uapi/ring_format.h"

namespace pfm::fuzz {

namespace {

// Records as the DS allocator makes them, steered by the input: mostly
// branches whose deltas the input picks (small, predicted, or any 64-bit
// value), now and then a change of cpu/pid/tid/misc/flags or a record of any
// other type with arbitrary fields. Normalized, ring record types.
std::vector<pfm_record> Records(Input& in, size_t max) {
  std::vector<pfm_record> out;
  pfm_record r;
  memset(&r, 0, sizeof(r));
  r.type = PFM_REC_BRANCH;
  uint64_t step = 13;
  while (out.size() < max && in.n > 0) {
    const uint8_t op = in.Take<uint8_t>();
    pfm_record next = r;
    if (op < 200) {
      next.type = PFM_REC_BRANCH;
      if (r.type != PFM_REC_BRANCH) memset(&next.u, 0, sizeof(next.u));
      next.time = r.time + step + (op & 1);
      next.u.branch.from = next.u.branch.to + (op >> 1 & 63);
      if (op & 0x80) {
        next.u.branch.to = next.u.branch.from + in.Take<int16_t>();
      } else {
        next.u.branch.to = 0x400000 + (op & 0x70);  // repeats: the predictor
      }
      if ((op & 0x0e) == 0x0e) {  // the predicted bit flips
        next.misc ^= PFM_MISC_BRANCH_PREDICTED;
        next.u.branch.flags ^= PFM_BTS_RAW_PREDICTED;
      }
    } else if (op < 210) {
      step = in.Take<uint8_t>() == 0 ? in.Take<uint64_t>() : in.Take<uint8_t>();
      next.time = r.time + step;
    } else if (op < 220) {
      next.u.branch.from = in.Take<uint64_t>();
      next.u.branch.to = in.Take<uint64_t>();
      next.time = in.Take<uint64_t>();
    } else if (op < 230) {
      next.cpu = in.Take<uint16_t>();
      next.pid = in.Take<uint8_t>();
      next.tid = in.Take<uint32_t>();
      next.misc = in.Take<uint8_t>();
      next.u.branch.flags = in.Take<uint8_t>();
    } else {
      next.type = static_cast<uint16_t>(PFM_REC_BRANCH + op % 10);
      next.misc = in.Take<uint8_t>() < 128 ? 0 : in.Take<uint32_t>();
      for (size_t i = 0; i < sizeof(next.u.raw); i += 8) {
        const uint64_t v = in.Take<uint8_t>() < 128 ? in.Take<uint8_t>()
                                                    : in.Take<uint64_t>();
        memcpy(next.u.raw + i, &v, 8);
      }
    }
    NormalizeRecord(&next);
    Check(IsRecordType(next.type));
    out.push_back(next);
    if (next.type == PFM_REC_BRANCH) r = next;
  }
  return out;
}

// A ring's data area without wrap (large enough for the input), written as
// the ring writer does: record by record (PlaceCompactRecord), or a shared
// batch's segments (Ring::WriteCompactBatch's copy, here in plain memory).
struct Area {
  std::vector<uint8_t> data;
  uint64_t head = 0;
  CodecState st;
  bool known = true;

  explicit Area(size_t bytes) : data(bytes, 0xAB) {}

  void Write(const pfm_record& rec, bool reset) {
    uint8_t bytes[kMaxCompactUnitBytes];
    uint64_t start = 0;
    const size_t n = PlaceCompactRecord(head, rec, &st, bytes, &start, reset);
    Check(n > 0 && n <= kMaxCompactUnitBytes);
    Check(start + n <= data.size());
    if (start != head) data[head] = PFM_REC_PAD;
    memcpy(data.data() + start, bytes, n);
    head = start + n;
  }

  void Copy(const CompactBatch& b, size_t member) {
    for (size_t g = 0; g < b.segment_count(); ++g) {
      const CompactSegment& seg = b.segments()[g];
      const uint64_t off = head % kRingChunk;
      uint64_t start = head;
      size_t marker = 0;
      if (seg.pad >> member & 1) {
        Check(off != 0);
        start = ChunkFloor(head) + kRingChunk;
      } else if (seg.reset && off != 0) {
        marker = 1;
      } else {
        Check(seg.reset || g == 0);
      }
      const uint64_t len = seg.end - seg.begin;
      // The segment fits this ring's chunk, and holds its records.
      Check(seg.records > 0 && len > 0);
      Check(start % kRingChunk + marker + len <= kRingChunk);
      Check(start + marker + len <= data.size());
      if (start != head) data[head] = PFM_REC_PAD;
      if (marker) data[start] = kResetMarker;
      memcpy(data.data() + start + marker, b.bytes() + seg.begin, len);
      head = start + marker + len;
    }
    st = b.end_state();
  }

  // The decoder's state at head, as Ring::DecoderState.
  CodecState Decoder() const {
    return head % kRingChunk == 0 ? CodecState() : st;
  }
};

// Decodes [0, head) with the reader's cursor, both ways (Next and
// NextBatch), and checks it gives `want`.
void ExpectDecodes(const Area& a, const std::vector<pfm_record>& want) {
  RingCursor one, batch;
  std::vector<pfm_record> got, got_batch(want.size() + 1);
  pfm_record r;
  uint64_t at;
  for (;;) {
    const int n = one.Next(a.data.data(), a.data.size(), PFM_FORMAT_COMPACT,
                           a.head, &r, &at);
    Check(n >= 0);
    if (n == 0) break;
    got.push_back(r);
  }
  size_t k = 0;
  for (;;) {
    Check(k < got_batch.size());  // never more records than written
    const size_t room = got_batch.size() - k;
    const int n = batch.NextBatch(a.data.data(), a.data.size(),
                                  PFM_FORMAT_COMPACT, a.head,
                                  got_batch.data() + k,
                                  std::min<size_t>(1 + k % 97, room));
    Check(n >= 0);
    if (n == 0) break;
    k += static_cast<size_t>(n);
  }
  Check(got.size() == want.size() && k == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    Check(memcmp(&got[i], &want[i], sizeof(pfm_record)) == 0);
    Check(memcmp(&got_batch[i], &want[i], sizeof(pfm_record)) == 0);
  }
}

}  // namespace

int FuzzCompactBatch(const uint8_t* data, size_t size) {
  const OnPathFor path(size);  // kBmi2 where it does not run: unchanged
  Input in{data, size};
  // Rings: how many, and how many records each got alone before (their
  // heads then lie at different offsets in their chunks, their decoders
  // hold different states).
  const size_t rings = 1 + in.Take<uint8_t>() % 6;
  std::vector<size_t> prefix(rings);
  const bool in_step = in.Take<uint8_t>() % 2 == 0;
  for (size_t m = 0; m < rings; ++m)
    prefix[m] = in_step ? 0 : in.Take<uint8_t>() % 200;
  constexpr size_t kMaxRecords = 600;
  const std::vector<pfm_record> before = Records(in, 200);
  const std::vector<pfm_record> batch = Records(in, kMaxRecords);
  if (batch.empty()) return 0;

  // A power of two, as every ring's data area (the cursor masks positions).
  const size_t bytes = RingDataBytesFor(
      ((before.size() + batch.size()) * kMaxCompactUnitBytes / kRingChunk + 2) *
      kRingChunk);
  std::vector<Area> shared(rings, Area(bytes));
  std::vector<std::vector<pfm_record>> want(rings);
  for (size_t m = 0; m < rings; ++m) {
    for (size_t i = 0; i < prefix[m] && i < before.size(); ++i) {
      shared[m].Write(before[i], false);
      want[m].push_back(before[i]);
    }
  }
  std::vector<Area> alone = shared;  // the same bytes so far

  // Encode once, as the DS allocator does: from the first ring's state;
  // any ring elsewhere makes the batch start reset.
  CompactBatch b(kMaxRecords);
  CodecState st = shared[0].Decoder();
  bool reset = false;
  uint32_t offsets[kMaxSharedRings];
  for (size_t m = 0; m < rings; ++m) {
    offsets[m] = static_cast<uint32_t>(shared[m].head % kRingChunk);
    reset = reset || !(shared[m].Decoder() == st);
  }
  b.Encode(batch.data(), batch.size(), offsets, rings, reset, &st);
  Check(b.records() == batch.size());
  Check(st == b.end_state());
  size_t counted = 0;
  for (size_t g = 0; g < b.segment_count(); ++g) {
    counted += b.segments()[g].records;
    Check(g == 0 || b.segments()[g].reset);
  }
  Check(counted == batch.size());

  for (size_t m = 0; m < rings; ++m) {
    shared[m].Copy(b, m);
    // Alone: the ring's own writer, record by record, resetting (with a
    // marker unless at a chunk start) exactly where the shared encoding
    // starts a reset segment. Encode once must give each ring exactly
    // these bytes; with one ring, or rings in step, those resets are the
    // chunk starts a lone writer has anyway.
    size_t i = 0;
    for (size_t g = 0; g < b.segment_count(); ++g) {
      const CompactSegment& seg = b.segments()[g];
      for (uint32_t k = 0; k < seg.records; ++k, ++i)
        alone[m].Write(batch[i], k == 0 && seg.reset);
    }
    Check(alone[m].head == shared[m].head);
    Check(memcmp(alone[m].data.data(), shared[m].data.data(),
                 shared[m].head) == 0);
    Check(alone[m].st == shared[m].st);
    want[m].insert(want[m].end(), batch.begin(), batch.end());
    // decode(encode(x)) == x, through the reader's cursor.
    ExpectDecodes(shared[m], want[m]);
  }
  // Rings in step, or one ring: no reset beyond the chunk starts, i.e. the
  // bytes of a lone writer that never heard of sharing.
  if (in_step || rings == 1) {
    Area lone(bytes);
    for (size_t i = 0; i < prefix[0] && i < before.size(); ++i)
      lone.Write(before[i], false);
    for (const pfm_record& r : batch) lone.Write(r, false);
    Check(lone.head == shared[0].head);
    Check(memcmp(lone.data.data(), shared[0].data.data(), lone.head) == 0);
  }

  // The batch encoder's loop and the batch decoder against their
  // record-by-record forms, on one chunk-free run.
  std::vector<uint8_t> run(batch.size() * kMaxCompactRecordBytes + 8);
  std::vector<uint8_t> ref;
  CodecState a, c;
  size_t used = 0;
  const size_t limit = in.Take<uint16_t>();
  const size_t took = EncodeRun(batch.data(), batch.size(), &a, run.data(),
                                limit == 0 ? run.size() : limit, &used);
  for (size_t i = 0; i < took; ++i) {
    uint8_t buf[kMaxCompactRecordBytes];
    const size_t n = EncodeRecord(batch[i], &c, buf);
    ref.insert(ref.end(), buf, buf + n);
  }
  Check(ref.size() == used &&
        (used == 0 || memcmp(ref.data(), run.data(), used) == 0));
  Check(a == c);
  std::vector<pfm_record> dec(took + 1);
  CodecState d;
  size_t consumed = 0;
  bool malformed = true;
  Check(DecodeRecords(run.data(), used, &d, dec.data(), dec.size(), &consumed,
                      &malformed) == took);
  Check(!malformed && consumed == used && d == a);
  for (size_t i = 0; i < took; ++i)
    Check(memcmp(&dec[i], &batch[i], sizeof(pfm_record)) == 0);
  return 0;
}

}  // namespace pfm::fuzz

#ifdef PFM_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pfm::fuzz::FuzzCompactBatch(data, size);
}
#endif
