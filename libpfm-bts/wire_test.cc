#include "pfm/wire.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include <gtest/gtest.h>

namespace pfm {
namespace {

struct SocketPair {
  UniqueFd a, b;
  SocketPair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    a.reset(sv[0]);
    b.reset(sv[1]);
  }
};

TEST(Wire, FrameRoundTripsWithFileDescriptors) {
  SocketPair sp;
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  UniqueFd r(pipefd[0]), w(pipefd[1]);
  ASSERT_TRUE(SendFrame(sp.a.get(), "{\"op\":\"status\"}", {r.get()}).ok());
  auto frame = RecvFrame(sp.b.get(), 1000);
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_EQ(frame->body, "{\"op\":\"status\"}");
  ASSERT_EQ(frame->fds.size(), 1u);
  // The received fd is the same pipe: a write on w is readable through it.
  ASSERT_EQ(::write(w.get(), "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(frame->fds[0].get(), &c, 1), 1);
  EXPECT_EQ(c, 'x');
}

TEST(Wire, LargeFrameSurvivesPartialWrites) {
  SocketPair sp;
  std::string body(kMaxFrameBytes, 'a');
  std::thread reader;
  absl::StatusOr<Frame> got = absl::UnknownError("unset");
  reader = std::thread([&] { got = RecvFrame(sp.b.get(), 5000); });
  ASSERT_TRUE(SendFrame(sp.a.get(), body, {}).ok());
  reader.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->body.size(), body.size());
}

TEST(Wire, RefusesOversizedLength) {
  SocketPair sp;
  const unsigned char hdr[4] = {0xff, 0xff, 0xff, 0x7f};
  ASSERT_EQ(::write(sp.a.get(), hdr, 4), 4);
  auto frame = RecvFrame(sp.b.get(), 1000);
  ASSERT_FALSE(frame.ok());
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SendFrame(sp.a.get(), std::string(kMaxFrameBytes + 1, 'a'), {})
                   .ok());
}

TEST(Wire, TruncatedFrameIsDataLoss) {
  SocketPair sp;
  std::string partial = EncodeFrame("{\"op\":\"status\"}").substr(0, 9);
  ASSERT_EQ(::write(sp.a.get(), partial.data(), partial.size()),
            static_cast<ssize_t>(partial.size()));
  sp.a.reset();
  auto frame = RecvFrame(sp.b.get(), 1000);
  ASSERT_FALSE(frame.ok());
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kDataLoss);
}

TEST(FrameDecoder, SplitsAStreamFedByteByByte) {
  std::string stream = EncodeFrame("one") + EncodeFrame("") + EncodeFrame("three");
  FrameDecoder d;
  std::vector<std::string> got;
  for (char c : stream) {
    ASSERT_TRUE(d.Feed(&c, 1).ok());
    std::string body;
    while (d.Next(&body)) got.push_back(body);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"one", "", "three"}));
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(FrameDecoder, RefusesOversizedHeaderBehindAGoodFrame) {
  std::string stream = EncodeFrame("ok");
  stream += std::string("\xff\xff\xff\xff", 4);
  FrameDecoder d;
  EXPECT_FALSE(d.Feed(stream.data(), stream.size()).ok());
}

}  // namespace
}  // namespace pfm
