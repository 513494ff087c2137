#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz/codec_fuzz.h"
#include "fuzz/fuzz_targets.h"
#include "kernel/uapi/compact_codec.h"
#include "kernel/uapi/pfm_uapi.h"
#include "pfm/ring_reader.h"

namespace pfm::fuzz {

int FuzzRingReader(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  Input in{data + 1, size - 1};
  // Bits 0-1: data area of 2, 4, 8 or 16 chunks; bit 2: compact; bit 3:
  // history; bit 4: header taken verbatim from the input (fuzzes Map's
  // checks), else a valid template with fuzzed positions and counters (gets
  // past Map to the readers); bit 5: file one byte larger than the header says.
  const uint64_t data_bytes = uint64_t{PFM_RING_CHUNK} << (1 + (sel & 3));
  const bool verbatim = sel & 0x10;
  std::vector<uint8_t> file(PFM_RING_HEADER_BYTES + data_bytes +
                                ((sel & 0x20) ? 1 : 0),
                            0);
  pfm_ring_header h;
  memset(&h, 0, sizeof(h));
  if (verbatim) {
    h = in.Take<pfm_ring_header>();
  } else {
    h.magic = PFM_RING_MAGIC;
    h.version = PFM_UAPI_VERSION;
    h.format = (sel & 4) ? PFM_FORMAT_COMPACT : PFM_FORMAT_FIXED;
    h.mode = (sel & 8) ? PFM_RING_HISTORY : PFM_RING_LOSSLESS;
    h.header_bytes = PFM_RING_HEADER_BYTES;
    h.chunk_bytes = PFM_RING_CHUNK;
    h.data_bytes = data_bytes;
    h.history_records = in.Take<uint16_t>();
    // Positions near a small base or anywhere, as the input says.
    const uint8_t far = in.Take<uint8_t>();
    h.head = in.Take<uint32_t>();
    h.tail = in.Take<uint32_t>();
    if (far & 1) h.head |= uint64_t{in.Take<uint32_t>()} << 32;
    if (far & 2) h.tail |= uint64_t{in.Take<uint32_t>()} << 32;
    h.records = in.Take<uint16_t>();
    h.lost = in.Take<uint16_t>();
    h.flags = in.Take<uint8_t>();
  }
  memcpy(file.data(), &h, sizeof(h));
  memcpy(file.data() + PFM_RING_HEADER_BYTES, in.p,
         in.n < data_bytes ? in.n : data_bytes);

  const int fd = memfd_create("pfm-fuzz-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return 0;  // out of fds: not the code under test
  UniqueFd owned(fd);
  Check(ftruncate(fd, static_cast<off_t>(file.size())) == 0);
  Check(pwrite(fd, file.data(), file.size(), 0) ==
        static_cast<ssize_t>(file.size()));
  Check(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);

  absl::StatusOr<RingReader> r = RingReader::Map(std::move(owned));
  if (!r.ok()) {
    Check(r.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  std::vector<pfm_record> recs;
  absl::Status s = r->Snapshot(&recs);
  if (s.ok()) {
    for (const pfm_record& rec : recs) Check(IsRecordType(rec.type));
    if (r->mode() == PFM_RING_HISTORY)
      Check(recs.size() <= h.history_records);
  } else {
    Check(s.code() == absl::StatusCode::kDataLoss);
  }
  // Consume twice: the second call resumes from the published tail.
  for (int i = 0; i < 2; ++i) {
    recs.clear();
    const size_t n = r->Consume(&recs, 1 + (sel >> 6) * 40);
    Check(n == recs.size());
    Check(n <= 1 + (sel >> 6) * 40u);
    for (const pfm_record& rec : recs) Check(IsRecordType(rec.type));
    Check(r->status().ok() || r->status().code() == absl::StatusCode::kDataLoss);
  }
  return 0;
}

}  // namespace pfm::fuzz

#ifdef PFM_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pfm::fuzz::FuzzRingReader(data, size);
}
#endif
