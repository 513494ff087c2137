#include "pfm/wire.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pfm {
namespace {

absl::Status WaitFor(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    int r = ::poll(&p, 1, timeout_ms);
    if (r > 0) return absl::OkStatus();
    if (r == 0) return absl::DeadlineExceededError("socket timed out");
    if (errno != EINTR)
      return absl::UnavailableError(absl::StrCat("poll: ", strerror(errno)));
  }
}

uint32_t ReadLe32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 |
         uint32_t{u[3]} << 24;
}

}  // namespace

std::string EncodeFrame(absl::string_view body) {
  std::string out;
  out.reserve(4 + body.size());
  const uint32_t n = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
  out.append(body.data(), body.size());
  return out;
}

absl::Status SendFrame(int fd, absl::string_view body,
                       const std::vector<int>& fds, int timeout_ms) {
  if (body.size() > kMaxFrameBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "frame of ", body.size(), " bytes exceeds ", kMaxFrameBytes));
  if (fds.size() > static_cast<size_t>(kMaxFdsPerFrame))
    return absl::InvalidArgumentError("too many fds in one frame");
  const std::string data = EncodeFrame(body);
  size_t off = 0;
  bool fds_sent = fds.empty();
  while (off < data.size()) {
    msghdr msg{};
    iovec iov{const_cast<char*>(data.data() + off), data.size() - off};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
    if (!fds_sent) {
      // The fds ride on the first byte that is sent.
      const size_t len = sizeof(int) * fds.size();
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(len);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(len);
      std::memcpy(CMSG_DATA(c), fds.data(), len);
    }
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      fds_sent = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      absl::Status s = WaitFor(fd, POLLOUT, timeout_ms);
      if (!s.ok()) return s;
      continue;
    }
    return absl::UnavailableError(
        absl::StrCat("send: ", n < 0 ? strerror(errno) : "closed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Frame> RecvFrame(int fd, int timeout_ms) {
  Frame frame;
  std::string buf;
  size_t want = 4;
  bool have_len = false;
  while (buf.size() < want) {
    if (timeout_ms >= 0) {
      absl::Status s = WaitFor(fd, POLLIN, timeout_ms);
      if (!s.ok()) return s;
    }
    char tmp[65536];
    const size_t room = std::min(sizeof(tmp), want - buf.size());
    msghdr msg{};
    iovec iov{tmp, room};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return absl::UnavailableError(absl::StrCat("recv: ", strerror(errno)));
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        frame.fds.emplace_back(f);
      }
    }
    if (n == 0) {
      if (buf.empty()) return absl::UnavailableError("connection closed");
      return absl::DataLossError(absl::StrCat("truncated frame: ", buf.size(),
                                              " of ", want, " bytes"));
    }
    buf.append(tmp, static_cast<size_t>(n));
    if (!have_len && buf.size() >= 4) {
      const uint32_t len = ReadLe32(buf.data());
      if (len > kMaxFrameBytes)
        return absl::InvalidArgumentError(absl::StrCat(
            "frame length ", len, " exceeds the limit of ", kMaxFrameBytes));
      want = 4 + len;
      have_len = true;
    }
  }
  frame.body = buf.substr(4);
  return frame;
}

absl::Status FrameDecoder::Feed(const char* data, size_t len) {
  // Drop what Next consumed first: a peer that always leaves part of a
  // frame unread would otherwise grow the buffer without bound (the
  // consumed frames behind the partial one were kept). What stays is the
  // frame in progress, at most 4 + kMaxFrameBytes, and the new bytes.
  if (pos_ > 0) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(data, len);
  // The erase keeps the allocation: after a large frame, a peer that keeps
  // a byte of the next one in flight would pin it. Give back what the
  // bytes held now do not need.
  if (buf_.capacity() > kKeepBufferBytes && buf_.size() < buf_.capacity() / 4)
    buf_.shrink_to_fit();
  // Validate every length prefix now buffered, so an oversized frame is
  // refused as soon as its header arrives, not after we wait for its body.
  size_t p = pos_;
  while (buf_.size() - p >= 4) {
    const uint32_t n = ReadLe32(buf_.data() + p);
    if (n > kMaxFrameBytes)
      return absl::InvalidArgumentError(absl::StrCat(
          "frame length ", n, " exceeds the limit of ", kMaxFrameBytes));
    if (buf_.size() - p - 4 < n) break;
    p += 4 + n;
  }
  return absl::OkStatus();
}

bool FrameDecoder::Next(std::string* body) {
  if (buf_.size() - pos_ < 4) return false;
  const uint32_t n = ReadLe32(buf_.data() + pos_);
  if (n > kMaxFrameBytes || buf_.size() - pos_ - 4 < n) return false;
  body->assign(buf_, pos_ + 4, n);
  pos_ += 4 + n;
  if (pos_ == buf_.size()) {
    // All consumed. After a large frame, give its memory back rather than
    // keep up to kMaxFrameBytes per idle connection.
    if (buf_.capacity() > kKeepBufferBytes) {
      std::string().swap(buf_);
    } else {
      buf_.clear();
    }
    pos_ = 0;
  }
  return true;
}

}  // namespace pfm
