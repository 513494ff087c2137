#include "kernel/uapi/ring_format.h"

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
