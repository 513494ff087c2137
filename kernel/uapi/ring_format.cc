#include "kernel/uapi/ring_format.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

namespace pfm {

uint64_t RingDataBytesFor(uint64_t bytes) {
  constexpr uint64_t kTop = 1ull << 63;
  if (bytes > kTop) return kTop;
  uint64_t p = kMinRingDataBytes;
  while (p < bytes) p <<= 1;
  return p;
}

int RingCursor::Next(const uint8_t* data, uint64_t data_bytes,
                     pfm_format format, uint64_t end, pfm_record* out,
                     uint64_t* at) {
  const uint64_t mask = data_bytes - 1;
  for (;;) {
    if (pos >= end) return 0;
    const uint64_t off = pos % kRingChunk;
    if (off == 0) st.Reset();
    const uint64_t room = kRingChunk - off;
    const size_t avail =
        static_cast<size_t>(end - pos < room ? end - pos : room);
    const uint8_t* p = data + (pos & mask);
    if (format == PFM_FORMAT_FIXED) {
      if (avail < sizeof(pfm_record)) return -EINVAL;
      pfm_record r;
      memcpy(&r, p, sizeof(r));
      if (!IsRecordType(r.type)) return -EINVAL;
      *out = r;
      *at = pos;
      pos += sizeof(r);
      return 1;
    }
    const int n = DecodeRecord(p, avail, &st, out);
    if (n < 0) return n;
    if (n == 0) {
      // The writer publishes a PAD together with the record that starts the
      // next chunk, so a PAD whose chunk end is not below `end` is bogus.
      // (Compared as a distance: pos + room wraps for positions near 2^64,
      // which a hostile ring header can claim; found by fuzz/ring_fuzz.cc.)
      if (room >= end - pos) return -EINVAL;
      pos += room;
      continue;
    }
    *at = pos;
    pos += static_cast<uint64_t>(n);
    return 1;
  }
}

int RingCursor::NextBatch(const uint8_t* data, uint64_t data_bytes,
                          pfm_format format, uint64_t end, pfm_record* out,
                          size_t max) {
  const uint64_t mask = data_bytes - 1;
  size_t k = 0;
  while (k < max) {
    if (pos >= end) break;
    const uint64_t off = pos % kRingChunk;
    const uint64_t room = kRingChunk - off;
    const size_t avail =
        static_cast<size_t>(end - pos < room ? end - pos : room);
    const uint8_t* p = data + (pos & mask);
    if (format == PFM_FORMAT_FIXED) {
      const size_t n = std::min(max - k, avail / sizeof(pfm_record));
      size_t j = 0;
      for (; j < n; ++j) {
        memcpy(&out[k + j], p + j * sizeof(pfm_record), sizeof(pfm_record));
        if (!IsRecordType(out[k + j].type)) break;
      }
      k += j;
      pos += j * sizeof(pfm_record);
      if (j < n || n == 0) break;  // a bad record or one cut by end: Next says
      continue;
    }
    if (off == 0) st.Reset();
    size_t used = 0;
    bool malformed = false;
    const size_t want = max - k;
    const size_t got =
        DecodeRecords(p, avail, &st, out + k, want, &used, &malformed);
    k += got;
    pos += used;
    if (malformed || got == want) break;  // Next reports the bad record
    if (used < avail) {
      // Stopped at a PAD. As in Next: the writer publishes a PAD with the
      // record that starts the next chunk, so one whose chunk end is not
      // below `end` is bogus (left for Next to report).
      const uint64_t rest = room - used;
      if (rest >= end - pos) break;
      pos += rest;
    }
    // Else the run reached `end` or the end of its chunk.
  }
  if (k > 0) return static_cast<int>(k);
  // Nothing decoded: Next reports the end or the malformed record.
  pfm_record r;
  uint64_t at;
  if (pos >= end) return 0;
  const int n = Next(data, data_bytes, format, end, &r, &at);
  if (n <= 0) return n;
  out[0] = r;
  return 1;
}

// Shared encoding (see the header).
CompactBatch::CompactBatch(size_t max_records)
    : max_records_(max_records),
      // Every record may be escaped and carry a marker; EncodeInto may write
      // 8 bytes past the last one.
      bytes_(new uint8_t[max_records * kMaxCompactUnitBytes + 8]),
      segments_(new CompactSegment[max_records + 1]) {}

namespace {

// The records CompactBatch::EncodeFrom encodes: At(i) is record i (asked
// again until Took(i) says it was encoded alone), Run encodes a run from
// record i on (EncodeRun's contract). Failed(): a record it cannot give.
struct RecordSource {
  const pfm_record* recs;
  static constexpr bool Failed() { return false; }
  const pfm_record& At(size_t i) { return recs[i]; }
  void Took(size_t) {}
  size_t Run(size_t i, size_t n, CodecState* st, uint8_t* out, size_t limit,
             size_t* used) {
    return EncodeRun(recs + i, n, st, out, limit, used);
  }
};

// A drain's user branches, translated only where one is encoded alone;
// fails at a record that is not one.
struct BtsSource {
  const pfm_bts_raw* raw;
  BtsOrigin origin;
  BtsClock* clock;  // at record i
  pfm_record rec;
  bool failed = false;
  bool Failed() const { return failed; }
  const pfm_record& At(size_t i) {
    failed = failed || !IsUserBranch(raw[i]);
    TranslateBts(raw[i], clock->Peek(), origin, &rec);
    return rec;
  }
  void Took(size_t) { clock->Advance(); }
  size_t Run(size_t i, size_t n, CodecState* st, uint8_t* out, size_t limit,
             size_t* used) {
    const size_t k =
        EncodeBtsRun(raw + i, n, origin, clock, st, out, limit, used);
    // Stopped before a record that is not a user branch (or one that did
    // not fit; either way the batch cannot go on fused).
    failed = failed || (k < n && !IsUserBranch(raw[i + k]));
    return k;
  }
};

}  // namespace

void CompactBatch::Encode(const pfm_record* recs, size_t n,
                          const uint32_t* offsets, size_t rings, bool reset,
                          CodecState* st) {
  RecordSource src{recs};
  EncodeFrom(src, n, offsets, rings, reset, st);
}

bool CompactBatch::EncodeBts(const pfm_bts_raw* raw, size_t n,
                             const BtsOrigin& origin, BtsClock* clock,
                             const uint32_t* offsets, size_t rings, bool reset,
                             CodecState* st) {
  BtsSource src{raw, origin, clock, {}};
  return EncodeFrom(src, n, offsets, rings, reset, st);
}

template <typename Source>
bool CompactBatch::EncodeFrom(Source& src, size_t n, const uint32_t* offsets,
                              size_t rings, bool reset, CodecState* st) {
  assert(n <= max_records_ && rings >= 1 && rings <= kMaxSharedRings);
  nsegments_ = nrecords_ = 0;  // until it succeeds
  uint32_t off[kMaxSharedRings];
  for (size_t m = 0; m < rings; ++m) {
    assert(offsets[m] < kRingChunk);
    off[m] = offsets[m];
  }
  uint8_t* const bytes = bytes_.get();
  size_t nseg = 0, pos = 0, i = 0;
  while (i < n) {
    // A segment: its first record decides who pads; then records follow as
    // long as they fit every ring's chunk.
    if (reset) st->Reset();
    const pfm_record& first_rec = src.At(i);
    if (src.Failed()) return false;
    size_t size = EncodeInto(first_rec, *st, bytes + pos);
    uint64_t pad = 0;
    size_t limit = kRingChunk;
    bool restart = false;
    for (size_t m = 0; m < rings; ++m) {
      if (off[m] == 0) continue;  // a fresh chunk holds any record
      const size_t marker = reset ? 1 : 0;
      if (off[m] + marker + size > kRingChunk) {
        if (!reset) {
          // This ring's decoder resets at its next chunk: so must the
          // segment (the batch's first; later ones start reset anyway).
          restart = true;
          break;
        }
        pad |= uint64_t{1} << m;
        continue;
      }
      limit = std::min<size_t>(limit, kRingChunk - off[m] - marker);
    }
    if (restart) {
      reset = true;
      continue;
    }
    AdvanceState(first_rec, st);
    src.Took(i);
    const size_t first = i++;
    size_t more = 0;
    i += src.Run(i, n - i, st, bytes + pos + size, limit - size, &more);
    if (src.Failed()) return false;
    const size_t len = size + more;
    CompactSegment& seg = segments_[nseg++];
    seg.begin = static_cast<uint32_t>(pos);
    seg.end = static_cast<uint32_t>(pos + len);
    seg.records = static_cast<uint32_t>(i - first);
    seg.reset = reset;
    seg.pad = pad;
    for (size_t m = 0; m < rings; ++m) {
      const size_t at = (pad >> m & 1) ? 0 : off[m];
      const size_t marker = reset && at != 0 ? 1 : 0;
      off[m] = static_cast<uint32_t>((at + marker + len) % kRingChunk);
    }
    pos += len;
    // The next segment exists because a record did not fit some ring's
    // chunk: that ring starts a new chunk, so the state resets for all.
    reset = true;
  }
  nsegments_ = nseg;
  nrecords_ = n;
  end_state_ = *st;
  return true;
}

uint64_t RingSnapshotBase(uint64_t tail, uint64_t head, uint64_t data_bytes) {
  const uint64_t base = ChunkFloor(tail);
  if (head < base || head - base <= data_bytes) return base;
  // Round head - data_bytes up to a chunk start (no overflow: data_bytes is
  // at least two chunks).
  return ChunkFloor(head - data_bytes + kRingChunk - 1);
}

int DecodeRingSnapshot(const uint8_t* data, uint64_t data_bytes,
                       pfm_format format, uint64_t tail, uint64_t head,
                       uint64_t keep, std::vector<pfm_record>* out,
                       uint64_t* bad_pos) {
  out->clear();
  // The writer may have moved tail past the head the caller loaded (history
  // mode, the reader was slow): everything it saw may be torn.
  if (tail > head) return 0;
  const uint64_t base = RingSnapshotBase(tail, head, data_bytes);
  const uint64_t sync = RingSyncPoint(format, tail);
  RingCursor cur;
  cur.pos = sync > base ? sync : base;
  // Records from the sync point up to tail are decoded only to get the codec
  // state right; they were consumed (or dropped) before.
  const uint64_t keep_from = tail > base ? tail : base;
  pfm_record rec;
  uint64_t at = 0;
  for (;;) {
    const int r = cur.Next(data, data_bytes, format, head, &rec, &at);
    if (r == 0) break;
    if (r < 0) {
      out->clear();
      if (bad_pos != nullptr) *bad_pos = cur.pos;
      return r;
    }
    if (at >= keep_from) out->push_back(rec);
  }
  if (keep != 0 && out->size() > keep)
    out->erase(out->begin(), out->end() - static_cast<ptrdiff_t>(keep));
  return 0;
}

}  // namespace pfm
