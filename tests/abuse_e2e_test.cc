// End to end, "Security first": abuse of pfmd's transport. The real pfmd
// (--driver sim, paused: no hardware, no background CPU) against clients
// that never read their replies, open too many connections, exhaust the
// daemon's fds, or hand it a bad socket path or a bad inherited fd. Each
// test asserts the fix in userspace/pfmd/server.cc (docs/pfmd.md, "Limits").
//
// Timing bounds are not loosened for a busy machine; a measurement that a
// scheduling hiccup could spoil is repeated instead (kAttempts).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <linux/capability.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "pfm/client.h"
#include "pfm/trace_file.h"
#include "pfm/wire.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using testing::AsUid;
using testing::ConnectRaw;
using testing::CountOf;
using testing::Daemon;
using testing::FdCount;
using testing::kNobody;
using testing::Pfmctl;
using testing::ReadFile;

constexpr int kAttempts = 3;
const std::vector<std::string> kSimFlags = {"--driver", "sim", "--sim-cpus", "2",
                                            "--sim-paused"};

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// utime + stime of `pid`, in clock ticks (proc(5): fields 14 and 15).
uint64_t CpuTicks(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream in(stat.substr(paren + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return utime + stime;
}

// pfmd started by hand (the harness's Daemon cannot set limits, fds or
// environment): `in_child` runs after fork, before exec; stderr goes to
// `err_path`.
pid_t SpawnPfmd(const std::vector<std::string>& flags, const std::string& err_path,
                const std::function<void()>& in_child = [] {}) {
  std::vector<std::string> argv = {testing::PfmdPath()};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err < 0 || ::dup2(err, 2) != 2) ::_exit(126);
    in_child();
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

// Waits up to `timeout` for `pid` to exit; kills it after. The exit code, or
// 128 + signal.
int WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  if (pid <= 0) return -1;  // a failed fork: never kill(-1)
  int status = 0;
  const Clock::time_point end = Clock::now() + timeout;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (Clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool WaitForSocket(const std::string& path, pid_t pid) {
  for (int i = 0; i < 400; ++i) {
    const int fd = ConnectRaw(path);
    if (fd >= 0) {
      ::close(fd);
      return true;
    }
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// One request/reply on a fresh connection, bounded: the body of the reply.
absl::StatusOr<std::string> RoundTrip(const std::string& socket,
                                      const std::string& request,
                                      int timeout_ms = 5000) {
  const int fd = ConnectRaw(socket);
  if (fd < 0) return absl::UnavailableError("connect failed");
  absl::Status s = SendFrame(fd, request, {}, timeout_ms);
  absl::StatusOr<Frame> reply =
      s.ok() ? RecvFrame(fd, timeout_ms) : absl::StatusOr<Frame>(s);
  ::close(fd);
  if (!reply.ok()) return reply.status();
  return reply->body;
}

// Bytes waiting in `fd`'s receive queue.
int Unread(int fd) {
  int n = 0;
  return ::ioctl(fd, FIONREAD, &n) == 0 ? n : -1;
}

bool HungUp(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP)) != 0;
}

TEST(AbuseE2e, TenClientsThatNeverReadDoNotDelayAnotherClientsStatus) {
  Daemon d(kSimFlags);
  ASSERT_TRUE(d.started());
  // Each non-reader pipelines 4000 `status` requests (~76 KB) and reads
  // nothing. The replies (~1.6 MB each) overflow pfmd's send buffer (for
  // AF_UNIX the sender's SO_SNDBUF, ~208 KiB, bounds what waits unread; the
  // reader's SO_RCVBUF does not, so it is not set here), so before the fix
  // pfmd blocked in sendmsg for 2 s per reply.
  constexpr int kNonReaders = 10;
  constexpr int kRequests = 4000;
  // Each first creates a session that ends with its connection (not
  // detached): the drop must free it like any hang-up.
  std::string burst = EncodeFrame(
      R"({"op":"session_create","spec":{"pid":1000,"bts":"history","buffer_bytes":4096,"detached":false}})");
  for (int i = 0; i < kRequests; ++i) burst += EncodeFrame("{\"op\":\"status\"}");
  std::vector<int> idle;
  for (int i = 0; i < kNonReaders; ++i) {
    const int fd = ConnectRaw(d.socket());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
    size_t off = 0;
    while (off < burst.size()) {
      const ssize_t n = ::send(fd, burst.data() + off, burst.size() - off,
                               MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n <= 0) break;  // full: pfmd stopped reading us, as it should
      off += static_cast<size_t>(n);
    }
  }
  // Until pfmd has filled every non-reader's socket and stopped: the unread
  // bytes hold still (bounded: 5 s).
  std::vector<int> last(kNonReaders, -1);
  const Clock::time_point stalled_by = Clock::now() + std::chrono::seconds(5);
  for (bool still = false; !still && Clock::now() < stalled_by;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    still = true;
    for (int i = 0; i < kNonReaders; ++i) {
      const int n = Unread(idle[i]);
      still = still && n > 0 && n == last[i];
      last[i] = n;
    }
  }
  const Clock::time_point stalled = Clock::now();
  // Their sessions, while they stall (pfmd drops them 5 s from now).
  const uint64_t sessions_while_stalled =
      testing::PfmctlJson(d.socket(), {"status"}).at("sessions").to_number<uint64_t>();
  for (int i = 0; i < kNonReaders; ++i) {
    // The kernel charges each small reply ~1 KiB of overhead against the
    // send buffer: ~170 status replies (~66 KB) fill it.
    EXPECT_GT(last[i], 32 << 10) << "non-reader " << i << " got few replies";
    ASSERT_FALSE(HungUp(idle[i])) << "dropped before the measurement";
  }

  // Another client: connect + status, ten times; all under 100 ms.
  double worst_ms = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    worst_ms = 0;
    for (int i = 0; i < 10; ++i) {
      const Clock::time_point t0 = Clock::now();
      absl::StatusOr<Client> c = Client::Connect(d.socket());
      ASSERT_TRUE(c.ok()) << c.status();
      absl::StatusOr<Client::Reply> r = c->Call("status");
      const double ms = Ms(Clock::now() - t0);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->result.at("driver").as_string(), "sim");
      worst_ms = std::max(worst_ms, ms);
    }
    if (worst_ms < 100) break;
  }
  std::cout << "status round trip with " << kNonReaders
            << " non-readers stalled: worst of 10 " << worst_ms << " ms\n";
  EXPECT_LT(worst_ms, 100);


  // The non-readers are dropped once their replies have not moved for
  // pfmd's stall timeout (5 s); bounded here at 15 s.
  const Clock::time_point deadline = stalled + std::chrono::seconds(15);
  int dropped = 0;
  while (dropped < kNonReaders && Clock::now() < deadline) {
    dropped = 0;
    for (int fd : idle) dropped += HungUp(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::cout << dropped << " non-readers dropped " << Ms(Clock::now() - stalled)
            << " ms after they stalled\n";
  EXPECT_EQ(dropped, kNonReaders);
  // Their sessions existed while they stalled (before the drops: 10), and
  // went with them.
  EXPECT_EQ(sessions_while_stalled, static_cast<uint64_t>(kNonReaders));
  for (int fd : idle) ::close(fd);
  const json::value after = testing::PfmctlJson(d.socket(), {"status"});
  EXPECT_EQ(after.at("sessions").to_number<uint64_t>(), 0u) << after;
}

TEST(AbuseE2e, PipelinedRequestsThenHalfCloseGetEveryReplyInOrder) {
  Daemon d(kSimFlags);
  ASSERT_TRUE(d.started());
  // More replies than the socket holds: pfmd pauses reading, resumes as the
  // client reads, and writes what is queued after the client's EOF. The
  // 2000 requests also take 125 turns of the per-connection budget
  // (kRequestsPerTurn): each turn goes on where the last stopped.
  constexpr int kRequests = 2000;
  const int fd = ConnectRaw(d.socket());
  ASSERT_GE(fd, 0);
  std::string burst;
  for (int i = 0; i < kRequests; ++i)
    burst += EncodeFrame(i % 2 ? "{\"op\":\"status\"}" : "{\"op\":\"ping\"}");
  ASSERT_EQ(::send(fd, burst.data(), burst.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(burst.size()));
  ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
  for (int i = 0; i < kRequests; ++i) {
    absl::StatusOr<Frame> f = RecvFrame(fd, 5000);
    ASSERT_TRUE(f.ok()) << "reply " << i << ": " << f.status();
    json::value v = json::parse(f->body);
    ASSERT_TRUE(v.at("ok").as_bool()) << f->body;
    EXPECT_EQ(v.at("result").as_object().contains("driver"), i % 2 == 1) << i;
  }
  absl::StatusOr<Frame> end = RecvFrame(fd, 5000);
  EXPECT_EQ(end.status().code(), absl::StatusCode::kUnavailable) << end.status();
  ::close(fd);
}

TEST(AbuseE2e, FdsAClientSendsAreNeverReceivedByPfmd) {
  Daemon d(kSimFlags);
  ASSERT_TRUE(d.started());
  const int fd = ConnectRaw(d.socket());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendFrame(fd, "{\"op\":\"ping\"}", {}).ok());
  ASSERT_TRUE(RecvFrame(fd, 5000).ok());
  const int before = FdCount(d.pid());
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(devnull, 0);
  const std::vector<int> fds(kMaxFdsPerFrame, devnull);
  for (int i = 0; i < 100; ++i) {  // 1600 fds in all
    ASSERT_TRUE(SendFrame(fd, "{\"op\":\"ping\"}", fds).ok());
    absl::StatusOr<Frame> r = RecvFrame(fd, 5000);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->fds.empty());
  }
  ::close(devnull);
  EXPECT_EQ(FdCount(d.pid()), before);
  ::close(fd);
}

// A reply as plain JSON, so a child can report it.
json::object CallJson(Client& c, const std::string& op, json::object args = {}) {
  absl::StatusOr<Client::Reply> r = c.Call(op, std::move(args));
  if (!r.ok())
    return {{"ok", false},
            {"code", StatusCodeName(r.status().code())},
            {"message", std::string(r.status().message())}};
  return {{"ok", true}};
}

// Runs `child` as `uid` in a child process (AsUid); where the child calls
// the `hold` it is given, it signals and waits (at most 30 s) while
// `meanwhile` runs here with the child's connections and sessions still
// open. Returns the child's report, with "child_not_ready" set when it did
// not reach `hold` within `ready_ms`.
json::object WhileUidHolds(uid_t uid,
                           const std::function<json::object(const std::function<void()>&)>& child,
                           const std::function<void()>& meanwhile, int ready_ms = 30000) {
  int ready[2], go[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return {{"child_failed", "pipe2"}};
  if (::pipe2(go, O_CLOEXEC) != 0) {
    ::close(ready[0]);
    ::close(ready[1]);
    return {{"child_failed", "pipe2"}};
  }
  json::object got;
  std::thread t([&] {
    got = AsUid(uid, [&]() -> json::object {
      return child([&] {
        char b = 1;
        (void)!::write(ready[1], &b, 1);
        pollfd p{go[0], POLLIN, 0};
        ::poll(&p, 1, 30000);
      });
    });
  });
  pollfd p{ready[0], POLLIN, 0};
  const bool child_ready = ::poll(&p, 1, ready_ms) == 1;
  meanwhile();
  char b = 1;
  (void)!::write(go[1], &b, 1);
  t.join();
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
  if (!child_ready) got["child_not_ready"] = true;
  return got;
}

TEST(AbuseE2e, UidOverItsConnectionCapIsRefusedWithTheNumbersAndRootStillGetsIn) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the test drops to uid 65534";
  Daemon d(kSimFlags);  // default --max-connections-per-uid 64
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(d.OpenToOtherUids());
  // The child holds its connections until the parent has checked root.
  const std::string socket = d.socket();
  testing::Result root;
  const json::object got = WhileUidHolds(
      kNobody,
      [&](const std::function<void()>& hold) -> json::object {
        std::vector<Client> open;
        json::object out;
        for (int i = 0; i < 100; ++i) {
          absl::StatusOr<Client> c = Client::Connect(socket);
          if (!c.ok()) {
            out["connect_failed"] = std::string(c.status().message());
            break;
          }
          json::object r = CallJson(*c, "ping");
          if (!r.at("ok").as_bool()) {
            out["refused"] = r;
            break;
          }
          open.push_back(*std::move(c));
        }
        out["open"] = open.size();
        hold();
        return out;
      },
      // Root is not capped per uid: it gets in while uid 65534 is at its cap.
      [&] { root = Pfmctl(socket, {"status"}, 10); });
  ASSERT_FALSE(got.contains("child_not_ready")) << got;
  ASSERT_FALSE(got.contains("child_failed")) << got;
  EXPECT_EQ(root.exit_code, 0) << root.err;
  EXPECT_NE(root.out.find("driver sim"), std::string::npos) << root.out;
  EXPECT_EQ(got.at("open").to_number<int>(), 64) << got;
  ASSERT_TRUE(got.contains("refused")) << got;
  EXPECT_EQ(got.at("refused").at("code").as_string(), "RESOURCE_EXHAUSTED") << got;
  EXPECT_EQ(got.at("refused").at("message").as_string(),
            "uid 65534 has 64 connections open (limit 64, "
            "--max-connections-per-uid)")
      << got;
  // Its connections closed, the uid is served again.
  json::object again = AsUid(kNobody, [&]() -> json::object {
    for (int i = 0; i < 100; ++i) {  // pfmd sees the hang-ups (bounded)
      absl::StatusOr<Client> c = Client::Connect(socket);
      if (c.ok() && CallJson(*c, "ping").at("ok").as_bool()) return {{"ok", true}};
      ::usleep(10000);
    }
    return {{"ok", false}};
  });
  EXPECT_TRUE(again.contains("ok") && again.at("ok").as_bool()) << again;
}

// A sim task is open to every uid and has 64 Debug Store consumer slots: one
// uid filling them would lock every other uid out of it. uid 65534 attaches
// to pid 1000 until refused (16, --max-consumers-per-uid) and holds those;
// meanwhile uid 65533 and root attach to the same task.
TEST(AbuseE2e, OneUidCannotTakeEveryConsumerSlotOfATask) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the test drops to uid 65534";
  Daemon d(kSimFlags);
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(d.OpenToOtherUids());
  const std::string socket = d.socket();
  const json::object spec{{"pid", 1000}, {"bts", "lossless"}, {"buffer_bytes", 64 << 10}};
  json::object other, root;
  json::value status;
  const json::object got = WhileUidHolds(
      kNobody,
      [&](const std::function<void()>& hold) -> json::object {
        json::object out;
        absl::StatusOr<Client> c = Client::Connect(socket);
        if (!c.ok()) return {{"connect_failed", std::string(c.status().message())}};
        int sessions = 0;
        for (int i = 0; i < 100; ++i) {
          json::object r = CallJson(*c, "session_create", {{"spec", spec}});
          if (!r.at("ok").as_bool()) {
            out["refused"] = r;
            break;
          }
          ++sessions;
        }
        out["sessions"] = sessions;
        hold();
        return out;
      },
      // While uid 65534 holds its 16: another uid, then root, on the same task.
      [&] {
        other = AsUid(kNobody - 1, [&]() -> json::object {
          absl::StatusOr<Client> c = Client::Connect(socket);
          if (!c.ok()) return {{"connect_failed", std::string(c.status().message())}};
          return CallJson(*c, "session_create", {{"spec", spec}});
        });
        absl::StatusOr<Client> rc = Client::Connect(socket);
        root = rc.ok() ? CallJson(*rc, "session_create", {{"spec", spec}})
                       : json::object{{"ok", false}};
        status = testing::PfmctlJson(socket, {"status"});
      });
  ASSERT_FALSE(got.contains("child_not_ready")) << got;
  ASSERT_FALSE(got.contains("child_failed")) << got;
  EXPECT_EQ(testing::Num(got.at("sessions")), 16u) << got;
  ASSERT_TRUE(got.contains("refused")) << got;
  EXPECT_EQ(got.at("refused").at("code").as_string(), "RESOURCE_EXHAUSTED") << got;
  EXPECT_EQ(got.at("refused").at("message").as_string(),
            "uid 65534 has 16 Debug Store consumers on pid 1000 (limit 16 per task, "
            "--max-consumers-per-uid)")
      << got;
  EXPECT_TRUE(other.contains("ok") && other.at("ok").as_bool()) << other;
  EXPECT_TRUE(root.at("ok").as_bool()) << root;
  // 16 of uid 65534's and root's: uid 65533's ended with its connection.
  EXPECT_EQ(testing::Num(status.at("sessions")), 17u) << status;
}

// Frames cut short hold pfmd's memory until their connection ends: one uid
// holds at most kMaxHeldInputPerUid over all its connections. Connections
// of uid 65534 each send the first 600 KiB of a 1 MiB frame; the one that
// passes the bound is refused with the numbers and closed, the uid's small
// requests below it are served, root is not bounded, and the hang-ups give
// the memory back.
TEST(AbuseE2e, UnfinishedFramesOfOneUidAreBounded) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the test drops to uid 65534";
  Daemon d(kSimFlags);
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(d.OpenToOtherUids());
  const std::string socket = d.socket();
  constexpr size_t kPart = 600 * 1024;
  bool root_sent = true, root_refused = false;
  testing::Result root;
  const json::object got = WhileUidHolds(
      kNobody,
      [&](const std::function<void()>& hold) -> json::object {
        json::object out;
        std::string part(4 + kPart, ' ');
        const uint32_t len = kMaxFrameBytes;
        std::memcpy(part.data(), &len, sizeof len);
        std::vector<int> fds;
        for (int i = 0; i < 30 && !out.contains("refused_at"); ++i) {
          const int fd = ConnectRaw(socket);
          if (fd < 0) {
            out["connect_failed_at"] = i;
            break;
          }
          fds.push_back(fd);
          for (size_t off = 0; off < part.size();) {
            const ssize_t n = ::send(fd, part.data() + off, part.size() - off, MSG_NOSIGNAL);
            if (n <= 0) break;  // refused and closed
            off += static_cast<size_t>(n);
          }
          pollfd p{fd, POLLIN, 0};
          if (::poll(&p, 1, 100) == 1) {
            absl::StatusOr<Frame> f = RecvFrame(fd, 1000);
            out["refused_at"] = i;
            out["reply"] = f.ok() ? f->body : std::string(f.status().message());
            out["then"] = StatusCodeName(RecvFrame(fd, 5000).status().code());
          }
        }
        // Below the bound again once one part's connection is gone: the uid's
        // small requests are served (pfmd sees the hang-up in its own time).
        ::close(fds.front());
        fds.erase(fds.begin());
        for (int attempt = 0; attempt < 20; ++attempt) {
          absl::StatusOr<Client> c = Client::Connect(socket);
          out["ping"] = c.ok() ? CallJson(*c, "ping") : json::object{};
          if (out["ping"].as_object().contains("ok") && out["ping"].at("ok").as_bool()) break;
          ::usleep(50000);
        }
        hold();
        for (int fd : fds) ::close(fd);
        return out;
      },
      // Root: 10 unfinished frames of 1000 KiB, over the uid bound
      // together, are held (uid 0 is not bounded), and root is served
      // meanwhile.
      [&] {
        std::string big(4 + 1000 * 1024, ' ');
        const uint32_t len = kMaxFrameBytes;
        std::memcpy(big.data(), &len, sizeof len);
        std::vector<int> root_fds;
        for (int i = 0; i < 10; ++i) {
          root_fds.push_back(ConnectRaw(socket));
          root_sent = root_sent && ::send(root_fds.back(), big.data(), big.size(),
                                          MSG_NOSIGNAL) == static_cast<ssize_t>(big.size());
        }
        root = Pfmctl(socket, {"status"}, 10);
        for (int fd : root_fds) {
          pollfd rp{fd, POLLIN, 0};
          root_refused = root_refused || ::poll(&rp, 1, 50) == 1;
          ::close(fd);
        }
      },
      60000);
  ASSERT_FALSE(got.contains("child_not_ready")) << got;
  EXPECT_TRUE(root_sent);
  EXPECT_FALSE(root_refused) << "root's unfinished frame was answered";
  EXPECT_EQ(root.exit_code, 0) << root.err;
  // What counts is the decoders' allocations: 600 KiB to 1.2 MiB a part
  // (a string's growth), so the bound of 8 MiB is passed by the 7th to the
  // 14th part.
  ASSERT_TRUE(got.contains("refused_at")) << got;
  const int refused_at = got.at("refused_at").to_number<int>();
  EXPECT_GE(refused_at, 6) << got;
  EXPECT_LE(refused_at, 13) << got;
  const std::string reply(got.at("reply").as_string());
  EXPECT_NE(reply.find("RESOURCE_EXHAUSTED"), std::string::npos) << reply;
  EXPECT_NE(reply.find("uid 65534 has "), std::string::npos) << reply;
  EXPECT_NE(reply.find("(limit 8388608 bytes over its connections, kMaxHeldInputPerUid)"),
            std::string::npos)
      << reply;
  EXPECT_EQ(got.at("then").as_string(), "UNAVAILABLE") << got;  // closed
  ASSERT_TRUE(got.at("ping").as_object().contains("ok")) << got;
  EXPECT_TRUE(got.at("ping").at("ok").as_bool()) << got;
  // All hung up: the uid starts from nothing again (one part fewer than
  // the refused one fits again; pfmd sees the hang-ups in its own time, so
  // a few tries).
  json::object again;
  for (int attempt = 0; attempt < 5; ++attempt) {
   again = AsUid(kNobody, [&]() -> json::object {
    std::string part(4 + kPart, ' ');
    const uint32_t l = kMaxFrameBytes;
    std::memcpy(part.data(), &l, sizeof l);
    std::vector<int> fds;
    json::object out{{"refused", false}};
    for (int i = 0; i < refused_at - 1; ++i) {
      const int fd = ConnectRaw(socket);
      fds.push_back(fd);
      (void)!::send(fd, part.data(), part.size(), MSG_NOSIGNAL);
    }
    for (int fd : fds) {
      pollfd q{fd, POLLIN, 0};
      if (::poll(&q, 1, 100) == 1) out["refused"] = true;
    }
    for (int fd : fds) ::close(fd);
    return out;
   });
   if (again.contains("refused") && !again.at("refused").as_bool()) break;
   ::usleep(200000);
  }
  ASSERT_TRUE(again.contains("refused")) << again;
  EXPECT_FALSE(again.at("refused").as_bool()) << again;
}

TEST(AbuseE2e, RootIsNotCappedPerUidButCountsTowardTheTotal) {
  Daemon d({"--driver", "sim", "--sim-paused", "--max-connections", "6",
            "--max-connections-per-uid", "2"});
  ASSERT_TRUE(d.started());
  std::vector<Client> open;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<Client> c = Client::Connect(d.socket());
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<Client::Reply> r = c->Call("ping");
    ASSERT_TRUE(r.ok()) << "connection " << i << ": " << r.status();
    open.push_back(*std::move(c));
  }
  absl::StatusOr<Client> seventh = Client::Connect(d.socket());
  ASSERT_TRUE(seventh.ok()) << seventh.status();
  absl::StatusOr<Client::Reply> r = seventh->Call("ping");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_EQ(r.status().message(),
            "pfmd has 6 connections open (limit 6, --max-connections)");
  open.pop_back();
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {  // pfmd sees the hang-up
    absl::StatusOr<std::string> body = RoundTrip(d.socket(), "{\"op\":\"ping\"}");
    served = body.ok() && body->find("\"ok\":true") != std::string::npos;
    if (!served) ::usleep(10000);
  }
  EXPECT_TRUE(served);
}

TEST(AbuseE2e, AcceptFailingForLackOfFdsBacksOffInsteadOfSpinning) {
  const std::string dir = testing::MakeSocketDir();
  const std::string socket = dir + "/pfmd.sock";
  const std::string err = testing::MakeTempDir("abuse") + "/pfmd.err";
  constexpr rlim_t kNofile = 64;
  constexpr int kConnections = 100;
  std::vector<std::string> flags = kSimFlags;
  // Above the fd limit, so accept() fails before any cap refuses.
  flags.insert(flags.end(), {"--socket", socket, "--max-connections-per-uid",
                             "1000", "--max-connections", "1000"});
  const pid_t pid = SpawnPfmd(flags, err, [] {
    const rlimit l{kNofile, kNofile};
    if (::setrlimit(RLIMIT_NOFILE, &l) != 0) ::_exit(125);
  });
  ASSERT_TRUE(WaitForSocket(socket, pid)) << ReadFile(err);
  std::vector<int> conns;
  for (int i = 0; i < kConnections; ++i) {
    const int fd = ConnectRaw(socket);  // the backlog takes what pfmd cannot
    ASSERT_GE(fd, 0) << i;
    conns.push_back(fd);
  }
  // Until pfmd has run out of fds (bounded: 5 s).
  for (int i = 0; i < 500 && ReadFile(err).find("pfmd: accept:") == std::string::npos;
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_NE(ReadFile(err).find("pfmd: accept:"), std::string::npos) << ReadFile(err);

  double cpu_percent = 100;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const uint64_t t0 = CpuTicks(pid);
    const Clock::time_point w0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double ticks = static_cast<double>(CpuTicks(pid) - t0);
    cpu_percent = 100 * ticks / static_cast<double>(::sysconf(_SC_CLK_TCK)) /
                  std::chrono::duration<double>(Clock::now() - w0).count();
    if (cpu_percent < 20) break;
  }
  std::cout << "pfmd CPU with accept() failing (EMFILE): " << cpu_percent
            << "% of a core\n";
  EXPECT_LT(cpu_percent, 20);
  const std::string log = ReadFile(err);
  EXPECT_EQ(CountOf(log, "pfmd: accept:"), 1u) << "one line per episode:\n" << log;
  EXPECT_NE(log.find("Too many open files"), std::string::npos) << log;

  for (int fd : conns) ::close(fd);
  // Served again once the fds are back (bounded).
  absl::StatusOr<std::string> body = RoundTrip(socket, "{\"op\":\"status\"}");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_NE(body->find("\"driver\":\"sim\""), std::string::npos) << *body;
  EXPECT_EQ(Pfmctl(socket, {"status"}, 10).exit_code, 0);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid, std::chrono::seconds(5)), 0);
  ::rmdir(dir.c_str());
}

TEST(AbuseE2e, SocketPathThatIsNotASocketIsRefusedAndLeftIntact) {
  const std::string dir = testing::MakeSocketDir();
  const std::string file = dir + "/file";
  const std::string link = dir + "/link";
  const std::string precious = dir + "/precious";
  { std::ofstream(file) << "keep me\n"; }
  { std::ofstream(precious) << "keep me too\n"; }
  ASSERT_EQ(::symlink(precious.c_str(), link.c_str()), 0);

  testing::Result r = testing::Run({testing::PfmdPath(), "--driver", "sim",
                                    "--socket", file}, {}, 10);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("pfmd: FAILED_PRECONDITION: socket path " + file +
                       " is a regular file, not a socket"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(ReadFile(file), "keep me\n");

  r = testing::Run({testing::PfmdPath(), "--driver", "sim", "--socket", link}, {}, 10);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("socket path " + link + " is a symbolic link to " + precious),
            std::string::npos)
      << r.err;
  struct stat st;
  ASSERT_EQ(::lstat(link.c_str(), &st), 0) << "the symlink was removed";
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(ReadFile(precious), "keep me too\n");

  // A socket file nobody listens on is still replaced.
  const std::string stale = dir + "/stale.sock";
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, stale.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(s);
  const std::string err = testing::MakeTempDir("abuse") + "/pfmd.err";
  const pid_t pid = SpawnPfmd({"--driver", "sim", "--sim-paused", "--socket", stale}, err);
  EXPECT_TRUE(WaitForSocket(stale, pid)) << ReadFile(err);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid, std::chrono::seconds(5)), 0);

  for (const std::string& f : {file, link, precious, stale}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

// The directories above the socket: a link another uid planted, or a
// directory another uid owns or may write (a sticky one only above the
// socket's own), would let that uid choose what answers at the path, or
// where a root pfmd creates its socket. pfmd refuses to start and creates
// nothing.
TEST(AbuseE2e, SocketDirectoryAnotherUidControlsIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown to another uid)";
  const std::string dir = testing::MakeSocketDir();
  const std::string target = dir + "/roots";
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  const std::string link = dir + "/link";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  ASSERT_EQ(::lchown(link.c_str(), testing::kNobody, testing::kNobody), 0);
  testing::Result r = testing::Run(
      {testing::PfmdPath(), "--driver", "sim", "--socket", link + "/pfmd.sock"}, {}, 10);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("pfmd: FAILED_PRECONDITION: socket path " + link + "/pfmd.sock: " +
                       link + " is a symbolic link owned by uid 65534"),
            std::string::npos)
      << r.err;
  struct stat st;
  EXPECT_NE(::lstat((target + "/pfmd.sock").c_str(), &st), 0) << "a socket was created";

  const std::string theirs = dir + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(::chown(theirs.c_str(), testing::kNobody, testing::kNobody), 0);
  r = testing::Run({testing::PfmdPath(), "--driver", "sim", "--socket", theirs + "/pfmd.sock"},
                   {}, 10);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(theirs + " is a directory owned by uid 65534, mode 0700"),
            std::string::npos)
      << r.err;
  EXPECT_NE(::lstat((theirs + "/pfmd.sock").c_str(), &st), 0) << "a socket was created";

  const std::string open_dir = dir + "/open";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  r = testing::Run(
      {testing::PfmdPath(), "--driver", "sim", "--socket", open_dir + "/pfmd.sock"}, {}, 10);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("writable by group or others without the sticky bit"),
            std::string::npos)
      << r.err;
  // With the sticky bit (as /tmp): still not as the socket's own directory
  // (anyone could take the name first), but a directory of root's below it
  // serves.
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);
  r = testing::Run(
      {testing::PfmdPath(), "--driver", "sim", "--socket", open_dir + "/pfmd.sock"}, {}, 10);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("and it is the socket's own: another user could take the socket's name"),
            std::string::npos)
      << r.err;
  const std::string below = open_dir + "/roots";
  ASSERT_EQ(::mkdir(below.c_str(), 0700), 0);
  const std::string err = testing::MakeTempDir("abuse") + "/pfmd.err";
  const pid_t pid =
      SpawnPfmd({"--driver", "sim", "--sim-paused", "--socket", below + "/pfmd.sock"}, err);
  EXPECT_TRUE(WaitForSocket(below + "/pfmd.sock", pid)) << ReadFile(err);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid, std::chrono::seconds(5)), 0);
  (void)!::system(("rm -rf '" + dir + "'").c_str());
}

// A socket something listens on is never replaced, and neither is one pfmd
// cannot probe: with the socket's mode 0000 and pfmd without
// CAP_DAC_OVERRIDE (root otherwise connects anywhere), connect says EACCES,
// which tells nothing about a listener.
TEST(AbuseE2e, LiveOrUnprobeableSocketIsLeftAlone) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (drops capabilities)";
  const std::string dir = testing::MakeSocketDir();
  const std::string live = dir + "/live.sock";
  const int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, live.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(l, 16), 0);
  auto still_listening = [&] {
    const int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool ok = ::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(c);
    return ok;
  };
  const std::string err = testing::MakeTempDir("abuse") + "/pfmd.err";

  pid_t pid = SpawnPfmd({"--driver", "sim", "--sim-paused", "--socket", live}, err);
  EXPECT_NE(WaitExit(pid, std::chrono::seconds(10)), 0);
  EXPECT_NE(ReadFile(err).find("ALREADY_EXISTS: something already listens on " + live),
            std::string::npos)
      << ReadFile(err);
  EXPECT_TRUE(still_listening()) << "pfmd replaced a live socket";

  ASSERT_EQ(::chmod(live.c_str(), 0), 0);
  pid = SpawnPfmd({"--driver", "sim", "--sim-paused", "--socket", live}, err, [] {
    // Gone from the bounding set, root's capabilities after exec lack them.
    if (::prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) != 0 ||
        ::prctl(PR_CAPBSET_DROP, CAP_DAC_READ_SEARCH, 0, 0, 0) != 0)
      ::_exit(125);
  });
  EXPECT_NE(WaitExit(pid, std::chrono::seconds(10)), 0);
  EXPECT_NE(ReadFile(err).find("FAILED_PRECONDITION: cannot tell whether something listens on " +
                               live + " (connect: Permission denied)"),
            std::string::npos)
      << ReadFile(err);
  EXPECT_TRUE(still_listening()) << "pfmd replaced a socket it could not probe";

  ::close(l);
  ::unlink(live.c_str());
  ::rmdir(dir.c_str());
}

TEST(AbuseE2e, InheritedFdThreeThatIsNotAListeningUnixStreamSocketIsRefused) {
  struct Case {
    const char* what;
    int domain, type;
    bool bind_unix;
    const char* says;
  };
  const Case cases[] = {
      {"tcp", AF_INET, SOCK_STREAM, false, "but it is an AF_INET socket"},
      {"unix dgram", AF_UNIX, SOCK_DGRAM, false,
       "but it is an AF_UNIX datagram socket"},
      {"unix stream, not listening", AF_UNIX, SOCK_STREAM, true,
       "but it is an AF_UNIX stream socket that is not listening"},
  };
  const std::string dir = testing::MakeSocketDir();
  const std::string unused = dir + "/unused.sock";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const int fd = ::socket(c.domain, c.type, 0);  // never bound to a network
    ASSERT_GE(fd, 0);
    const std::string bound = dir + "/bound.sock";
    if (c.bind_unix) {
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, bound.c_str(), sizeof(addr.sun_path) - 1);
      ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    }
    const std::string err = testing::MakeTempDir("abuse") + "/pfmd.err";
    const pid_t pid = SpawnPfmd(
        {"--driver", "sim", "--sim-paused", "--socket", unused}, err, [fd] {
          if (::dup2(fd, 3) != 3) ::_exit(124);
          ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
          ::setenv("LISTEN_FDS", "1", 1);
        });
    ::close(fd);
    EXPECT_EQ(WaitExit(pid, std::chrono::seconds(10)), 1);
    const std::string log = ReadFile(err);
    EXPECT_NE(log.find("pfmd: FAILED_PRECONDITION: socket activation (LISTEN_PID, "
                       "LISTEN_FDS): fd 3 must be a listening AF_UNIX stream "
                       "socket, " +
                       std::string(c.says)),
              std::string::npos)
        << log;
    EXPECT_NE(::access(unused.c_str(), F_OK), 0) << "fell back to --socket";
    ::unlink(bound.c_str());
  }
  ::rmdir(dir.c_str());
}

// Resident set of `pid` in KiB (VmRSS of /proc/PID/status), or 0.
uint64_t RssKiB(pid_t pid) {
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

// The per-connection request budget (kRequestsPerTurn) as a client sees it:
// one connection pipelines 5,000 requests in one write and reads its replies
// as they come; a second client's request, sent while most of that burst is
// still to be served, is served after at most a few turns of the burst (16
// requests each), not after the rest of what pfmd read from the burst. The
// order is pfmd's own: every request is `sim run` of 1 ns on the paused
// sim, so the virtual time in the second client's reply says how many of the
// burst's requests pfmd served before it; the first reader's count when the
// request was sent says how many it had served by then (at least). Without
// the budget the difference is one read buffer of requests (~400-500);
// with it, a few dozen. A scheduling hiccup in this process can only make it
// larger: the measurement is repeated (kAttempts).
TEST(AbuseE2e, AnotherClientsRequestIsServedWithinAFewTurnsOfAPipelinedBurst) {
  Daemon d(kSimFlags);
  ASSERT_TRUE(d.started());
  constexpr int kBurst = 5000;
  const std::string run1 = EncodeFrame("{\"op\":\"sim\",\"action\":\"run\",\"ns\":1}");
  std::string burst;
  for (int i = 0; i < kBurst; ++i) burst += run1;
  const int other = ConnectRaw(d.socket());
  ASSERT_GE(other, 0);
  auto now_of = [&](int fd) -> int64_t {
    absl::StatusOr<Frame> f = RecvFrame(fd, 10000);
    if (!f.ok()) return -1;
    return json::parse(f->body).at("result").at("now").to_number<int64_t>();
  };
  int best = 1 << 30;
  for (int attempt = 0; attempt < kAttempts && best >= 100; ++attempt) {
    // Where the virtual clock stands before the burst.
    ASSERT_EQ(::send(other, run1.data(), run1.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(run1.size()));
    const int64_t now0 = now_of(other);
    ASSERT_GE(now0, 0);
    const int fd = ConnectRaw(d.socket());
    ASSERT_GE(fd, 0);
    // The burst's replies counted as they arrive, by a reader that takes
    // whatever the socket holds in one recv and counts the frames in it, so
    // a reply pfmd has sent is counted almost at once.
    std::atomic<int> replies{0};
    std::thread reader([&] {
      std::string pending;
      std::vector<char> buf(1 << 20);
      int got = 0;
      while (got < kBurst) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 10000) != 1) break;
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
        if (n <= 0) break;
        pending.append(buf.data(), static_cast<size_t>(n));
        size_t off = 0;
        while (pending.size() - off >= 4) {
          uint32_t len;
          std::memcpy(&len, pending.data() + off, 4);  // little-endian length (wire.h)
          if (pending.size() - off - 4 < len) break;
          off += 4 + len;
          ++got;
        }
        pending.erase(0, off);
        replies.store(got);
      }
    });
    // The whole burst in one send (about 220 KB: the socket takes it).
    ASSERT_EQ(::send(fd, burst.data(), burst.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(burst.size()));
    while (replies.load() < 100) std::this_thread::yield();  // being served
    const int at_send = replies.load();
    ASSERT_EQ(::send(other, run1.data(), run1.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(run1.size()));
    const int64_t now = now_of(other);
    reader.join();
    ::close(fd);
    ASSERT_EQ(replies.load(), kBurst);
    ASSERT_GT(now, now0);
    const int served_before = static_cast<int>(now - now0 - 1);  // burst requests before it
    std::cout << "burst requests served: " << at_send << " when the other client sent, "
              << served_before << " before its request (" << served_before - at_send
              << " between)\n";
    EXPECT_LT(at_send, kBurst / 2) << "the burst was nearly over before the measurement";
    best = std::min(best, served_before - at_send);
  }
  ::close(other);
  EXPECT_LT(best, 100);
}

// Issue 16's abuse run, everything at once against one pfmd while root
// streams a lossless session: uid 65534 opens connections and then sessions
// until it is refused; 50 clients pipeline requests and never read; 10,000
// malformed frames (invalid JSON, non-objects, no op, unknown ops, bad
// specs) on 10 connections, plus oversized frames and frames cut short;
// fd-passing spam (2,000 frames of 16 fds). Root keeps driving the sim and
// its stream loses nothing. A first round at the same scale warms pfmd up
// (its allocator's arenas, the kernel's socket caches); after the second,
// pfmd's fd count and RSS are within 5% of what they were after the first,
// and `status` holds nothing but root's session. docs/hardening.md has the
// numbers.
TEST(AbuseE2e, EverythingAtOnceWhileRootStreamsLosesNothingAndLeavesNoResidue) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the test drops to uid 65534";
  // --max-sessions-per-uid 100: the uid's cap, not its 16 consumers per task
  // (--max-consumers-per-uid) nor a task's 64, is what refuses it (its
  // sessions go to seven tasks, at most 15 each).
  Daemon d({"--driver", "sim", "--sim-pmu", "skl", "--sim-cpus", "2", "--sim-tasks", "8",
            "--sim-paused", "--max-sessions-per-uid", "100"});
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(d.OpenToOtherUids());
  const std::string socket = d.socket();
  const std::string dir = testing::MakeTempDir("abuse");
  const uint64_t id = testing::Num(
      testing::PfmctlJson(socket, {"--json", "session", "create", "--pid", "1000", "--bts",
                                   "lossless", "--buffer", "16MiB"})
          .at("id"));
  const std::string file = dir + "/root.trace";
  testing::Result stream;
  std::thread streamer(
      [&] { stream = Pfmctl(socket, {"stream", std::to_string(id), "-o", file}, 600); });
  // Root drives the machine: 1 ms of simulated time every 2 ms, each a
  // round trip through the same event loop the abusers load.
  std::atomic<bool> stop_driving{false};
  std::atomic<int> runs{0}, run_errors{0};
  std::atomic<double> worst_run_ms{0};
  std::thread driver([&] {
    absl::StatusOr<Client> c = Client::Connect(socket);
    if (!c.ok()) {
      run_errors = 1;
      return;
    }
    while (!stop_driving) {
      const Clock::time_point t0 = Clock::now();
      absl::StatusOr<Client::Reply> r =
          c->Call("sim", {{"action", "run"}, {"ns", 1000000}});
      const double ms = Ms(Clock::now() - t0);
      if (!r.ok()) run_errors.fetch_add(1);
      runs.fetch_add(1);
      if (ms > worst_run_ms) worst_run_ms = ms;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });

  auto abuse_round = [&](const std::string& name) -> json::object {
    json::object out;
    // uid 65534: connections until refused, then sessions on them until
    // refused. Its connections close (and its sessions end) as its process
    // exits at the end of the round.
    std::thread flood([&] {
      json::object got = AsUid(kNobody, [&]() -> json::object {
        std::vector<Client> open;
        json::object o;
        for (int i = 0; i < 200; ++i) {
          absl::StatusOr<Client> c = Client::Connect(socket);
          if (!c.ok()) break;
          absl::StatusOr<Client::Reply> r = c->Call("ping");
          if (!r.ok()) {
            o["connection_refused"] = std::string(r.status().message());
            break;
          }
          open.push_back(*std::move(c));
        }
        o["connections"] = open.size();
        int sessions = 0;
        for (int i = 0; i < 1000 && !open.empty(); ++i) {
          absl::StatusOr<Client::Reply> r = open[i % open.size()].Call(
              "session_create",
              {{"spec", json::object{{"pid", 1001 + i % 7}, {"bts", "lossless"},
                                     {"buffer_bytes", 64 << 10}}}});
          if (!r.ok()) {
            o["session_refused"] = absl::StrCat(StatusCodeName(r.status().code()), ": ",
                                                r.status().message());
            break;
          }
          ++sessions;
        }
        o["sessions"] = sessions;
        return o;
      });
      out["nobody"] = got;
    });
    // 50 clients that pipeline status requests and never read.
    constexpr int kNonReaders = 50;
    std::string requests;
    for (int i = 0; i < 2000; ++i) requests += EncodeFrame("{\"op\":\"status\"}");
    std::vector<int> idle;
    for (int i = 0; i < kNonReaders; ++i) {
      const int fd = ConnectRaw(socket);
      if (fd < 0) continue;
      idle.push_back(fd);
      size_t off = 0;
      while (off < requests.size()) {
        const ssize_t n = ::send(fd, requests.data() + off, requests.size() - off,
                                 MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
    }
    out["non_readers"] = idle.size();
    // 10,000 malformed frames on 10 connections, each answered
    // INVALID_ARGUMENT on a connection that stays open.
    const std::vector<std::string> bad = {
        "{\"op\":", "[1,2,3]", "\"op\"", "{}", "{\"op\":\"no_such_op\"}", "{\"op\":7}",
        "{\"op\":\"session_create\",\"spec\":{\"pid\":\"x\"}}",
        "{\"op\":\"session_show\",\"id\":\"one\"}", std::string("\xff\xfe\0garbage", 10),
        std::string("{\"op\":\"ping\"}\0", 14)};
    std::atomic<int> invalid{0}, other_replies{0};
    std::vector<std::thread> garblers;
    for (int c = 0; c < 10; ++c) {
      garblers.emplace_back([&, c] {
        const int fd = ConnectRaw(socket);
        if (fd < 0) return;
        std::thread rd([&] {
          for (int i = 0; i < 1000; ++i) {
            absl::StatusOr<Frame> f = RecvFrame(fd, 20000);
            if (!f.ok()) break;
            (f->body.find("\"INVALID_ARGUMENT\"") != std::string::npos ? invalid
                                                                         : other_replies)
                .fetch_add(1);
          }
        });
        std::string frames;
        for (int i = 0; i < 1000; ++i) frames += EncodeFrame(bad[(i + c) % bad.size()]);
        size_t off = 0;
        while (off < frames.size()) {
          const ssize_t n = ::send(fd, frames.data() + off, frames.size() - off, MSG_NOSIGNAL);
          if (n <= 0) break;
          off += static_cast<size_t>(n);
        }
        rd.join();
        ::close(fd);
      });
    }
    // Frames over the limit close only their connection; frames cut short
    // are never answered and go with the hang-up.
    int oversized_closed = 0;
    for (int i = 0; i < 5; ++i) {
      const int fd = ConnectRaw(socket);
      if (fd < 0) continue;
      const uint32_t len = kMaxFrameBytes + 1 + i;
      ::send(fd, &len, sizeof len, MSG_NOSIGNAL);
      absl::StatusOr<Frame> f = RecvFrame(fd, 5000);  // the error reply, then EOF
      absl::StatusOr<Frame> eof = RecvFrame(fd, 5000);
      // Closed: the hang-up (UNAVAILABLE), not the 5 s timeout.
      oversized_closed += f.ok() && f->body.find("exceeds the limit") != std::string::npos &&
                          eof.status().code() == absl::StatusCode::kUnavailable;
      ::close(fd);
      const int cut = ConnectRaw(socket);
      const std::string half = EncodeFrame("{\"op\":\"status\"}").substr(0, 9);
      ::send(cut, half.data(), half.size(), MSG_NOSIGNAL);
      ::close(cut);
    }
    out["oversized_closed"] = oversized_closed;
    // fd-passing spam: 20 connections x 100 frames x 16 fds.
    int fd_frames = 0, fds_came_back = 0;
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const std::vector<int> fds(kMaxFdsPerFrame, devnull);
    for (int c = 0; c < 20; ++c) {
      const int fd = ConnectRaw(socket);
      if (fd < 0) continue;
      for (int i = 0; i < 100; ++i) {
        if (!SendFrame(fd, "{\"op\":\"ping\"}", fds).ok()) break;
        absl::StatusOr<Frame> r = RecvFrame(fd, 5000);
        if (!r.ok()) break;
        ++fd_frames;
        fds_came_back += static_cast<int>(r->fds.size());
      }
      ::close(fd);
    }
    ::close(devnull);
    out["fd_frames"] = fd_frames;
    out["fds_came_back"] = fds_came_back;
    for (std::thread& t : garblers) t.join();
    out["invalid_argument_replies"] = invalid.load();
    out["other_replies"] = other_replies.load();
    flood.join();
    // The non-readers: pfmd drops them itself once they have stalled for
    // its timeout (5 s); bounded here at 20 s.
    int dropped = 0;
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      dropped = 0;
      for (int fd : idle) dropped += HungUp(fd);
      if (dropped == static_cast<int>(idle.size())) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    out["non_readers_dropped_by_pfmd"] = dropped;
    for (int fd : idle) ::close(fd);
    std::cout << name << ": " << json::serialize(out) << "\n";
    return out;
  };
  // What pfmd holds once the round's clients are gone: its fds, its RSS,
  // and status. Waits (bounded) for it to see every hang-up.
  struct Held {
    int fds;
    uint64_t rss_kib;
    json::value status;
  };
  auto settle = [&]() -> Held {
    Held h{};
    for (int i = 0; i < 100; ++i) {
      h.status = testing::PfmctlJson(socket, {"status"});
      if (testing::Num(h.status.at("sessions")) == 1u) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // pfmd trims its heap within kTrimDelay (server.h: 500 ms) of any
    // connection's close; the last close here is status's own connection.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    h.fds = FdCount(d.pid());
    h.rss_kib = RssKiB(d.pid());
    return h;
  };
  const Held before_warm = settle();
  const json::object warm = abuse_round("warm-up round");
  const Held start = settle();
  const json::object round = abuse_round("measured round");
  const Held end = settle();
  std::cout << "pfmd fds " << before_warm.fds << " -> " << start.fds << " -> " << end.fds
            << ", RSS " << before_warm.rss_kib << " -> " << start.rss_kib << " -> "
            << end.rss_kib << " KiB\n";

  for (const json::object* r : {&warm, &round}) {
    const json::object& o = *r;
    const json::object& nobody = o.at("nobody").as_object();
    ASSERT_FALSE(nobody.contains("child_failed")) << o;
    EXPECT_EQ(testing::Num(nobody.at("connections")), 64u) << o;
    EXPECT_EQ(nobody.at("connection_refused").as_string(),
              "uid 65534 has 64 connections open (limit 64, --max-connections-per-uid)");
    EXPECT_EQ(testing::Num(nobody.at("sessions")), 100u) << o;
    EXPECT_EQ(nobody.at("session_refused").as_string(),
              "RESOURCE_EXHAUSTED: uid 65534 has 100 sessions (limit 100, "
              "--max-sessions-per-uid)")
        << o;
    EXPECT_EQ(testing::Num(o.at("non_readers")), 50u);
    EXPECT_EQ(testing::Num(o.at("non_readers_dropped_by_pfmd")), 50u) << o;
    EXPECT_EQ(testing::Num(o.at("invalid_argument_replies")), 10000u) << o;
    EXPECT_EQ(testing::Num(o.at("other_replies")), 0u) << o;
    EXPECT_EQ(testing::Num(o.at("oversized_closed")), 5u) << o;
    EXPECT_EQ(testing::Num(o.at("fd_frames")), 2000u) << o;
    EXPECT_EQ(testing::Num(o.at("fds_came_back")), 0u) << o;
  }
  // No residue: root's session alone, charged to root alone.
  const json::value& st = end.status;
  EXPECT_EQ(testing::Num(st.at("sessions")), 1u) << st;
  const json::array& charged = st.at("memory").at("charged").as_array();
  ASSERT_EQ(charged.size(), 1u) << st;
  EXPECT_EQ(testing::Num(charged[0].at("uid")), 0u) << st;
  EXPECT_EQ(testing::Num(charged[0].at("bytes")), testing::Num(st.at("memory").at("allocated")));
  EXPECT_EQ(testing::Num(start.status.at("memory").at("allocated")),
            testing::Num(st.at("memory").at("allocated")));
  // fds and RSS back within 5% of where pfmd started, before any abuse
  // (and so of where the measured round started): pfmd trims its heap
  // after a burst of closes (without the trim the warm-up round alone
  // left RSS 12-13 % up).
  for (const Held* h : {&start, &end}) {
    EXPECT_LE(std::abs(h->fds - before_warm.fds), std::max(1, before_warm.fds / 20))
        << before_warm.fds << " -> " << h->fds;
    EXPECT_LE(h->rss_kib, before_warm.rss_kib + before_warm.rss_kib / 20)
        << before_warm.rss_kib << " -> " << h->rss_kib << " KiB";
  }
  EXPECT_LE(end.rss_kib, start.rss_kib + start.rss_kib / 20)
      << start.rss_kib << " -> " << end.rss_kib << " KiB";

  // Root's stream: every branch the sim stored, nothing lost, and root's
  // own requests went on being served throughout.
  stop_driving = true;
  driver.join();
  std::cout << "root's sim runs: " << runs.load() << ", worst round trip " << worst_run_ms
            << " ms\n";
  EXPECT_EQ(run_errors.load(), 0);
  EXPECT_GT(runs.load(), 100);
  ASSERT_EQ(Pfmctl(socket, {"sim", "exit", "1000"}).exit_code, 0);
  streamer.join();
  ASSERT_EQ(stream.exit_code, 0) << stream.err;
  absl::StatusOr<Trace> t = ReadTrace(file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete) << t->cut_reason;
  uint64_t branches = 0;
  for (const pfm_record& r : t->records) {
    EXPECT_NE(r.type, PFM_REC_LOST);
    branches += r.type == PFM_REC_BRANCH;
  }
  const json::value stats = testing::PfmctlJson(socket, {"sim", "stats", "1000"});
  EXPECT_EQ(branches, testing::Num(stats.at("tasks").as_array().at(0).at("bts_user")));
  EXPECT_GT(branches, 10000u);
  EXPECT_EQ(testing::Num(t->trailer.at("lost")), 0u);
  std::cout << "root streamed " << branches << " branches, 0 lost\n";
  EXPECT_EQ(Pfmctl(socket, {"session", "kill", std::to_string(id)}).exit_code, 0);
  const json::value last = testing::PfmctlJson(socket, {"status"});
  EXPECT_EQ(testing::Num(last.at("sessions")), 0u);
  EXPECT_TRUE(last.at("memory").at("charged").as_array().empty()) << last;
}

}  // namespace
}  // namespace pfm
