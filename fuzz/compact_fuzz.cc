#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_targets.h"
#include "kernel/uapi/compact_codec.h"
#include "kernel/uapi/ring_format.h"

namespace pfm::fuzz {

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

bool SameState(const CodecState& a, const CodecState& b) {
  return a.time == b.time && a.branch_to == b.branch_to &&
         a.branch_flags == b.branch_flags && a.branch_misc == b.branch_misc &&
         a.pid == b.pid && a.tid == b.tid && a.cpu == b.cpu;
}

// Decodes records back to back from `in`, as a reader walks one chunk, and
// checks DecodeRecord's contract on each.
void DecodeRun(const uint8_t* in, size_t avail) {
  CodecState st;
  size_t off = 0;
  while (off < avail) {
    const CodecState before = st;
    pfm_record r;
    memset(&r, 0xA5, sizeof(r));
    pfm_record untouched = r;
    const int n = DecodeRecord(in + off, avail - off, &st, &r);
    if (n <= 0) {
      Check(n == 0 || n == -EINVAL);
      Check(SameState(st, before));
      if (n < 0) Check(memcmp(&r, &untouched, sizeof(r)) == 0);
      return;
    }
    Check(static_cast<size_t>(n) <= avail - off);
    Check(static_cast<size_t>(n) <= kMaxCompactRecordBytes);
    Check(IsRecordType(r.type));
    // Decoded records are normalized and round-trip through the encoder
    // from the same state.
    pfm_record norm = r;
    NormalizeRecord(&norm);
    Check(memcmp(&norm, &r, sizeof(r)) == 0);
    CodecState enc = before;
    uint8_t buf[kMaxCompactRecordBytes + 1];
    const size_t want = EncodedSize(r, before);
    const size_t m = EncodeRecord(r, &enc, buf);
    Check(m > 0 && m == want && m <= kMaxCompactRecordBytes);
    Check(SameState(enc, st));
    CodecState dec = before;
    pfm_record again;
    Check(DecodeRecord(buf, m, &dec, &again) == static_cast<int>(m));
    Check(memcmp(&again, &r, sizeof(r)) == 0);
    Check(SameState(dec, st));
    off += static_cast<size_t>(n);
  }
}

// Walks the input laid out as a ring data area, as RingReader does.
void CursorRun(const uint8_t* data, size_t size, pfm_format format) {
  constexpr uint64_t kDataBytes = 2 * PFM_RING_CHUNK;
  std::vector<uint8_t> area(kDataBytes, 0);
  if (size < 2) return;
  // Two bytes choose the start (and so the wrap) and a window length.
  const uint64_t start = (uint64_t{data[0]} * 97) % kDataBytes;
  const uint64_t window = (uint64_t{data[1]} * 131) % (kDataBytes + 1);
  memcpy(area.data(), data + 2, size - 2 < kDataBytes ? size - 2 : kDataBytes);
  // Positions are absolute (they grow past data_bytes); start on a sync
  // point as the contract asks: a chunk boundary for compact.
  const uint64_t base = 5 * kDataBytes;
  RingCursor c;
  c.pos = base + (format == PFM_FORMAT_COMPACT
                      ? start / PFM_RING_CHUNK * PFM_RING_CHUNK
                      : start / sizeof(pfm_record) * sizeof(pfm_record));
  const uint64_t end = c.pos + window;
  uint64_t last = c.pos;
  for (;;) {
    pfm_record r;
    uint64_t at = 0;
    const uint64_t before = c.pos;
    const int n = c.Next(area.data(), kDataBytes, format, end, &r, &at);
    if (n == 0) {
      Check(c.pos >= end);
      return;
    }
    if (n < 0) {
      Check(n == -EINVAL && c.pos < end);
      return;
    }
    Check(n == 1 && at >= last && at >= before && at < end && c.pos > at &&
          c.pos <= end && IsRecordType(r.type));
    last = c.pos;
  }
}

}  // namespace

int FuzzCompactDecoder(const uint8_t* data, size_t size) {
  DecodeRun(data, size);
  CursorRun(data, size, PFM_FORMAT_COMPACT);
  CursorRun(data, size, PFM_FORMAT_FIXED);
  return 0;
}

}  // namespace pfm::fuzz

#ifdef PFM_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pfm::fuzz::FuzzCompactDecoder(data, size);
}
#endif
