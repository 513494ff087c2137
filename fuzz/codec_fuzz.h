// What the compact codec's fuzz targets (compact_batch_fuzz.cc,
// compact_bts_fuzz.cc) share: the input reader, the check that aborts (the
// fuzzer's finding), and the codec fast path an input runs on. The ring
// reader's target (ring_fuzz.cc) reads its input and checks the same way.
#ifndef PFM_FUZZ_CODEC_FUZZ_H_
#define PFM_FUZZ_CODEC_FUZZ_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernel/uapi/compact_codec.h"

namespace pfm::fuzz {

inline void Check(bool ok) {
  if (!ok) std::abort();
}

// Bytes of the input, then zeros.
struct Input {
  const uint8_t* p;
  size_t n;
  template <typename T>
  T Take() {
    T v{};
    const size_t k = n < sizeof(T) ? n : sizeof(T);
    memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
};

// The codec's fast path (EncodeRun's and DecodeRecords') for one input: by
// the input's length, so both paths see the corpus without the input's
// bytes meaning anything else; restored when the input is done. kBmi2 where
// it does not run leaves the path unchanged.
class OnPathFor {
 public:
  explicit OnPathFor(size_t size) {
    SetCodecFastPath(size % 2 ? CodecFastPath::kBmi2 : CodecFastPath::kPortable);
  }
  ~OnPathFor() { SetCodecFastPath(chosen_); }

 private:
  const CodecFastPath chosen_ = CurrentCodecFastPath();
};

}  // namespace pfm::fuzz

#endif  // PFM_FUZZ_CODEC_FUZZ_H_
