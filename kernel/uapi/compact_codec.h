// The compact record encoding of consumer rings (docs/rings.md). One codec
// for both ends of a ring: the writer (kernel/ds/ring.cc) encodes with it,
// the reader (libpfm-bts/ring_reader.cc) decodes with it. How records are
// laid out in a ring's chunks, and the cursor that walks them, are in
// kernel/uapi/ring_format.h.
//
// Compact record layout (little-endian, varints are unsigned LEB128, at most
// 10 bytes; "zz" = zigzag, so a negative delta stays short):
//
//   lead byte  bits 0-3 type (1..10, never 0: a 0 byte is PFM_REC_PAD)
//              bit 4 cpu follows, bit 5 pid follows, bit 6 tid follows
//              bit 7 misc follows (BRANCH: misc and flags follow)
//   zz(time - previous time in the chunk)
//   [cpu] [pid] [tid] [misc]          absolute varints, present per the bits
//   payload by type:
//     BRANCH    zz(from - previous branch's to), zz(to - from), [flags]
//     PEBS      ip, addr, latency, data_src, event, counter
//     SWITCH_*  other_pid, other_tid
//     LOST      count
//     COUNTER   value, time_enabled, time_running, request
//     THROTTLE  the first union quadword (u.lost.count's slot; the uapi gives
//               THROTTLE no payload yet, so keep 8 bytes in case one is used)
//     RESIZED   old_bytes, new_bytes
//     EXIT      zz(status)
//     SCHEDULE  request, slot (on/off is misc)
//
// Short branch form (lead nibble 0xE), used for a BRANCH whose cpu, pid and
// tid equal the previous record's and whose misc and flags equal the
// previous branch's, or differ from them in the predicted bit only, when it
// is not longer than the form above:
//   lead: 0xE
//         bits 4 and 6, the time delta d against the previous delta p:
//           bit 4 only: d = p;  bits 4+6: d = p + 1;  bit 6 only: d = p - 1;
//           neither: zz(d - p) follows (interpolated BTS stamps step by
//           floor(span / n) or one more, so the first three cover them)
//         bit 5 "`to` equals the predictor's entry for `from`"
//         bit 7 "the predicted bit flipped": misc ^ PFM_MISC_BRANCH_PREDICTED
//           and flags ^ PFM_BTS_RAW_PREDICTED against the previous branch
//   [zz(time delta - previous delta)]  unless bit 4 or 6
//   zz(from - previous branch's to)
//   [zz(to - from)]                    unless bit 5
// The predictor is a direct-mapped table of the last `to` per `from` slot,
// reset with the rest of the state at every chunk (loops and hot branches
// repeat their targets; interpolated BTS times repeat their deltas).
//
// cpu/pid/tid are sent only when they differ from the previous record in the
// chunk; BRANCH misc/flags only when they differ from the previous branch's;
// other types send misc only when it is non-zero.
//
// Escape: when the delta form would exceed kMaxCompactRecordBytes, the record
// is sent as lead byte (type << 4 | 0xF) followed by bytes 2..63 of the fixed
// pfm_record (cpu, misc, time, pid, tid, union), i.e. 63 bytes. That bounds
// every record at kMaxCompactRecordBytes whatever its values.
//
// Reset marker (uapi version 3): a lead byte 0x0D (kResetMarker) before a
// record resets the codec state, as a chunk start does, and the record that
// follows it in the same chunk is encoded from that reset state. It carries no
// record of its own and is never followed by PAD, another marker or the end of
// the chunk. A writer that encodes a batch once for several rings (shared
// encoding, ring_format.h CompactBatch) puts one wherever any of those rings
// starts a new chunk, so that every ring can copy the same bytes; a record and
// its marker are at most kMaxCompactUnitBytes (64) bytes.
//
// Decoded records have the union bytes that do not belong to their type
// zeroed (COUNTER's _pad included); encoders ignore those bytes, so garbage
// there is tolerated and does not round-trip.
//
// Encoded bytes are the same whichever entry point produced them: EncodeRecord
// one record at a time, or EncodeInto (the batch encoder's inner step, see
// ring_format.h). DecodeRecord and DecodeRecords likewise accept the same
// bytes and produce the same records.
//
// All functions are pure (no allocation, thread-compatible), but for one
// process-wide choice: which fast path the batch loops take (see
// CodecFastPath below), set once from the CPU.
#ifndef PFM_KERNEL_UAPI_COMPACT_CODEC_H_
#define PFM_KERNEL_UAPI_COMPACT_CODEC_H_

#include <cstddef>
#include <cstdint>

#include "kernel/uapi/bts_translate.h"
#include "kernel/uapi/pfm_uapi.h"

namespace pfm {

// Upper bound of one encoded compact record (the escape form's size).
inline constexpr size_t kMaxCompactRecordBytes = 63;
// Upper bound of a record with the reset marker before it: what the history
// sizing (HistoryRingBytes) counts per record. Equal to the fixed size, so
// that a chunk holds at least 64 records in either format.
inline constexpr size_t kMaxCompactUnitBytes = kMaxCompactRecordBytes + 1;
// The lead byte of a reset marker (see above): low nibble 0xD, which no type
// and neither special form uses.
inline constexpr uint8_t kResetMarker = 0x0d;

// The lead byte's layout (see above), named once for the codec and for tools
// that inspect encoded bytes (bench/compact.cc attributes bytes to fields).
namespace compact_lead {
inline constexpr uint8_t kTypeMask = 0x0f;
inline constexpr uint8_t kEscape = 0x0f;       // low nibble: escaped record
inline constexpr uint8_t kShortBranch = 0x0e;  // low nibble: short branch
// Long form: which fields follow.
inline constexpr uint8_t kCpuBit = 1u << 4;
inline constexpr uint8_t kPidBit = 1u << 5;
inline constexpr uint8_t kTidBit = 1u << 6;
inline constexpr uint8_t kMiscBit = 1u << 7;
// Short branch form: what was predicted.
inline constexpr uint8_t kTimeSameBit = 1u << 4;
inline constexpr uint8_t kToCachedBit = 1u << 5;
inline constexpr uint8_t kTimeAdjBit = 1u << 6;
inline constexpr uint8_t kPredFlipBit = 1u << 7;
}  // namespace compact_lead

// The field encodings, named for tools that count bytes per field.
// zz(delta): zigzag, so that a small negative delta stays short.
inline constexpr uint64_t ZigZag(uint64_t delta) {
  return (delta << 1) ^ (0 - (delta >> 63));
}
// Bytes of `v` as an unsigned LEB128 varint (1..10), without a loop:
// (floor(log2 v) * 9 + 73) / 64 is 1 below 2^7, 2 below 2^14, ... 10 at 2^63.
inline constexpr size_t VarintBytes(uint64_t v) {
  return (static_cast<size_t>(63 - __builtin_clzll(v | 1)) * 9 + 73) / 64;
}

// Entries of the per-chunk `to` predictor (direct-mapped by `from`).
inline constexpr size_t kToCacheEntries = 16;

// The delta state of one chunk. Reset() at every chunk start: the writer
// before the first record of a chunk, a reader before decoding one.
struct CodecState {
  uint64_t time = 0;
  uint64_t time_delta = 0;  // previous record's time - the one before it
  uint64_t to_cache[kToCacheEntries] = {};  // last `to` seen per `from` slot
  uint64_t branch_to = 0;     // previous BRANCH's `to`
  uint64_t branch_flags = 0;  // previous BRANCH's flags
  uint32_t branch_misc = 0;   // previous BRANCH's misc
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint16_t cpu = 0;

  void Reset() { *this = CodecState(); }
};

// Field-wise equality (the struct has padding): a writer asks it to know
// whether a ring's decoder is where a shared encoder is.
bool operator==(const CodecState& a, const CodecState& b);
inline bool operator!=(const CodecState& a, const CodecState& b) {
  return !(a == b);
}

// True for the types a ring carries (BRANCH..EXIT; not PAD).
inline bool IsRecordType(uint32_t type) {
  return type > PFM_REC_PAD && type < PFM_REC_TYPE_MAX;
}

// Zeroes the union bytes that do not belong to r->type (see above), so the
// fixed and compact formats deliver identical records.
void NormalizeRecord(pfm_record* r);

// Encodes `r` into out[0, kMaxCompactRecordBytes) and returns the bytes
// written, advancing *st. Returns 0 (and leaves *st alone) when r.type is not
// a ring record type. A caller that may discard the bytes (they do not fit)
// encodes with a copy of its state and assigns it back only when it commits
// the bytes; or asks EncodedSize first.
size_t EncodeRecord(const pfm_record& r, CodecState* st, uint8_t* out);

// The size EncodeRecord would return now; does not touch the state.
size_t EncodedSize(const pfm_record& r, const CodecState& st);

// The batch encoder's step: encodes `r` (a ring record type, normalized or
// not) against `st` into out[0, kMaxCompactRecordBytes + 8) — up to 8 bytes
// past the record may be scribbled on — and returns its size, without
// advancing the state: the caller decides whether the bytes fit, then calls
// AdvanceState. EncodeRecord is EncodeInto + AdvanceState with an exact
// output bound.
size_t EncodeInto(const pfm_record& r, const CodecState& st, uint8_t* out);
// The state after `r` (a ring record type) was encoded or decoded.
void AdvanceState(const pfm_record& r, CodecState* st);
// Encodes recs[0, n) (ring record types) back to back into out, advancing
// *st, for as long as the total stays within `limit` bytes: returns the
// records encoded and their bytes in *used. out must be writable for those
// bytes plus kMaxCompactRecordBytes + 8 (the record that did not fit is
// written there too, and a word store may pass a record's end). The same
// bytes as EncodeRecord one by one. The batch encoder's inner loop (a fast
// path for BTS-like branches, the general encoder for anything else).
size_t EncodeRun(const pfm_record* recs, size_t n, CodecState* st,
                 uint8_t* out, size_t limit, size_t* used);
// EncodeRun for a drain's user branches (IsUserBranch), fused with their
// translation: the bytes EncodeRun gives for the records TranslateBts makes
// of raw[0, n) with times from *clock and ids from `origin`, without
// building those records (docs/rings.md, "The fused BTS drain"). Stops
// before the first record that is not a user branch, as before one that does
// not fit `limit`. Advances *clock past the records encoded; *clock must
// stamp at least n more records (clock->n > 0, as a drain's clock has).
size_t EncodeBtsRun(const pfm_bts_raw* raw, size_t n, const BtsOrigin& origin,
                    BtsClock* clock, CodecState* st, uint8_t* out,
                    size_t limit, size_t* used);

// Decodes one record from in[0, avail), with the reset marker before it if
// there is one. Returns the bytes consumed (at most kMaxCompactUnitBytes) and
// fills *out, advancing *st; 0 when in[0] is PFM_REC_PAD (rest of the chunk
// is padding); -EINVAL when the bytes are malformed, the type unknown, a
// field overflows its width, the record is longer than a writer may make it
// (kMaxCompactUnitBytes with its marker), a marker is not followed by a
// record, or the record is cut by `avail` (including avail == 0). Never
// reads in[avail] or beyond. On failure neither *st nor *out is modified.
int DecodeRecord(const uint8_t* in, size_t avail, CodecState* st,
                 pfm_record* out);

// Decodes records back to back from in[0, avail) into out[0, max), as
// repeated DecodeRecord calls would, with a fast path for short branches.
// Stops before a PAD byte, at the end of the input, after `max` records, or
// before malformed bytes (then *malformed = true; the bad bytes start at
// in[*used]). Returns the records decoded; *used is the bytes they took.
// *st is advanced past the decoded records only. Never reads in[avail] or
// beyond.
size_t DecodeRecords(const uint8_t* in, size_t avail, CodecState* st,
                     pfm_record* out, size_t max, size_t* used,
                     bool* malformed);

// The batch loops' fast paths (EncodeRun's and DecodeRecords' loops for short
// branches with predicted times) have two implementations that give the same
// bytes and records: portable x86-64 code, and one that spreads and gathers
// varints with BMI2's pdep/pext (and lzcnt), used on CPUs where those are
// fast (Intel since Haswell, AMD since Zen 3; docs/rings.md). Named for the
// tests that hold them to each other and the benchmark that compares them.
enum class CodecFastPath { kPortable, kBmi2 };
// Whether this CPU can run `path` (kBmi2: BMI1, BMI2 and lzcnt present, fast
// or not).
bool CodecFastPathRuns(CodecFastPath path);
// The one EncodeRun and DecodeRecords use: chosen by the CPU at start-up, or
// the last one set. SetCodecFastPath (tests and benchmarks; process-wide,
// not to be called while another thread encodes or decodes) returns false
// and changes nothing when `path` does not run here.
CodecFastPath CurrentCodecFastPath();
bool SetCodecFastPath(CodecFastPath path);
const char* CodecFastPathName(CodecFastPath path);

}  // namespace pfm

#endif  // PFM_KERNEL_UAPI_COMPACT_CODEC_H_
