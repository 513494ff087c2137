#include "pfm/ring_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pfm {
namespace {

uint64_t Load(const __u64* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

}  // namespace

absl::StatusOr<RingReader> RingReader::Map(UniqueFd fd) {
  if (!fd.valid()) return absl::InvalidArgumentError("ring fd is not open");
  // Without a shrink seal the writer could truncate the file under us and
  // turn every read into SIGBUS. The seal is checked before the size is
  // read: once it is on, the size can never go below what fstat then says,
  // while a size read first could be shrunk before the writer seals.
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
    return absl::InvalidArgumentError(
        "ring memfd is not sealed against shrinking");
  struct stat sb;
  if (fstat(fd.get(), &sb) != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot fstat the ring fd: ", strerror(errno)));
  const uint64_t size = static_cast<uint64_t>(sb.st_size);
  if (!S_ISREG(sb.st_mode) ||
      size < PFM_RING_HEADER_BYTES + kMinRingDataBytes ||
      size > PFM_RING_HEADER_BYTES + kMaxRingDataBytes)
    return absl::InvalidArgumentError(
        absl::StrCat("ring fd of ", size, " bytes is not a ring"));

  void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd.get(), 0);
  if (map == MAP_FAILED)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot map the ring: ", strerror(errno)));
  RingReader r;
  r.fd_ = std::move(fd);
  r.map_ = map;
  r.map_bytes_ = size;
  r.hdr_ = static_cast<pfm_ring_header*>(map);
  r.data_ = static_cast<const uint8_t*>(map) + PFM_RING_HEADER_BYTES;

  // One copy of the header: the writer may change the shared one at will.
  pfm_ring_header h;
  memcpy(&h, map, sizeof(h));
  if (h.magic != PFM_RING_MAGIC)
    return absl::InvalidArgumentError(
        absl::StrCat("ring magic ", absl::Hex(h.magic), ", expected ",
                     absl::Hex(PFM_RING_MAGIC)));
  if (h.version != PFM_UAPI_VERSION)
    return absl::InvalidArgumentError(absl::StrCat(
        "ring version ", unsigned{h.version}, ", expected ", PFM_UAPI_VERSION));
  if (h.header_bytes != PFM_RING_HEADER_BYTES)
    return absl::InvalidArgumentError(
        absl::StrCat("ring header_bytes ", h.header_bytes, ", expected ",
                     PFM_RING_HEADER_BYTES));
  if (h.chunk_bytes != kRingChunk)
    return absl::InvalidArgumentError(absl::StrCat(
        "ring chunk_bytes ", h.chunk_bytes, ", expected ", kRingChunk));
  const uint64_t d = h.data_bytes;
  if (!IsValidRingDataBytes(d) || PFM_RING_HEADER_BYTES + d != size)
    return absl::InvalidArgumentError(
        absl::StrCat("ring data_bytes ", d, " does not match a file of ",
                     size, " bytes"));
  if (!IsRingFormat(h.format))
    return absl::InvalidArgumentError(
        absl::StrCat("ring format ", unsigned{h.format}, " is unknown"));
  if (!IsRingMode(h.mode))
    return absl::InvalidArgumentError(
        absl::StrCat("ring mode ", unsigned{h.mode}, " is unknown"));
  if (h.mode == PFM_RING_HISTORY && h.history_records == 0)
    return absl::InvalidArgumentError("history ring keeps 0 records");
  r.data_bytes_ = d;
  r.format_ = static_cast<pfm_format>(h.format);
  r.mode_ = static_cast<pfm_ring_mode>(h.mode);
  r.history_records_ = h.history_records;

  // Start consuming at the published tail. Mid-chunk (another reader
  // consumed before) the cursor starts at the chunk's sync point and skips
  // what lies below tail: the writer never reuses the chunk holding tail.
  r.tail_ = Load(&r.hdr_->tail);
  r.cursor_.pos = RingSyncPoint(r.format_, r.tail_);
  return r;
}

RingReader::RingReader(RingReader&& o) noexcept { *this = std::move(o); }

RingReader& RingReader::operator=(RingReader&& o) noexcept {
  if (this != &o) {
    Unmap();
    fd_ = std::move(o.fd_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    hdr_ = std::exchange(o.hdr_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    data_bytes_ = o.data_bytes_;
    history_records_ = o.history_records_;
    format_ = o.format_;
    mode_ = o.mode_;
    cursor_ = o.cursor_;
    tail_ = o.tail_;
    status_ = std::move(o.status_);
  }
  return *this;
}

RingReader::~RingReader() { Unmap(); }

void RingReader::Unmap() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
  map_ = nullptr;
  hdr_ = nullptr;
  data_ = nullptr;
}

size_t RingReader::Consume(std::vector<pfm_record>* out, size_t max) {
  if (mode_ != PFM_RING_LOSSLESS || !status_.ok() || max == 0) return 0;
  const uint64_t head = Load(&hdr_->head);
  // The writer keeps head within one ring of the chunk holding our tail.
  if (head < tail_ || !RingHeadAllowed(tail_, head, data_bytes_)) {
    status_ = absl::DataLossError(absl::StrCat(
        "ring head ", head, " is impossible for tail ", tail_));
    return 0;
  }
  size_t n = 0;
  auto malformed = [&] {
    status_ = absl::DataLossError(
        absl::StrCat("malformed record at ring position ", cursor_.pos));
  };
  // Below a tail inherited at Map (mid-chunk), records are decoded for the
  // codec state only, one at a time.
  while (n < max && cursor_.pos < tail_) {
    pfm_record rec;
    uint64_t at = 0;
    const int r = cursor_.Next(data_, data_bytes_, format_, head, &rec, &at);
    if (r <= 0) {
      if (r < 0) malformed();
      break;
    }
    if (at < tail_) continue;
    out->push_back(rec);
    ++n;
  }
  // Then a chunk's run at a time through a buffer that stays in L1.
  constexpr size_t kRun = 128;
  pfm_record run[kRun];
  while (n < max && status_.ok()) {
    const size_t want = max - n < kRun ? max - n : kRun;
    const int r = cursor_.NextBatch(data_, data_bytes_, format_, head, run, want);
    if (r <= 0) {
      if (r < 0) malformed();
      break;
    }
    out->insert(out->end(), run, run + r);
    n += static_cast<size_t>(r);
  }
  if (cursor_.pos > tail_) {
    tail_ = cursor_.pos;
    __atomic_store_n(&hdr_->tail, tail_, __ATOMIC_RELEASE);
  }
  return n;
}

absl::Status RingReader::Snapshot(std::vector<pfm_record>* out) const {
  out->clear();
  const uint64_t tail0 = Load(&hdr_->tail);
  const uint64_t head0 = Load(&hdr_->head);
  if (head0 < tail0)
    return absl::DataLossError(
        absl::StrCat("ring head ", head0, " is below tail ", tail0));
  // The writer may have moved on between the two loads; bytes more than a
  // ring below head0 are gone anyway.
  const uint64_t base = RingSnapshotBase(tail0, head0, data_bytes_);

  // Only [base, head0) is copied (what a ring holding one record holds is
  // one record, not data_bytes_), into a ring of the smallest valid size
  // that holds it: a power of two and a multiple of the chunk, so every
  // position keeps its offset in its chunk and [base, head0) maps to
  // distinct offsets, and decoding walks the copy like the ring. The copy
  // decodes as a whole ring's copy would: the decoding reads [tail1's base,
  // head0) only, and with tail0 <= tail1 <= head0 that base is
  // ChunkFloor(tail1) >= base for either size (the copy is smaller than the
  // ring only when head0 - ChunkFloor(tail0) fits it); a tail1 above head0
  // decodes nothing.
  const uint64_t copy_bytes = RingDataBytesFor(head0 - base);
  std::vector<uint8_t> copy(copy_bytes);
  const uint64_t copy_mask = copy_bytes - 1, ring_mask = data_bytes_ - 1;
  // Advance by the bytes copied, never past head0: p += kRingChunk would
  // wrap for a head near 2^64 (a hostile header; found by
  // fuzz/ring_fuzz.cc). base is a chunk start: no piece crosses a chunk
  // end, in the ring or the copy.
  for (uint64_t p = base; p < head0;) {
    const uint64_t n = head0 - p < kRingChunk ? head0 - p : kRingChunk;
    memcpy(copy.data() + (p & copy_mask), data_ + (p & ring_mask), n);
    p += n;
  }
  // Order the copy before re-reading tail (the seqlock pattern): anything
  // the writer overwrote while we copied lies below the tail it published
  // first.
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  const uint64_t tail1 = Load(&hdr_->tail);
  if (tail1 < tail0)
    return absl::DataLossError(
        absl::StrCat("ring tail went back from ", tail0, " to ", tail1));
  // Decodes from at or above base (tail1 >= tail0), inside the copy.
  uint64_t bad = 0;
  if (DecodeRingSnapshot(copy.data(), copy_bytes, format_, tail1, head0,
                         mode_ == PFM_RING_HISTORY ? history_records_ : 0,
                         out, &bad) != 0)
    return absl::DataLossError(
        absl::StrCat("malformed record at ring position ", bad));
  return absl::OkStatus();
}

bool RingReader::ended() const {
  return (__atomic_load_n(&hdr_->flags, __ATOMIC_ACQUIRE) &
          PFM_RING_F_ENDED) != 0;
}
uint64_t RingReader::records() const { return Load(&hdr_->records); }
uint64_t RingReader::lost() const { return Load(&hdr_->lost); }
uint64_t RingReader::overwritten() const { return Load(&hdr_->overwritten); }

}  // namespace pfm
