#include "pfm/wire.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
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

// A peer that always leaves part of a frame unread (the rest of one frame,
// a whole one, and a byte of the next, read after read): the decoder holds
// the frame in progress and the last read, never the frames consumed.
TEST(FrameDecoder, HoldsOnlyTheFrameInProgress) {
  const std::string frame = EncodeFrame(std::string(1000, 'f'));
  FrameDecoder d;
  ASSERT_TRUE(d.Feed(frame.data(), 1).ok());
  size_t most = 0, frames = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string chunk = frame.substr(1) + frame + frame.substr(0, 1);
    ASSERT_TRUE(d.Feed(chunk.data(), chunk.size()).ok());
    most = std::max(most, d.held());
    std::string body;
    while (d.Next(&body)) {
      ASSERT_EQ(body.size(), 1000u);
      ++frames;
    }
    ASSERT_EQ(d.buffered(), 1u);
  }
  EXPECT_EQ(frames, 4000u);
  EXPECT_LE(most, 1 + 2 * frame.size());  // the byte kept + this read
}

// A large frame taken with a byte of the next one behind it: the consumed
// frame's allocation is not kept by the byte in flight.
TEST(FrameDecoder, ALargeFrameIsNotPinnedByTheNextFramesFirstByte) {
  const std::string big = EncodeFrame(std::string(900 * 1024, 'b'));
  const std::string next = EncodeFrame("{}");
  FrameDecoder d;
  const std::string first = big + next.substr(0, 1);
  ASSERT_TRUE(d.Feed(first.data(), first.size()).ok());
  std::string body;
  ASSERT_TRUE(d.Next(&body));
  ASSERT_TRUE(d.Feed(next.data() + 1, 1).ok());
  EXPECT_LE(d.capacity(), FrameDecoder::kKeepBufferBytes);
  EXPECT_EQ(d.buffered(), 2u);
}

// After a large frame is taken, its memory goes back.
TEST(FrameDecoder, GivesALargeFramesMemoryBack) {
  const std::string big = EncodeFrame(std::string(900 * 1024, 'b'));
  FrameDecoder d;
  ASSERT_TRUE(d.Feed(big.data(), big.size()).ok());
  EXPECT_GE(d.capacity(), big.size());
  std::string body;
  ASSERT_TRUE(d.Next(&body));
  EXPECT_EQ(body.size(), 900u * 1024);
  EXPECT_LE(d.capacity(), FrameDecoder::kKeepBufferBytes);
  EXPECT_EQ(d.held(), 0u);
  // Reset frees a frame in progress too.
  ASSERT_TRUE(d.Feed(big.data(), big.size() - 1).ok());
  EXPECT_GE(d.capacity(), big.size() - 1);
  d.Reset();
  EXPECT_LE(d.capacity(), FrameDecoder::kKeepBufferBytes);
  EXPECT_EQ(d.buffered(), 0u);
}

}  // namespace
}  // namespace pfm
