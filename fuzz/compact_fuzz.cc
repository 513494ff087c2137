#include <algorithm>
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
    // A record is at most kMaxCompactRecordBytes; a reset marker before it
    // makes it one more and means it was decoded from a reset state.
    const bool marker = in[off] == kResetMarker;
    Check(static_cast<size_t>(n) <=
          (marker ? kMaxCompactUnitBytes : kMaxCompactRecordBytes));
    Check(IsRecordType(r.type));
    // Decoded records are normalized and round-trip through the encoder
    // from the same state.
    pfm_record norm = r;
    NormalizeRecord(&norm);
    Check(memcmp(&norm, &r, sizeof(r)) == 0);
    const CodecState from = marker ? CodecState() : before;
    CodecState enc = from;
    uint8_t buf[kMaxCompactRecordBytes + 1];
    const size_t want = EncodedSize(r, from);
    const size_t m = EncodeRecord(r, &enc, buf);
    Check(m > 0 && m == want && m <= kMaxCompactRecordBytes);
    Check(SameState(enc, st));
    CodecState dec = from;
    pfm_record again;
    Check(DecodeRecord(buf, m, &dec, &again) == static_cast<int>(m));
    Check(memcmp(&again, &r, sizeof(r)) == 0);
    Check(SameState(dec, st));
    off += static_cast<size_t>(n);
  }
}

// DecodeRecords (the batch decoder) over the input gives what DecodeRecord
// gives one by one: the same records, state, stopping point and verdict.
void BatchRun(const uint8_t* in, size_t avail) {
  CodecState one;
  std::vector<pfm_record> want;
  size_t off = 0;
  int last = 1;
  while (off < avail) {
    pfm_record r;
    last = DecodeRecord(in + off, avail - off, &one, &r);
    if (last <= 0) break;
    want.push_back(r);
    off += static_cast<size_t>(last);
  }
  // Each fast path this CPU runs (portable, BMI2), the chosen one last.
  const CodecFastPath chosen = CurrentCodecFastPath();
  for (CodecFastPath path : {CodecFastPath::kPortable, CodecFastPath::kBmi2,
                              chosen}) {
    if (!SetCodecFastPath(path)) continue;
    std::vector<pfm_record> got(want.size() + 1);
    CodecState batch;
    size_t used = 0;
    bool malformed = false;
    const size_t k = DecodeRecords(in, avail, &batch, got.data(), got.size(),
                                   &used, &malformed);
    Check(k == want.size() && used == off && SameState(batch, one));
    Check(malformed == (off < avail && last < 0));
    for (size_t i = 0; i < k; ++i)
      Check(memcmp(&got[i], &want[i], sizeof(pfm_record)) == 0);
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

// The reader's batch path over the same area: NextBatch gives the records
// Next gives, then the same end or error at the same position.
void CursorBatchRun(const uint8_t* data, size_t size, pfm_format format) {
  constexpr uint64_t kDataBytes = 2 * PFM_RING_CHUNK;
  std::vector<uint8_t> area(kDataBytes, 0);
  if (size < 2) return;
  const uint64_t start = (uint64_t{data[0]} * 97) % kDataBytes;
  const uint64_t window = (uint64_t{data[1]} * 131) % (kDataBytes + 1);
  memcpy(area.data(), data + 2, size - 2 < kDataBytes ? size - 2 : kDataBytes);
  const uint64_t base = 5 * kDataBytes;
  RingCursor one, batch;
  one.pos = batch.pos =
      base + (format == PFM_FORMAT_COMPACT
                  ? start / PFM_RING_CHUNK * PFM_RING_CHUNK
                  : start / sizeof(pfm_record) * sizeof(pfm_record));
  const uint64_t end = one.pos + window;
  std::vector<pfm_record> want;
  int last;
  for (;;) {
    pfm_record r;
    uint64_t at;
    last = one.Next(area.data(), kDataBytes, format, end, &r, &at);
    if (last <= 0) break;
    want.push_back(r);
  }
  std::vector<pfm_record> got(want.size() + 8);
  size_t k = 0;
  int n;
  do {
    Check(k < got.size());
    const size_t max = std::min<size_t>(1 + k % 5, got.size() - k);
    n = batch.NextBatch(area.data(), kDataBytes, format, end, got.data() + k,
                        max);
    if (n > 0) k += static_cast<size_t>(n);
  } while (n > 0);
  Check(n == last && k == want.size() && batch.pos == one.pos);
  for (size_t i = 0; i < k; ++i)
    Check(memcmp(&got[i], &want[i], sizeof(pfm_record)) == 0);
}

}  // namespace

int FuzzCompactDecoder(const uint8_t* data, size_t size) {
  DecodeRun(data, size);
  BatchRun(data, size);
  CursorRun(data, size, PFM_FORMAT_COMPACT);
  CursorRun(data, size, PFM_FORMAT_FIXED);
  CursorBatchRun(data, size, PFM_FORMAT_COMPACT);
  CursorBatchRun(data, size, PFM_FORMAT_FIXED);
  return 0;
}

}  // namespace pfm::fuzz

#ifdef PFM_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pfm::fuzz::FuzzCompactDecoder(data, size);
}
#endif
