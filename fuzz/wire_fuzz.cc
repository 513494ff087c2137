#include <cstdlib>
#include <string>

#include <boost/json.hpp>

#include "fuzz/fuzz_targets.h"
#include "pfm/session_spec.h"
#include "pfm/wire.h"

namespace pfm::fuzz {

namespace {

// Contract violations abort so libFuzzer records the input.
void Check(bool ok) {
  if (!ok) std::abort();
}

void HandleBody(const std::string& body) {
  Check(body.size() <= kMaxFrameBytes);
  // Framing round trip: what the decoder delivered re-frames to itself.
  FrameDecoder again;
  const std::string framed = EncodeFrame(body);
  Check(again.Feed(framed.data(), framed.size()).ok());
  std::string back;
  Check(again.Next(&back) && back == body && again.buffered() == 0);

  // As Server::Connection::HandleFrame and Service::SessionCreate do.
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(body, ec);
  if (ec || !v.is_object()) return;
  const boost::json::object& req = v.as_object();
  const boost::json::value* spec = req.if_contains("spec");
  if (spec == nullptr || !spec->is_object()) return;
  absl::StatusOr<SessionSpec> s = SessionSpec::FromJson(spec->as_object());
  if (!s.ok()) return;
  // A spec the daemon accepted survives its own JSON form.
  absl::StatusOr<SessionSpec> s2 = SessionSpec::FromJson(s->ToJson());
  Check(s2.ok());
  Check(boost::json::serialize(s2->ToJson()) ==
        boost::json::serialize(s->ToJson()));
}

}  // namespace

int FuzzWireDecoder(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the read size, so frames arrive split the ways a
  // socket may split them (1..256 bytes per Feed).
  const size_t step = static_cast<size_t>(data[0]) + 1;
  ++data;
  --size;
  FrameDecoder dec;
  std::string body;
  size_t fed = 0;
  while (fed < size) {
    const size_t n = size - fed < step ? size - fed : step;
    absl::Status st = dec.Feed(reinterpret_cast<const char*>(data + fed), n);
    fed += n;
    while (dec.Next(&body)) HandleBody(body);
    if (!st.ok()) break;  // the daemon closes the connection here
    Check(dec.buffered() <= size);
  }
  return 0;
}

}  // namespace pfm::fuzz

#ifdef PFM_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pfm::fuzz::FuzzWireDecoder(data, size);
}
#endif
