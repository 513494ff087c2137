// A consumer ring: the writer side (kernel/ds), in shared memory (memfd).
//
// Layout and memory ordering are the uapi's (kernel/uapi/pfm_uapi.h,
// "Consumer rings in shared memory"): a 4096-byte pfm_ring_header page, then
// data_bytes of data made of PFM_RING_CHUNK-byte chunks. A record never
// straddles a chunk; a PFM_REC_PAD byte ends a chunk early. In the compact
// encoding the codec state resets at every chunk start (a sync point). The
// rules this writer and the reader share (limits, the tail-chunk rule,
// placement, snapshot decoding) are kernel/uapi/ring_format.h's, so that
// neither side has its own copy to drift.
//
// Modes:
//   history  : the writer overwrites the oldest data, a whole chunk at a
//              time (the writer owns tail and store-releases it *before*
//              reusing the bytes). The data area is sized so that the newest
//              history_records records always survive; a snapshot returns at
//              most that many, newest last.
//   lossless : the reader owns tail. When a record does not fit, it is
//              counted in header.lost and nothing is written; once space
//              returns, a PFM_REC_LOST record {count} is written before the
//              next record. With `block`, Write returns kWouldBlock instead
//              and counts nothing: the caller holds the traced task and
//              retries after the reader drained.
//
// Compact rings also take batches encoded once for several rings
// (WriteCompactBatch; docs/rings.md, "Encode once, copy to every consumer").
//
// Write allocates nothing and never blocks. Not thread-safe: one writer
// (the DS allocator, under its lock); any number of readers in other
// processes map the same memfd (libpfm-bts/include/pfm/ring_reader.h).
#ifndef PFM_KERNEL_DS_RING_H_
#define PFM_KERNEL_DS_RING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernel/uapi/pfm_error.h"
#include "kernel/uapi/pfm_uapi.h"
#include "kernel/uapi/ring_format.h"

namespace pfm {

struct RingConfig {
  uint64_t data_bytes = 0;  // IsValidRingDataBytes (kernel/uapi/ring_format.h)
  pfm_ring_mode mode = PFM_RING_LOSSLESS;
  pfm_format format = PFM_FORMAT_FIXED;
  bool block = false;            // lossless only
  uint64_t history_records = 0;  // history only: > 0
};

// The data bytes a history ring needs so that `records` newest records always
// survive chunk-wise overwriting in either format: a power of two >= the
// records' worst-case encoded size plus two chunks.
uint64_t HistoryRingBytes(uint64_t records);

class Ring {
 public:
  enum Result { kWritten = 0, kLost = 1, kWouldBlock = 2 };

  // Creates the memfd (named `name`, sealed against shrinking), maps it and
  // initialises the header. -EINVAL names a bad config; -ENOMEM when the
  // memfd cannot be created or mapped. Nothing is left allocated on failure.
  static int Create(const RingConfig& config, const char* name,
                    std::unique_ptr<Ring>* out, ErrorDetail* detail);
  ~Ring();  // unmaps and closes the memfd (readers keep their mappings)
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Appends one record. A PAD or unknown type is refused and counted lost.
  // See the modes above.
  Result Write(const pfm_record& rec);
  // Appends recs[0..n) in order, as n calls of Write would (losses counted
  // the same way), and returns how many were taken before one was refused
  // with kWouldBlock (n when none was): the caller counts recs[ret..n) as
  // refused. The records must be of ring record types (IsRecordType) and as
  // NormalizeRecord leaves them (unused union bytes zero), as the fan-out's
  // translated batches are: no per-record check on the copy path, checked by
  // assert only. A fixed ring copies runs of records with one memcpy per
  // chunk and publishes head once per chunk; compact rings encode record by
  // record.
  // `scratch` (compact rings): encode with the batch encoder, in pieces of
  // scratch->max_records(), instead of record by record (the same bytes).
  size_t WriteValidBatch(const pfm_record* recs, size_t n,
                         CompactBatch* scratch = nullptr);
  // Zero-copy writing, for a lossless fixed ring with nothing pending: the
  // slots of the next records, contiguous, for the caller to fill, or null
  // when fewer than n fit there (then use WriteValidBatch). Nothing is
  // visible to readers (the slots are free space past head) until
  // CommitFixed(n) publishes them; a reservation not committed changes
  // nothing.
  pfm_record* ReserveFixed(size_t n);
  // Publishes the n records written into the last ReserveFixed(n) slots
  // (normalized, valid types).
  void CommitFixed(size_t n);
  // Shared compact encoding (kernel/uapi/ring_format.h, CompactBatch): the
  // DS allocator encodes a batch once for every compact ring that takes all
  // of it and each ring copies the bytes. What the encoder needs to know:
  // whether this ring can take such a batch now (compact, no LOST record
  // waiting to go first),
  bool CompactBatchReady() const;
  // where its head lies in its chunk (CompactBatch::Encode's offsets),
  uint32_t ChunkOffset() const;
  // and the state of its decoder at head: false when not known (after a
  // shared batch that stopped part-way), else true with *st (a chunk start
  // is a reset state);
  bool DecoderState(CodecState* st) const;
  // DecoderState(&x) && x == st, without the copy.
  bool DecoderAt(const CodecState& st) const;
  // Appends the records `batch` encoded (recs[0, batch.records()), valid
  // and normalized as for WriteValidBatch) as its ring `member`, copying its
  // segments, and returns how many were taken before a kWouldBlock (all
  // when none). The ring must be CompactBatchReady and have been at
  // batch.Encode's offsets[member], and, unless the batch started with a
  // reset, DecoderAt its starting state. From the first segment that does
  // not fit (a lossless ring the reader has not drained) the records go one
  // by one through Write. For a batch encoded for this ring alone (or for
  // rings at its chunk offset whose decoders were where its was) the result
  // is exactly Write one by one's: bytes, counts, LOST records, kWouldBlock.
  // Otherwise the bytes differ by reset markers and the records they reset,
  // and so, in a full lossless ring, may the record where losses start.
  // `recs` may be null when CompactBatchFits(batch, member): all of it is
  // then taken from the bytes (the fused BTS drain has no records to give).
  size_t WriteCompactBatch(const CompactBatch& batch, size_t member,
                           const pfm_record* recs);
  // Whether WriteCompactBatch(batch, member, ...) would copy every segment
  // now (a history ring always does; a lossless one when its reader left
  // room), going back to no record one by one.
  bool CompactBatchFits(const CompactBatch& batch, size_t member) const;
  // Bytes free for the writer now (lossless: the reader's tail counts;
  // history: always data_bytes minus what one chunk may hold back).
  uint64_t FreeBytes() const {
    const uint64_t head = __atomic_load_n(&hdr_->head, __ATOMIC_RELAXED);
    const uint64_t tail = __atomic_load_n(&hdr_->tail, __ATOMIC_ACQUIRE);
    const uint64_t used = head - tail;
    return used >= config_.data_bytes ? 0 : config_.data_bytes - used;
  }
  // No more records will be written (PFM_RING_F_ENDED). Idempotent.
  void End();

  int fd() const { return fd_; }
  const RingConfig& config() const { return config_; }
  uint64_t records() const;      // records written since creation
  uint64_t lost() const;         // lossless: records counted lost
  uint64_t overwritten() const;  // history: records overwritten
  // Bytes a client reads from: header page + data.
  uint64_t mapped_bytes() const { return PFM_RING_HEADER_BYTES + config_.data_bytes; }

  // The readable records, oldest first, without consuming them (history:
  // at most history_records, the newest). Control path: allocates.
  void Snapshot(std::vector<pfm_record>* out) const;

 private:
  Ring() = default;
  RingConfig config_;
  int fd_ = -1;
  void* map_ = nullptr;
  pfm_ring_header* hdr_ = nullptr;
  uint8_t* data_ = nullptr;
  // Writer-private state (codec state, per-chunk record counts for history,
  // pending LOST count) lives in the implementation.
  struct State;
  std::unique_ptr<State> st_;
};

}  // namespace pfm

#endif  // PFM_KERNEL_DS_RING_H_
