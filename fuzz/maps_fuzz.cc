#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_targets.h"
#include "kernel/uapi/proc_maps.h"

namespace pfm::fuzz {

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

// Whatever was parsed or decoded encodes, and decodes back to itself.
void RoundTrip(const std::vector<Mapping>& maps) {
  std::string bytes;
  const size_t n = EncodeMappings(maps, SIZE_MAX, &bytes);
  Check(n == maps.size());
  std::vector<Mapping> back;
  Check(DecodeMappings(bytes, &back, nullptr) == 0);
  Check(back == maps);
}

}  // namespace

int FuzzMaps(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  // As an encoding (a MAPS block, a tracer message): refused, or canonical
  // (decode then encode gives the input back, byte for byte).
  std::vector<Mapping> decoded;
  ErrorDetail d;
  if (DecodeMappings(in, &decoded, &d) == 0) {
    std::string again;
    Check(EncodeMappings(decoded, SIZE_MAX, &again) == decoded.size());
    Check(again == in);
  } else {
    Check(decoded.empty());
  }
  // As /proc/PID/maps text, both ways a caller may treat bad lines.
  for (MalformedLine mode : {MalformedLine::kSkip, MalformedLine::kRefuse}) {
    std::vector<Mapping> parsed;
    const int rc = ParseProcMaps(in, mode, &parsed, &d);
    if (rc != 0) {
      Check(mode == MalformedLine::kRefuse && parsed.empty());
      continue;
    }
    Check(parsed.size() <= kMaxMappings);
    for (const Mapping& m : parsed) Check(IsEncodableMapping(m));
    RoundTrip(parsed);
    KeepFileBacked(&parsed);
    for (const Mapping& m : parsed) Check(!m.path.empty() && m.path[0] == '/');
  }
  return 0;
}

}  // namespace pfm::fuzz

#ifdef PFM_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pfm::fuzz::FuzzMaps(data, size);
}
#endif
