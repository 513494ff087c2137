// The client side of a consumer ring: maps the memfd pfmd handed over and
// reads records from it (layout and memory ordering: kernel/uapi/pfm_uapi.h,
// "Consumer rings in shared memory"; docs/rings.md).
//
// The writer is another process and is not trusted: Map validates the header
// against the file before touching data, the geometry (data_bytes, format,
// mode, history_records) is read once at Map and never again, every
// head/tail value is checked before use, and malformed data yields DATA_LOSS,
// never a crash or a read outside the mapping. The memfd must be sealed
// against shrinking (pfmd's rings are), so the mapping cannot fault. The
// rules it checks the writer against (limits, the tail-chunk rule, sync
// points, snapshot decoding) are the writer's own: kernel/uapi/ring_format.h.
//
// Consume is for lossless rings and assumes this reader is the only one
// consuming (it owns tail); any number of readers may Snapshot.
//
// Thread-compatible: one thread uses a RingReader at a time.
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_RING_READER_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_RING_READER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernel/uapi/pfm_uapi.h"
#include "kernel/uapi/ring_format.h"
#include "pfm/unique_fd.h"

namespace pfm {

class RingReader {
 public:
  // Maps a ring memfd read-write (in lossless mode the reader publishes
  // tail). Checks magic, version, header_bytes, chunk size, format, mode and
  // data_bytes against the file size and seals; anything else, or a bad fd,
  // is INVALID_ARGUMENT. Takes ownership of `fd`.
  static absl::StatusOr<RingReader> Map(UniqueFd fd);

  RingReader(RingReader&& o) noexcept;
  RingReader& operator=(RingReader&& o) noexcept;
  RingReader(const RingReader&) = delete;
  RingReader& operator=(const RingReader&) = delete;
  ~RingReader();  // unmaps

  // Lossless: appends the records in [tail, head) to *out (at most `max`)
  // and publishes the new tail (store-release), so the writer may reuse the
  // space. Returns how many were appended. History rings: returns 0 (use
  // Snapshot). After malformed data or an impossible head/tail it stops for
  // good and returns 0; status() says why.
  size_t Consume(std::vector<pfm_record>* out, size_t max = SIZE_MAX);
  // OK, or the DATA_LOSS that stopped Consume.
  const absl::Status& status() const { return status_; }

  // Any mode, non-consuming: replaces *out with the readable records, oldest
  // first. History: copies [tail0, head), re-reads tail as tail1 and drops
  // anything that started below tail1 (possibly torn by the writer), then
  // keeps the newest history_records. DATA_LOSS on malformed data. Memory:
  // the bytes that hold records (from tail's chunk start to head, rounded
  // up to a power of two), not data_bytes().
  absl::Status Snapshot(std::vector<pfm_record>* out) const;

  bool ended() const;  // PFM_RING_F_ENDED
  uint64_t records() const;
  uint64_t lost() const;
  uint64_t overwritten() const;
  // The live shared header. Fields other than the counters are as validated
  // at Map only if the writer behaves; this reader uses its own copies.
  const pfm_ring_header& header() const { return *hdr_; }
  pfm_format format() const { return format_; }
  pfm_ring_mode mode() const { return mode_; }
  uint64_t data_bytes() const { return data_bytes_; }

 private:
  RingReader() = default;
  void Unmap();

  UniqueFd fd_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  pfm_ring_header* hdr_ = nullptr;
  const uint8_t* data_ = nullptr;
  // Validated once at Map.
  uint64_t data_bytes_ = 0;
  uint64_t history_records_ = 0;
  pfm_format format_ = PFM_FORMAT_FIXED;
  pfm_ring_mode mode_ = PFM_RING_LOSSLESS;
  // Consume: the cursor (kept across calls: its codec state is mid-chunk),
  // the tail this reader last published, records below which are skipped.
  RingCursor cursor_;
  uint64_t tail_ = 0;
  absl::Status status_;
};

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_RING_READER_H_
