// The fused BTS drain's encoder (docs/rings.md, "The fused BTS drain")
// against the translate-then-encode path it replaces: for a drain's raw BTS
// records steered by the input, CompactBatch::EncodeBts must give exactly
// the segments, bytes and end state CompactBatch::Encode gives for the
// records TranslateBts makes of them, or refuse the batch when (and only
// when) one of them is not a user branch; EncodeBtsRun likewise against
// EncodeRun, with the same stop and the same clock after it.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz/codec_fuzz.h"
#include "fuzz/fuzz_targets.h"
#include "kernel/uapi/bts_translate.h"
#include "kernel/uapi/compact_codec.h"
#include "kernel/uapi/ring_format.h"

namespace pfm::fuzz {

namespace {

// Raw records as a DS area holds them: mostly user branches with small
// deltas, repeated targets and predicted-bit flips; now and then a far
// target, any flag bits, a kernel `from` or a gap marker.
std::vector<pfm_bts_raw> Raw(Input& in, size_t max) {
  std::vector<pfm_bts_raw> out;
  uint64_t to = 0x400000;
  while (out.size() < max && in.n > 0) {
    const uint8_t op = in.Take<uint8_t>();
    pfm_bts_raw b;
    b.from = to + (op >> 2 & 31);
    b.to = 0x400000 + (op & 0x60) * 4;
    b.flags = op & 1 ? PFM_BTS_RAW_PREDICTED : 0;
    if (op >= 240) {
      switch (op & 7) {
        case 0: b.to = in.Take<uint64_t>() >> (in.Take<uint8_t>() % 64); break;
        case 1: b.from = in.Take<uint64_t>(); break;
        case 2: b.flags = in.Take<uint64_t>(); break;
        case 3: b.flags |= PFM_BTS_RAW_GAP; break;
        case 4: b.from = PFM_X86_USER_ADDR_END + in.Take<uint16_t>(); break;
        default: b.to = b.from + in.Take<int16_t>(); break;
      }
    }
    out.push_back(b);
    to = b.to;
  }
  return out;
}

bool SameSegment(const CompactSegment& a, const CompactSegment& b) {
  return a.begin == b.begin && a.end == b.end && a.records == b.records &&
         a.reset == b.reset && a.pad == b.pad;
}

}  // namespace

int FuzzCompactBts(const uint8_t* data, size_t size) {
  const OnPathFor path(size);
  Input in{data, size};
  const BtsOrigin origin{in.Take<uint16_t>(), in.Take<uint32_t>(),
                         in.Take<uint32_t>()};
  // The drain's clock: its window and how many records it stamps (at least
  // those here; a drain's batch may be a part of its records).
  const uint64_t t0 = in.Take<uint64_t>();
  const uint8_t span_kind = in.Take<uint8_t>();
  const uint64_t span = span_kind < 128 ? span_kind
                        : span_kind < 192 ? in.Take<uint32_t>()
                                          : in.Take<uint64_t>();
  // Rings and their heads' offsets in their chunks; the state they start
  // from: reset, or the state after a few translated records.
  const size_t rings = 1 + in.Take<uint8_t>() % 6;
  uint32_t offsets[kMaxSharedRings];
  for (size_t m = 0; m < rings; ++m)
    offsets[m] = in.Take<uint16_t>() % kRingChunk;
  const bool reset = in.Take<uint8_t>() % 2 == 0;
  const size_t limit_in = in.Take<uint16_t>();
  constexpr size_t kMaxRecords = 600;
  const std::vector<pfm_bts_raw> before = Raw(in, 8);
  const std::vector<pfm_bts_raw> raw = Raw(in, kMaxRecords);
  if (raw.empty()) return 0;
  const uint64_t extra = in.Take<uint8_t>();
  BtsClock clock0(t0, span, before.size() + raw.size() + extra);
  CodecState st0;
  for (const pfm_bts_raw& b : before) {
    pfm_record r;
    TranslateBts(b, clock0.Next(), origin, &r);
    AdvanceState(r, &st0);
  }
  // The translation, as the drain makes it.
  std::vector<pfm_record> recs;
  BtsClock cr = clock0;
  bool all_user = true;
  for (const pfm_bts_raw& b : raw) {
    pfm_record r;
    TranslateBts(b, cr.Next(), origin, &r);
    recs.push_back(r);
    all_user = all_user && IsUserBranch(b);
  }

  // The batch, both ways.
  CompactBatch want(kMaxRecords), got(kMaxRecords);
  CodecState sw = st0, sg = st0;
  want.Encode(recs.data(), recs.size(), offsets, rings, reset, &sw);
  BtsClock cg = clock0;
  const bool ok =
      got.EncodeBts(raw.data(), raw.size(), origin, &cg, offsets, rings, reset, &sg);
  Check(ok == all_user);
  if (ok) {
    Check(got.records() == want.records());
    Check(got.segment_count() == want.segment_count());
    for (size_t g = 0; g < want.segment_count(); ++g) {
      const CompactSegment& a = want.segments()[g];
      Check(SameSegment(a, got.segments()[g]));
      Check(memcmp(want.bytes() + a.begin, got.bytes() + a.begin,
                   a.end - a.begin) == 0);
    }
    Check(sg == sw && got.end_state() == want.end_state());
    Check(cg.Peek() == cr.Peek() && cg.acc_r == cr.acc_r);
  } else {
    Check(got.records() == 0 && got.segment_count() == 0);
  }

  // The run encoder, both ways, with a limit: EncodeBtsRun stops where
  // EncodeRun stops or before the first record that is not a user branch.
  std::vector<uint8_t> a(raw.size() * kMaxCompactRecordBytes + 8),
      b(raw.size() * kMaxCompactRecordBytes + 8);
  const size_t limit = limit_in == 0 ? a.size() - 8 : limit_in;
  size_t user = 0;
  while (user < raw.size() && IsUserBranch(raw[user])) ++user;
  CodecState ra = st0, rb = st0;
  size_t used_a = 0, used_b = 0;
  const size_t ka = EncodeRun(recs.data(), user, &ra, a.data(), limit, &used_a);
  BtsClock cb = clock0;
  const size_t kb = EncodeBtsRun(raw.data(), raw.size(), origin, &cb, &rb,
                                 b.data(), limit, &used_b);
  Check(ka == kb && used_a == used_b && ra == rb);
  Check(used_a == 0 || memcmp(a.data(), b.data(), used_a) == 0);
  BtsClock ck = clock0;
  for (size_t i = 0; i < ka; ++i) ck.Advance();
  Check(cb.Peek() == ck.Peek() && cb.acc_r == ck.acc_r);
  return 0;
}

}  // namespace pfm::fuzz

#ifdef PFM_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pfm::fuzz::FuzzCompactBts(data, size);
}
#endif
