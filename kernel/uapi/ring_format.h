// The format of a consumer ring's data, in one place for both of its ends:
// the writer (kernel/ds/ring.cc) and the reader (libpfm-bts/ring_reader.cc),
// as LevelDB's log_format is for its log writer and reader. The shared-memory
// ABI (pfm_ring_header, pfm_record, the memory ordering) is pfm_uapi.h's;
// the record encodings are compact_codec.h's; docs/rings.md explains all
// three. What lives here is what both ends must agree on beyond the ABI
// structs:
//   - the size limits of a ring's data area;
//   - chunk arithmetic and the tail-chunk rule (how far head may run ahead
//     of tail), which the writer obeys and the reader checks;
//   - where decoding may start (sync points), the cursor that walks a data
//     area in either format, and the compact writer's chunk placement;
//   - snapshot decoding: which records of [tail, head) a snapshot returns.
//
// The two ends distrust each other: nothing here assumes the positions it is
// given are sane. Every function stays inside data[0, data_bytes) and
// compares positions as differences, so positions near 2^64 (a hostile
// header) cannot wrap a bound; each end still checks its peer's positions
// itself (RingHeadAllowed) before it relies on them.
//
// Pure functions, no globals, no allocation except where a std::vector is
// filled (snapshots: the control path). Thread-compatible.
#ifndef PFM_KERNEL_UAPI_RING_FORMAT_H_
#define PFM_KERNEL_UAPI_RING_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernel/uapi/bts_translate.h"
#include "kernel/uapi/compact_codec.h"
#include "kernel/uapi/pfm_uapi.h"

namespace pfm {

inline constexpr uint64_t kRingChunk = PFM_RING_CHUNK;
// A ring's data area is a power of two between these. Two chunks at least,
// so that the chunk the tail-chunk rule holds back leaves one to write in;
// 1 GiB at most: a bound on the memory one consumer pins (and is charged
// for), and what a reader accepts from a writer it does not trust.
inline constexpr uint64_t kMinRingDataBytes = 2 * kRingChunk;
inline constexpr uint64_t kMaxRingDataBytes = 1ull << 30;

static_assert(kRingChunk % PFM_RECORD_FIXED_SIZE == 0,
              "fixed records never straddle a chunk");
static_assert(kMaxCompactRecordBytes < kRingChunk,
              "a compact record always fits an empty chunk");

inline constexpr bool IsPowerOfTwo(uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

// The start of the chunk holding position `pos`.
inline constexpr uint64_t ChunkFloor(uint64_t pos) {
  return pos & ~(kRingChunk - 1);
}

// Whether `bytes` may be a ring's data_bytes.
inline constexpr bool IsValidRingDataBytes(uint64_t bytes) {
  return IsPowerOfTwo(bytes) && bytes >= kMinRingDataBytes &&
         bytes <= kMaxRingDataBytes;
}

// The data_bytes of the smallest ring that holds `bytes`: the least power of
// two >= bytes and >= kMinRingDataBytes. Past 2^63 there is none; the answer
// is then 2^63, which IsValidRingDataBytes refuses like any size over the
// maximum.
uint64_t RingDataBytesFor(uint64_t bytes);

inline constexpr bool IsRingFormat(uint32_t format) {
  return format == PFM_FORMAT_FIXED || format == PFM_FORMAT_COMPACT;
}
inline constexpr bool IsRingMode(uint32_t mode) {
  return mode == PFM_RING_HISTORY || mode == PFM_RING_LOSSLESS;
}

// The tail-chunk rule. The writer never reuses the chunk that holds tail: a
// record may end at most at ChunkFloor(tail) + data_bytes. So a reader whose
// tail is mid-chunk can always re-decode that chunk from its start (its sync
// point), after re-mapping or for a non-consuming snapshot, at the cost of
// under one chunk of capacity (nothing in history mode, where tail is always
// chunk-aligned).
//
// Whether the rule lets head reach `head` with the reader at `tail`. The
// writer asks it of the end of a record it is about to write; the reader of
// the head it loaded, to refuse an impossible one. A head below tail's chunk
// is refused (the difference wraps); one inside tail's chunk but below tail
// is not: the writer never asks that, the reader checks head >= tail too.
inline constexpr bool RingHeadAllowed(uint64_t tail, uint64_t head,
                                      uint64_t data_bytes) {
  return head - ChunkFloor(tail) <= data_bytes;
}
// The bytes a writer at `head` may still write under the rule (0 when
// head < tail, which only a misbehaving reader causes).
inline constexpr uint64_t RingRoom(uint64_t tail, uint64_t head,
                                   uint64_t data_bytes) {
  if (head < tail) return 0;
  const uint64_t held = head - ChunkFloor(tail);
  return held >= data_bytes ? 0 : data_bytes - held;
}

// Where decoding must start to reach a record at `pos`: compact records
// depend on the codec state since their chunk start; fixed records carry no
// state, so any record boundary will do.
inline constexpr uint64_t RingSyncPoint(pfm_format format, uint64_t pos) {
  return format == PFM_FORMAT_FIXED ? pos : ChunkFloor(pos);
}

// The compact writer's placement of one record at `head`: resets *st at a
// chunk start and encodes `rec` into out[0, kMaxCompactUnitBytes); when the
// bytes do not fit the rest of head's chunk, encodes it again from a reset
// state for the next chunk (the encoding changes). `reset`: the writer does
// not know the decoder's state at head (a shared batch stopped part-way,
// Ring::WriteCompactBatch): unless head is a chunk start the record is then
// preceded by kResetMarker and encoded from a reset state. Sets *start to
// where the record (or its marker) goes ([head, *start) is padding: a
// PFM_REC_PAD byte, then anything) and returns its size with the marker,
// advancing *st. Returns 0 for a type that is not a ring record type (*st
// is then as a chunk start or marker left it: reset there, untouched
// elsewhere). Inline: it is on the writer's per-record path.
inline size_t PlaceCompactRecord(uint64_t head, const pfm_record& rec,
                                 CodecState* st, uint8_t* out,
                                 uint64_t* start, bool reset = false) {
  const uint64_t off = head % kRingChunk;
  *start = head;
  if (!IsRecordType(rec.type)) {
    if (off == 0 || reset) st->Reset();
    return 0;
  }
  size_t marker = 0;
  if (off == 0 || reset) {
    st->Reset();
    if (off != 0) {
      out[0] = kResetMarker;
      marker = 1;
    }
  }
  size_t size = marker + EncodeRecord(rec, st, out + marker);
  if (off + size > kRingChunk) {
    // Restart in the next chunk, from a reset state: the encoding changes
    // (and the state the first try advanced is not needed).
    *start = ChunkFloor(head) + kRingChunk;
    st->Reset();
    size = EncodeRecord(rec, st, out);
  }
  return size;
}

// Shared encoding (docs/rings.md, "Encode once, copy to every consumer").
// Several compact rings that take the same records get them encoded once:
// the encoder cuts the batch into segments, each of which every ring copies
// whole into one of its chunks. A segment ends where the next record would
// not fit some ring's chunk; that ring pads and starts the next segment at
// its next chunk start, where its decoder resets, so the next segment is
// encoded from a reset state and every other ring writes kResetMarker before
// it. The bytes a ring gets are therefore the ones it would have encoded
// alone with resets at the same places; rings whose heads lie at the same
// offset in their chunks get exactly the bytes a lone writer produces.
//
// At most this many rings share one encoding (a bit each in `pad`).
inline constexpr size_t kMaxSharedRings = 64;

struct CompactSegment {
  uint32_t begin = 0;    // its bytes: CompactBatch::bytes()[begin, end)
  uint32_t end = 0;
  uint32_t records = 0;  // records encoded in it (at least one)
  // Encoded from a reset state: a ring whose head is not at a chunk start
  // writes kResetMarker first.
  bool reset = false;
  // Bit m: ring m writes PAD at its head and starts this segment at its next
  // chunk start (never set for a ring already at a chunk start).
  uint64_t pad = 0;
};

// One batch encoded for up to kMaxSharedRings rings. Allocates at
// construction only; Encode allocates nothing. Thread-compatible.
class CompactBatch {
 public:
  explicit CompactBatch(size_t max_records);
  CompactBatch(const CompactBatch&) = delete;
  CompactBatch& operator=(const CompactBatch&) = delete;

  size_t max_records() const { return max_records_; }

  // Encodes recs[0, n) (n <= max_records(), ring record types) once for
  // `rings` (1..kMaxSharedRings) compact rings whose heads lie offsets[m]
  // bytes into their current chunk (0..kRingChunk - 1). Unless `reset`, every
  // ring's decoder is at *st (a ring at a chunk start is at a reset state);
  // with `reset` the first segment starts from a reset state. Advances *st
  // to the state after the last record (end_state() too).
  void Encode(const pfm_record* recs, size_t n, const uint32_t* offsets,
              size_t rings, bool reset, CodecState* st);
  // The same for a drain's user branches, fused with their translation
  // (EncodeBtsRun): the bytes and segments Encode gives for the records
  // TranslateBts makes of raw[0, n) with times from *clock, which it
  // advances past them. Returns false when a record of raw[0, n) is not a
  // user branch (IsUserBranch): the batch, *clock and *st then hold nothing
  // of use.
  bool EncodeBts(const pfm_bts_raw* raw, size_t n, const BtsOrigin& origin,
                 BtsClock* clock, const uint32_t* offsets, size_t rings,
                 bool reset, CodecState* st);

  const uint8_t* bytes() const { return bytes_.get(); }
  const CompactSegment* segments() const { return segments_.get(); }
  size_t segment_count() const { return nsegments_; }
  size_t records() const { return nrecords_; }
  const CodecState& end_state() const { return end_state_; }

 private:
  // Encode's body, for records from a source (ring_format.cc); false when
  // the source ran dry.
  template <typename Source>
  bool EncodeFrom(Source& src, size_t n, const uint32_t* offsets,
                  size_t rings, bool reset, CodecState* st);

  size_t max_records_;
  std::unique_ptr<uint8_t[]> bytes_;
  std::unique_ptr<CompactSegment[]> segments_;
  size_t nsegments_ = 0;
  size_t nrecords_ = 0;
  CodecState end_state_;
};

// Walks the records of a ring data area (data[p & (data_bytes - 1)] holds
// position p) in either format. Start `pos` at a sync point (RingSyncPoint);
// the cursor resets the codec state at every chunk start and skips PAD.
// Copyable, so a caller can stop and resume (RingReader keeps one across
// Consume calls).
struct RingCursor {
  uint64_t pos = 0;
  CodecState st;

  // Decodes the record at pos if it lies below `end`: returns 1 with *out and
  // its start position *at, then advances pos past it; 0 when pos has
  // reached `end`; -EINVAL for malformed data (a PAD whose chunk end lies
  // beyond `end`, a fixed record with a bad type or cut by `end`, or any
  // DecodeRecord failure) — pos then stays on the bad record. `data_bytes`
  // must be a power-of-two multiple of PFM_RING_CHUNK (the caller validated
  // it); reads stay inside data[0, data_bytes).
  int Next(const uint8_t* data, uint64_t data_bytes, pfm_format format,
           uint64_t end, pfm_record* out, uint64_t* at);

  // Decodes the records at pos that lie below `end` into out[0, max), in
  // order, as repeated Next calls would, a chunk's run at a time (the
  // reader's fast path). Returns how many (0 when pos has reached `end`), or
  // -EINVAL when the record at pos is malformed (as Next); records decoded
  // before a malformed one are returned first, the error on the next call.
  int NextBatch(const uint8_t* data, uint64_t data_bytes, pfm_format format,
                uint64_t end, pfm_record* out, size_t max);
};

// Snapshots (non-consuming reads of [tail, head)).
//
// The lowest position whose bytes a writer obeying the tail-chunk rule has
// not reused when it is at `head`: tail's chunk start, or, when a reader's
// tail lags more than the ring behind head (it moved tail back, or the
// writer raced ahead between two loads), the first chunk start at or above
// head - data_bytes. A snapshot copies or decodes from here.
uint64_t RingSnapshotBase(uint64_t tail, uint64_t head, uint64_t data_bytes);

// Replaces *out with the records that start in [tail, head), oldest first,
// decoded from `data` — a ring's data area, or a copy of it at the same
// offsets that holds at least [RingSnapshotBase(tail, head), head) — and
// keeps only the newest `keep` of them (0: all; history rings keep
// history_records). A tail above head yields nothing. Returns 0, or -EINVAL
// for malformed data, with *out then empty and the position of the bad
// record in *bad_pos (if not null).
int DecodeRingSnapshot(const uint8_t* data, uint64_t data_bytes,
                       pfm_format format, uint64_t tail, uint64_t head,
                       uint64_t keep, std::vector<pfm_record>* out,
                       uint64_t* bad_pos = nullptr);

}  // namespace pfm

#endif  // PFM_KERNEL_UAPI_RING_FORMAT_H_
