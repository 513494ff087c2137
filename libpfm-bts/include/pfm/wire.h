// The pfmd wire protocol: framed JSON messages over a Unix stream socket.
//
// A frame is a 4-byte little-endian length followed by that many bytes of
// UTF-8 JSON (one object). File descriptors (ring memfds) travel with a
// frame as SCM_RIGHTS ancillary data attached to its first byte; the JSON
// says how many ("fds": N).
//
// Requests:  {"op": "<command>", ...arguments}
// Replies:   {"ok": true, "result": <value>, "fds": N}
//            {"ok": false, "code": "<absl code name>", "message": "..."}
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_WIRE_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pfm/unique_fd.h"

namespace pfm {

// Larger frames are refused by both sides (the daemon closes the
// connection after an error reply).
inline constexpr uint32_t kMaxFrameBytes = 1 << 20;
inline constexpr int kMaxFdsPerFrame = 16;

struct Frame {
  std::string body;
  std::vector<UniqueFd> fds;
};

// Blocking send of one frame (with fds) on `fd`. Handles partial writes and
// EINTR; gives up after `timeout_ms` of no progress.
absl::Status SendFrame(int fd, absl::string_view body,
                       const std::vector<int>& fds, int timeout_ms = 5000);

// Blocking receive of one frame. UNAVAILABLE on orderly close before a
// frame, DATA_LOSS on a truncated frame, INVALID_ARGUMENT on an oversized
// one, DEADLINE_EXCEEDED after `timeout_ms` with no byte.
absl::StatusOr<Frame> RecvFrame(int fd, int timeout_ms = -1);

// Incremental decoder for a byte stream (the daemon's side): feed bytes as
// they arrive, take complete frames out. Refuses oversized lengths at once.
class FrameDecoder {
 public:
  // Appends bytes; returns an error if the stream is malformed (the caller
  // closes the connection).
  absl::Status Feed(const char* data, size_t len);
  // Pops the next complete frame body, if any.
  bool Next(std::string* body);
  size_t buffered() const { return buf_.size() - pos_; }
  // Drops everything, allocation included (assigning a new decoder would
  // keep the old allocation: a short string moved in is copied into it).
  void Reset() {
    std::string().swap(buf_);
    pos_ = 0;
  }
  // Bytes the decoder holds, consumed ones included, and its allocation:
  // after Feed, held() <= 4 + kMaxFrameBytes + the bytes fed; capacity()
  // is at most kKeepBufferBytes once everything fed was taken by Next, and
  // after a Feed at most kKeepBufferBytes or 4 x what it holds.
  size_t held() const { return buf_.size(); }
  size_t capacity() const { return buf_.capacity(); }
  static constexpr size_t kKeepBufferBytes = 64 * 1024;

 private:
  std::string buf_;
  size_t pos_ = 0;
};

// Helpers to build the length prefix.
std::string EncodeFrame(absl::string_view body);

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_WIRE_H_
