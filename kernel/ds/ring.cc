#include "kernel/ds/ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <algorithm>
#include <cstring>
#include <new>

#include "kernel/uapi/compact_codec.h"
#include "kernel/uapi/ring_format.h"

// Space rule (both modes): the tail-chunk rule of kernel/uapi/ring_format.h,
// which the reader checks: a record may end at most at ChunkFloor(tail) +
// data_bytes.

namespace pfm {
namespace {

// Where one record would go: its bytes, its start (after a PAD when it does
// not fit the current chunk) and the codec state after it.
struct Placement {
  uint64_t start = 0;
  uint64_t end = 0;
  size_t size = 0;
  CodecState st;
  uint8_t bytes[PFM_RECORD_FIXED_SIZE];
};
static_assert(kMaxCompactUnitBytes <= PFM_RECORD_FIXED_SIZE,
              "a placed compact record fits Placement::bytes");

// `reset`: compact, the decoder's state at head is not known (see
// PlaceCompactRecord).
void Plan(pfm_format format, uint64_t head, const CodecState& st, bool reset,
          const pfm_record& rec, Placement* p) {
  if (format == PFM_FORMAT_FIXED) {
    pfm_record copy = rec;
    NormalizeRecord(&copy);
    memcpy(p->bytes, &copy, sizeof(copy));
    p->size = sizeof(rec);
    p->start = head;
  } else {
    p->st = st;
    p->size =
        PlaceCompactRecord(head, rec, &p->st, p->bytes, &p->start, reset);
  }
  assert(p->size > 0 && p->size <= sizeof(p->bytes));
  p->end = p->start + p->size;
}

// Debug builds: the batch paths copy records verbatim, so they must come
// of ring record types and normalized (what Write does per record).
void AssertValidAndNormalized([[maybe_unused]] const pfm_record* recs,
                              [[maybe_unused]] size_t n) {
#ifndef NDEBUG
  for (size_t j = 0; j < n; ++j) {
    assert(IsRecordType(recs[j].type));
    pfm_record norm = recs[j];
    NormalizeRecord(&norm);
    assert(memcmp(&norm, &recs[j], sizeof(norm)) == 0);
  }
#endif
}

}  // namespace

struct Ring::State {
  pfm_ring_header* hdr = nullptr;
  uint8_t* data = nullptr;
  RingConfig config;
  CodecState codec;
  // False after a shared batch stopped part-way: `codec` is not the
  // decoder's state at head, and the next record starts with a reset marker.
  bool codec_known = true;
  uint64_t head = 0;
  uint64_t tail = 0;  // history only: the writer owns it
  uint64_t pending_lost = 0;
  uint64_t records = 0;
  uint64_t lost = 0;
  uint64_t overwritten = 0;
  uint64_t nchunks = 0;
  // History: records that start in each chunk slot, added to `overwritten`
  // when the slot's chunk is dropped.
  std::unique_ptr<uint32_t[]> chunk_records;

  // Whether a record ending at `end` may be written now.
  bool Fits(uint64_t end) const;
  // Writes a planned record (and the PAD before it), publishing head.
  void Commit(const Placement& p);
  // History: drops whole chunks until a record ending at `end` fits.
  void MakeRoom(uint64_t end);
  // Fixed format, nothing pending: the record goes straight into its slot
  // (no planning copy; the fan-out's hot path).
  Result WriteFixed(const pfm_record& rec);
  // Fixed format, nothing pending: copies the longest prefix of recs[0..n)
  // (valid, normalized) that fits and does not wrap the data area. Returns
  // its length (0 when the first record does not fit).
  size_t WriteFixedRun(const pfm_record* recs, size_t n);
  // Fixed format: k records were copied to [head, head + 64k); counts them
  // per chunk and publishes head.
  void CommitFixedRun(size_t k);
  void CountLost();
};

// History: data_bytes >= 64 * n + 2 chunks keeps n records. After the writer
// drops the fewest chunks for a record, at least data_bytes - kRingChunk bytes
// of whole chunks lie in [tail, head) and each whole chunk holds at least 64
// records in either format (fixed: exactly 64; compact: records are at most
// 63 bytes and a chunk ends early only when the next record does not fit, so
// more than 4096 - 63 bytes of it are records). Hence >= n + 64 survive.
uint64_t HistoryRingBytes(uint64_t records) {
  constexpr uint64_t kPerRecord =
      kMaxCompactRecordBytes > PFM_RECORD_FIXED_SIZE ? kMaxCompactRecordBytes
                                                     : PFM_RECORD_FIXED_SIZE;
  // Past 2^56 records the product overflows; any such ring is refused
  // (> 1 GiB) anyway, so answer the largest power of two.
  if (records > (1ull << 56)) return 1ull << 63;
  return RingDataBytesFor(records * kPerRecord + 2 * kRingChunk);
}

int Ring::Create(const RingConfig& config, const char* name,
                 std::unique_ptr<Ring>* out, ErrorDetail* detail) {
  const auto ull = [](uint64_t v) {
    return static_cast<unsigned long long>(v);
  };
  if (out == nullptr)
    return SetError(detail, -EINVAL, "Ring::Create needs an output pointer");
  if (!IsValidRingDataBytes(config.data_bytes))
    return SetError(detail, -EINVAL,
                    "ring data_bytes %llu: must be a power of two between "
                    "%llu and %llu",
                    ull(config.data_bytes), ull(kMinRingDataBytes),
                    ull(kMaxRingDataBytes));
  if (!IsRingFormat(config.format))
    return SetError(detail, -EINVAL,
                    "ring format %d: expected fixed (1) or compact (2)",
                    static_cast<int>(config.format));
  if (config.mode == PFM_RING_HISTORY) {
    if (config.history_records == 0)
      return SetError(detail, -EINVAL,
                      "history ring with history_records 0: it must keep at "
                      "least one record");
    if (config.block)
      return SetError(detail, -EINVAL,
                      "block applies to lossless rings only, not history");
    const uint64_t need = HistoryRingBytes(config.history_records);
    if (config.data_bytes < need)
      return SetError(detail, -EINVAL,
                      "history ring of %llu records needs data_bytes >= %llu, "
                      "got %llu",
                      ull(config.history_records), ull(need),
                      ull(config.data_bytes));
  } else if (!IsRingMode(config.mode)) {
    return SetError(detail, -EINVAL,
                    "ring mode %d: expected history (1) or lossless (2)",
                    static_cast<int>(config.mode));
  }

  std::unique_ptr<Ring> ring(new (std::nothrow) Ring());
  std::unique_ptr<State> st(new (std::nothrow) State());
  if (ring == nullptr || st == nullptr)
    return SetError(detail, -ENOMEM, "out of memory for a ring");
  // A power of two: chunk slots are indexed by mask.
  st->nchunks = config.data_bytes / kRingChunk;
  assert(IsPowerOfTwo(st->nchunks));
  st->chunk_records.reset(new (std::nothrow) uint32_t[st->nchunks]());
  if (st->chunk_records == nullptr)
    return SetError(detail, -ENOMEM, "out of memory for %llu chunk counters",
                    ull(st->nchunks));

  const int fd = memfd_create(name != nullptr ? name : "pfm-ring",
                              MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return SetError(detail, -ENOMEM, "memfd_create for a ring failed: %s",
                    strerror(errno));
  // From here ~Ring closes the fd and unmaps.
  ring->fd_ = fd;
  ring->config_ = config;
  const uint64_t bytes = PFM_RING_HEADER_BYTES + config.data_bytes;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    return SetError(detail, -ENOMEM,
                    "cannot size a ring memfd to %llu bytes: %s", ull(bytes),
                    strerror(errno));
  // Readers map the fd; sealing the size means no one can make their
  // mappings fault (SIGBUS) by shrinking it.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return SetError(detail, -ENOMEM, "cannot seal a ring memfd: %s",
                    strerror(errno));
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED)
    return SetError(detail, -ENOMEM, "cannot map a ring of %llu bytes: %s",
                    ull(bytes), strerror(errno));
  ring->map_ = map;
  // The writer never page-faults on the drain path: every page is allocated
  // and mapped writable now (the memory is charged to the session in full
  // anyway). MAP_POPULATE would map a shared mapping read-only, leaving a
  // write fault per page for the first drain; MADV_POPULATE_WRITE (Linux
  // 5.14) does not. Older kernels: touch each page.
  if (madvise(map, bytes, MADV_POPULATE_WRITE) != 0) {
    if (errno != EINVAL)
      return SetError(detail, -ENOMEM,
                      "cannot allocate the %llu bytes of a ring: %s",
                      ull(bytes), strerror(errno));
    for (uint64_t off = 0; off < bytes; off += 4096)
      static_cast<volatile uint8_t*>(map)[off] = 0;
  }
  ring->hdr_ = static_cast<pfm_ring_header*>(map);
  ring->data_ = static_cast<uint8_t*>(map) + PFM_RING_HEADER_BYTES;

  // A fresh memfd is zero-filled: only the non-zero fields need writing.
  pfm_ring_header* h = ring->hdr_;
  h->magic = PFM_RING_MAGIC;
  h->version = PFM_UAPI_VERSION;
  h->format = static_cast<__u8>(config.format);
  h->mode = static_cast<__u8>(config.mode);
  h->header_bytes = PFM_RING_HEADER_BYTES;
  h->chunk_bytes = PFM_RING_CHUNK;
  h->data_bytes = config.data_bytes;
  h->history_records =
      config.mode == PFM_RING_HISTORY ? config.history_records : 0;
  __atomic_store_n(&h->flags,
                   config.block && config.mode == PFM_RING_LOSSLESS
                       ? PFM_RING_F_BLOCK
                       : 0u,
                   __ATOMIC_RELEASE);
  st->hdr = h;
  st->data = ring->data_;
  st->config = config;
  ring->st_ = std::move(st);
  *out = std::move(ring);
  return 0;
}

Ring::~Ring() {
  if (map_ != nullptr)
    munmap(map_, PFM_RING_HEADER_BYTES + config_.data_bytes);
  if (fd_ >= 0) close(fd_);
}

bool Ring::State::Fits(uint64_t end) const {
  if (config.mode == PFM_RING_HISTORY) return true;  // it overwrites
  uint64_t t = __atomic_load_n(&hdr->tail, __ATOMIC_ACQUIRE);
  // The reader owns tail and may be buggy or hostile: a tail beyond head
  // must not let the writer run past what it wrote itself.
  if (t > head) t = head;
  return RingHeadAllowed(t, end, config.data_bytes);
}

void Ring::State::MakeRoom(uint64_t end) {
  State& s = *this;
  if (config.mode == PFM_RING_HISTORY) {
    // Drop whole chunks, publishing the new tail before their bytes are
    // reused so that a concurrent reader can tell what it copied is torn.
    bool dropped = false;
    while (end > s.tail + config.data_bytes) {
      uint32_t& n = s.chunk_records[(s.tail / kRingChunk) & (s.nchunks - 1)];
      s.overwritten += n;
      n = 0;
      s.tail += kRingChunk;
      dropped = true;
    }
    if (dropped) {
      __atomic_store_n(&hdr->tail, s.tail, __ATOMIC_RELEASE);
      __atomic_store_n(&hdr->overwritten, s.overwritten, __ATOMIC_RELEASE);
      // Seqlock order: a release *store* only keeps earlier writes before
      // it; this fence keeps the overwriting memcpy below after the new
      // tail (pairs with the reader's acquire fence before it re-reads tail).
      __atomic_thread_fence(__ATOMIC_RELEASE);
    }
  }
}

Ring::Result Ring::State::WriteFixed(const pfm_record& rec) {
  const uint64_t end = head + PFM_RECORD_FIXED_SIZE;
  if (!Fits(end)) {
    if (config.block) return kWouldBlock;
    ++pending_lost;
    CountLost();
    return kLost;
  }
  MakeRoom(end);
  // Chunks are 64-byte multiples and the data area is page-aligned, so the
  // slot is an aligned pfm_record.
  auto* slot = reinterpret_cast<pfm_record*>(data + (head & (config.data_bytes - 1)));
  memcpy(slot, &rec, sizeof(rec));
  NormalizeRecord(slot);
  uint32_t& n = chunk_records[(head / kRingChunk) & (nchunks - 1)];
  if (head % kRingChunk == 0) n = 0;
  ++n;
  head = end;
  ++records;
  __atomic_store_n(&hdr->records, records, __ATOMIC_RELEASE);
  __atomic_store_n(&hdr->head, head, __ATOMIC_RELEASE);
  return kWritten;
}

size_t Ring::State::WriteFixedRun(const pfm_record* recs, size_t n) {
  constexpr uint64_t kRec = PFM_RECORD_FIXED_SIZE;
  const uint64_t mask = config.data_bytes - 1;
  // Fixed records fill chunks exactly (no PAD), so consecutive chunks are
  // contiguous: a run may span chunks, up to the end of the data area.
  size_t k = std::min<uint64_t>(n, (config.data_bytes - (head & mask)) / kRec);
  if (config.mode == PFM_RING_LOSSLESS) {
    uint64_t t = __atomic_load_n(&hdr->tail, __ATOMIC_ACQUIRE);
    if (t > head) t = head;  // see Fits
    k = std::min<uint64_t>(k, RingRoom(t, head, config.data_bytes) / kRec);
  }
  if (k == 0) return 0;
  const uint64_t end = head + k * kRec;
  MakeRoom(end);
  // One copy for the run (large runs get libc's bulk copy).
  memcpy(data + (head & mask), recs, k * kRec);
  CommitFixedRun(k);
  return k;
}

void Ring::State::CommitFixedRun(size_t k) {
  constexpr uint64_t kRec = PFM_RECORD_FIXED_SIZE;
  const uint64_t end = head + k * kRec;
  for (uint64_t pos = head; pos < end;) {
    const uint64_t in_chunk = std::min<uint64_t>(
        (end - pos) / kRec, (kRingChunk - pos % kRingChunk) / kRec);
    uint32_t& c = chunk_records[(pos / kRingChunk) & (nchunks - 1)];
    if (pos % kRingChunk == 0) c = 0;
    c += static_cast<uint32_t>(in_chunk);
    pos += in_chunk * kRec;
  }
  head = end;
  records += k;
  __atomic_store_n(&hdr->records, records, __ATOMIC_RELEASE);
  __atomic_store_n(&hdr->head, head, __ATOMIC_RELEASE);
}

void Ring::State::Commit(const Placement& p) {
  State& s = *this;
  MakeRoom(p.end);
  const uint64_t mask = config.data_bytes - 1;
  if (p.start != s.head) data[s.head & mask] = PFM_REC_PAD;
  memcpy(data + (p.start & mask), p.bytes, p.size);
  uint32_t& n = s.chunk_records[(p.start / kRingChunk) & (s.nchunks - 1)];
  if (p.start % kRingChunk == 0) n = 0;
  ++n;
  if (config.format == PFM_FORMAT_COMPACT) {
    s.codec = p.st;
    s.codec_known = true;
  }
  s.head = p.end;
  ++s.records;
  __atomic_store_n(&hdr->records, s.records, __ATOMIC_RELEASE);
  __atomic_store_n(&hdr->head, s.head, __ATOMIC_RELEASE);
}

void Ring::State::CountLost() {
  ++lost;
  __atomic_store_n(&hdr->lost, lost, __ATOMIC_RELEASE);
}

static pfm_record LostRecord(const pfm_record& next, uint64_t count) {
  pfm_record lost;
  memset(&lost, 0, sizeof(lost));
  lost.type = PFM_REC_LOST;
  lost.cpu = next.cpu;
  lost.time = next.time;
  lost.pid = next.pid;
  lost.tid = next.tid;
  lost.u.lost.count = count;
  return lost;
}

Ring::Result Ring::Write(const pfm_record& rec) {
  State& s = *st_;
  // A PAD or unknown type cannot be stored; it is counted as lost so the
  // consumer still learns a record went missing.
  if (!IsRecordType(rec.type)) {
    if (config_.mode == PFM_RING_LOSSLESS && !config_.block) ++s.pending_lost;
    s.CountLost();
    return kLost;
  }
  if (config_.format == PFM_FORMAT_FIXED && s.pending_lost == 0)
    return s.WriteFixed(rec);
  Placement p;
  if (s.pending_lost > 0) {
    Plan(config_.format, s.head, s.codec, !s.codec_known,
         LostRecord(rec, s.pending_lost), &p);
    if (!s.Fits(p.end)) {
      ++s.pending_lost;
      s.CountLost();
      return kLost;
    }
    s.Commit(p);
    s.pending_lost = 0;
  }
  Plan(config_.format, s.head, s.codec, !s.codec_known, rec, &p);
  if (!s.Fits(p.end)) {
    if (config_.block) return kWouldBlock;
    // If the LOST record just went in, this record opens the next count.
    ++s.pending_lost;
    s.CountLost();
    return kLost;
  }
  s.Commit(p);
  return kWritten;
}

size_t Ring::WriteValidBatch(const pfm_record* recs, size_t n,
                             CompactBatch* scratch) {
  State& s = *st_;
  AssertValidAndNormalized(recs, n);
  size_t i = 0;
  if (config_.format == PFM_FORMAT_COMPACT && scratch != nullptr) {
    while (i < n) {
      if (s.pending_lost != 0) {
        // The LOST record goes first: the per-record path writes it.
        if (Write(recs[i]) == kWouldBlock) return i;
        ++i;
        continue;
      }
      const size_t k = std::min(n - i, scratch->max_records());
      CodecState st;
      const bool known = DecoderState(&st);
      const uint32_t off = ChunkOffset();
      scratch->Encode(recs + i, k, &off, 1, !known, &st);
      const size_t took = WriteCompactBatch(*scratch, 0, recs + i);
      if (took < k) return i + took;
      i += k;
    }
    return n;
  }
  while (i < n) {
    if (config_.format == PFM_FORMAT_FIXED && s.pending_lost == 0) {
      const size_t k = s.WriteFixedRun(recs + i, n - i);
      i += k;
      if (k > 0) continue;
    }
    // A LOST record to write first, a record that does not fit, or a
    // compact ring: one record at a time.
    if (Write(recs[i]) == kWouldBlock) return i;
    ++i;
  }
  return n;
}

bool Ring::CompactBatchReady() const {
  return config_.format == PFM_FORMAT_COMPACT && st_->pending_lost == 0;
}

uint32_t Ring::ChunkOffset() const {
  return static_cast<uint32_t>(st_->head % kRingChunk);
}

bool Ring::DecoderState(CodecState* st) const {
  if (st_->head % kRingChunk == 0) {
    *st = CodecState();
    return true;
  }
  if (!st_->codec_known) return false;
  *st = st_->codec;
  return true;
}

bool Ring::DecoderAt(const CodecState& st) const {
  // A chunk start is a sync point: the reader resets there.
  if (st_->head % kRingChunk == 0) return st == CodecState();
  return st_->codec_known && st_->codec == st;
}

namespace {
// Where ring `member`, its head at `head`, puts segment `seg` of a shared
// batch: its start (past PAD when the ring starts a chunk for it) and whether
// a reset marker goes first; returns the end.
uint64_t PlaceSegment(const CompactSegment& seg, size_t member, uint64_t head,
                      [[maybe_unused]] bool first, uint64_t* start,
                      size_t* marker) {
  const uint64_t off = head % kRingChunk;
  *start = head;
  *marker = 0;
  if (seg.pad >> member & 1) {
    assert(off != 0);
    *start = ChunkFloor(head) + kRingChunk;
  } else if (seg.reset && off != 0) {
    *marker = 1;
  } else {
    assert(seg.reset || first);  // later segments always start reset
  }
  const uint64_t len = seg.end - seg.begin;
  // The encoder cut the segment to fit this ring's chunk.
  assert(*start % kRingChunk + *marker + len <= kRingChunk);
  return *start + *marker + len;
}
}  // namespace

bool Ring::CompactBatchFits(const CompactBatch& batch, size_t member) const {
  uint64_t head = st_->head, start;
  size_t marker;
  for (size_t g = 0; g < batch.segment_count(); ++g)
    head = PlaceSegment(batch.segments()[g], member, head, g == 0, &start,
                        &marker);
  // Fits is monotone in the end: the last segment's decides.
  return st_->Fits(head);
}

size_t Ring::WriteCompactBatch(const CompactBatch& batch, size_t member,
                               const pfm_record* recs) {
  State& s = *st_;
  const size_t n = batch.records();
  assert(config_.format == PFM_FORMAT_COMPACT && s.pending_lost == 0);
  assert(member < kMaxSharedRings);
  assert(recs != nullptr || CompactBatchFits(batch, member));
  if (recs != nullptr) AssertValidAndNormalized(recs, n);
  const uint64_t mask = config_.data_bytes - 1;
  const uint8_t* const bytes = batch.bytes();
  // The decoder's state where the batch starts (a chunk start resets it).
  const bool started_at_chunk = s.head % kRingChunk == 0;
  size_t taken = 0;
  for (size_t g = 0; g < batch.segment_count(); ++g) {
    const CompactSegment& seg = batch.segments()[g];
    uint64_t start;
    size_t marker;
    const uint64_t end = PlaceSegment(seg, member, s.head, g == 0, &start,
                                      &marker);
    const uint64_t len = seg.end - seg.begin;
    if (!s.Fits(end)) {
      // Lossless, not drained: the rest one by one from this segment's
      // first record, with the decoder's state where the copies stopped, so
      // that the records go on as Write one by one would have put them (the
      // first segment: the ring's state is still its own).
      if (g > 0) {
        const CompactSegment& prev = batch.segments()[g - 1];
        CodecState st;
        if (!prev.reset && !started_at_chunk) st = s.codec;
        for (size_t i = taken - prev.records; i < taken; ++i)
          AdvanceState(recs[i], &st);
        s.codec = st;
        s.codec_known = true;
      }
      break;
    }
    s.MakeRoom(end);
    if (start != s.head) s.data[s.head & mask] = PFM_REC_PAD;
    uint8_t* dst = s.data + (start & mask);
    if (marker) *dst++ = kResetMarker;
    memcpy(dst, bytes + seg.begin, len);
    uint32_t& in_chunk = s.chunk_records[(start / kRingChunk) & (s.nchunks - 1)];
    if (start % kRingChunk == 0) in_chunk = 0;
    in_chunk += seg.records;
    s.head = end;
    s.records += seg.records;
    taken += seg.records;
    // Per segment, not per batch: a history ring's tail (published by
    // MakeRoom) must never pass the head a reader sees.
    __atomic_store_n(&hdr_->records, s.records, __ATOMIC_RELEASE);
    __atomic_store_n(&hdr_->head, s.head, __ATOMIC_RELEASE);
  }
  if (taken == n) {
    s.codec = batch.end_state();
    s.codec_known = true;
    return n;
  }
  for (size_t i = taken; i < n; ++i)
    if (Write(recs[i]) == kWouldBlock) return i;
  return n;
}

pfm_record* Ring::ReserveFixed(size_t n) {
  State& s = *st_;
  if (config_.format != PFM_FORMAT_FIXED || config_.mode != PFM_RING_LOSSLESS ||
      s.pending_lost != 0 || n == 0)
    return nullptr;
  const uint64_t mask = config_.data_bytes - 1;
  const uint64_t end = s.head + n * PFM_RECORD_FIXED_SIZE;
  // Contiguous (no wrap) and inside the free space.
  if ((s.head & mask) + n * PFM_RECORD_FIXED_SIZE > config_.data_bytes ||
      !s.Fits(end))
    return nullptr;
  return reinterpret_cast<pfm_record*>(s.data + (s.head & mask));
}

void Ring::CommitFixed(size_t n) {
  State& s = *st_;
  [[maybe_unused]] const auto* recs = reinterpret_cast<const pfm_record*>(
      s.data + (s.head & (config_.data_bytes - 1)));
  AssertValidAndNormalized(recs, n);
  s.CommitFixedRun(n);
}

void Ring::End() {
  const uint32_t flags = __atomic_load_n(&hdr_->flags, __ATOMIC_RELAXED);
  __atomic_store_n(&hdr_->flags, flags | PFM_RING_F_ENDED, __ATOMIC_RELEASE);
}

uint64_t Ring::records() const { return st_->records; }
uint64_t Ring::lost() const { return st_->lost; }
uint64_t Ring::overwritten() const { return st_->overwritten; }

void Ring::Snapshot(std::vector<pfm_record>* out) const {
  const uint64_t head = st_->head;
  uint64_t tail = st_->tail;
  if (config_.mode == PFM_RING_LOSSLESS) {
    tail = __atomic_load_n(&hdr_->tail, __ATOMIC_ACQUIRE);
    if (tail > head) tail = head;
  }
  // The writer produced these bytes itself, so a decode error is a bug.
  [[maybe_unused]] const int r = DecodeRingSnapshot(
      data_, config_.data_bytes, config_.format, tail, head,
      config_.mode == PFM_RING_HISTORY ? config_.history_records : 0, out);
  assert(r == 0);
}

}  // namespace pfm
