// End to end, issue 6: session lifecycle through the real pfmd on the
// simulated machine. A client that is killed loses its non-detached
// sessions and everything they held; malformed input is refused without
// disturbing other clients; a traced task that exits leaves its records
// readable.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pfm/client.h"
#include "pfm/wire.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Num;
using testing::Pfmctl;
using testing::PfmctlJson;
using testing::Str;

json::array Breakpoints(int n, uint64_t base) {
  json::array out;
  for (int i = 0; i < n; ++i) {
    char buf[64];
    snprintf(buf, sizeof(buf), "0x%llx:8:w",
             static_cast<unsigned long long>(base + 8 * i));
    out.push_back(json::value(buf));
  }
  return out;
}

// Specs of the killed client's three sessions: four pinned debug registers
// on 1000, a lossless BTS stream on 1001, pinned counters on 1002.
std::vector<json::object> ThreeSpecs() {
  return {
      {{"role", "debugger"}, {"pid", 1000}, {"breakpoints", Breakpoints(4, 0x601000)},
       {"pinned", true}, {"detached", false}},
      {{"pid", 1001}, {"bts", "lossless"}, {"buffer_bytes", 1 << 20}, {"detached", false}},
      {{"pid", 1002},
       {"counters", json::array{json::value("branch-instructions"),
                                json::value("branch-misses")}},
       {"pinned", true},
       {"detached", false}},
  };
}

class LifecycleE2e : public testing::DaemonTest {
 protected:
  void SetUp() override {
    StartSim({"--sim-pmu", "skl", "--sim-cpus", "2", "--sim-tasks", "4", "--sim-paused"});
  }
  json::object Status() { return PfmctlJson(socket(), {"status"}).as_object(); }
  testing::Result CreateBreakpoints(int n, uint64_t base) {
    std::vector<std::string> f = {"session", "create", "--role", "debugger", "--pid",
                                  "1000", "--pinned"};
    for (const json::value& b : Breakpoints(n, base)) {
      f.push_back("--breakpoint");
      f.push_back(Str(b));
    }
    return Pfmctl(socket(), f);
  }
  // Every hardware holder the daemon lists (counters, debug registers, DS).
  size_t Holders() {
    json::value r = PfmctlJson(socket(), {"resources"});
    size_t n = 0;
    for (const json::value& c : r.at("cpus").as_array()) n += c.at("holders").as_array().size();
    for (const json::value& t : r.at("tasks").as_array()) n += t.at("holders").as_array().size();
    return n;
  }
};

TEST_F(LifecycleE2e, KilledClientsSessionsChargesAndSlotsAreFreedWithinASecond) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const std::string socket = d_->socket();
  const pid_t child = ::fork();
  if (child == 0) {
    // The client: three non-detached sessions on one connection, then it
    // waits to be killed. Reports "ok" or the first refusal.
    ::close(p[0]);
    std::string report = "ok\n";
    absl::StatusOr<Client> c = Client::Connect(socket);
    if (!c.ok()) report = std::string(c.status().message()) + "\n";
    for (const json::object& spec : ThreeSpecs()) {
      if (!c.ok() || report != "ok\n") break;
      absl::StatusOr<Client::Reply> r = c->Call("session_create", {{"spec", spec}});
      if (!r.ok()) report = std::string(r.status().message()) + "\n";
    }
    (void)!::write(p[1], report.data(), report.size());
    for (;;) ::pause();
  }
  ::close(p[1]);
  std::string report;
  char ch;
  while (::read(p[0], &ch, 1) == 1 && ch != '\n') report += ch;
  ::close(p[0]);
  ASSERT_EQ(report, "ok");
  ASSERT_EQ(Pfmctl(socket, {"sim", "run", "2000000"}).exit_code, 0);
  // While it lives: three sessions, memory charged, slots held (a fifth
  // pinned breakpoint on the task has no debug register).
  json::object st = Status();
  ASSERT_EQ(Num(st.at("sessions")), 3u);
  EXPECT_GT(Num(st.at("memory").at("allocated")), 1u << 20);
  EXPECT_GE(Holders(), 7u);  // 4 breakpoints + 2 counters + 1 DS consumer
  testing::Result refused = CreateBreakpoints(1, 0x602000);
  EXPECT_NE(refused.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << refused.err;

  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  // The daemon notices the hang-up on its own; poll until it has.
  bool freed = false;
  while (!freed && std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(1)) {
    st = Status();
    freed = Num(st.at("sessions")) == 0;
    if (!freed) ::usleep(10000);
  }
  EXPECT_TRUE(freed) << "sessions still there 1 s after SIGKILL: " << st;
  EXPECT_EQ(Num(st.at("memory").at("allocated")), 0u) << st;
  EXPECT_TRUE(st.at("memory").at("charged").as_array().empty()) << st;
  EXPECT_EQ(Holders(), 0u);
  // The debug registers are really back: four new pinned breakpoints fit.
  testing::Result again = CreateBreakpoints(4, 0x603000);
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

TEST_F(LifecycleE2e, MalformedInputIsRefusedClearlyAndOtherClientsAreUnaffected) {
  // A well-behaved client with a live, non-detached session.
  absl::StatusOr<Client> good = Client::Connect(socket());
  ASSERT_TRUE(good.ok()) << good.status();
  absl::StatusOr<Client::Reply> made = good->Call(
      "session_create",
      {{"spec", json::object{{"pid", 1000}, {"bts", "lossless"}, {"detached", false}}}});
  ASSERT_TRUE(made.ok()) << made.status();
  const uint64_t id = Num(made->result.at("id"));
  ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "2000000"}).exit_code, 0);

  // One raw connection per abuse; each gets a reply saying what was wrong.
  auto exchange = [&](const std::string& bytes) -> std::string {
    int fd = testing::ConnectRaw(socket());
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    absl::StatusOr<Frame> f = RecvFrame(fd, 5000);
    ::close(fd);
    return f.ok() ? f->body : "no reply: " + std::string(f.status().message());
  };
  // Plain-text garbage: its first 4 bytes read as a ~540 MB length.
  std::string reply = exchange("GET / HTTP/1.1\r\nHost: pfmd\r\n\r\n");
  EXPECT_NE(reply.find("INVALID_ARGUMENT"), std::string::npos) << reply;
  EXPECT_NE(reply.find("exceeds"), std::string::npos) << reply;
  // A 2 MiB frame (twice the limit), header and body sent in full.
  std::string big = EncodeFrame(std::string(2 << 20, ' '));
  reply = exchange(big.substr(0, 4) + std::string(64 << 10, ' '));
  EXPECT_NE(reply.find("exceeds"), std::string::npos) << reply;
  // Binary garbage in a well-formed frame.
  reply = exchange(EncodeFrame(std::string("\xff\xfe\x00\x01garbage", 11)));
  EXPECT_NE(reply.find("request is not valid JSON"), std::string::npos) << reply;
  reply = exchange(EncodeFrame("{\"op\":\"frobnicate\"}"));
  EXPECT_NE(reply.find("unknown command 'frobnicate'"), std::string::npos) << reply;
  reply = exchange(EncodeFrame("{\"op\":5}"));
  EXPECT_NE(reply.find("no \\\"op\\\" string"), std::string::npos) << reply;
  // Absurd sizes and numbers in an otherwise good request.
  reply = exchange(EncodeFrame(
      "{\"op\":\"session_create\",\"spec\":{\"pid\":1001,\"bts\":\"lossless\","
      "\"buffer_bytes\":107374182400}}"));
  EXPECT_NE(reply.find("buffer 107374182400 bytes: must be 64..1073741824"),
            std::string::npos)
      << reply;
  reply = exchange(EncodeFrame(
      "{\"op\":\"session_create\",\"spec\":{\"pid\":1099511627776,\"bts\":\"lossless\"}}"));
  EXPECT_NE(reply.find("INVALID_ARGUMENT"), std::string::npos) << reply;
  EXPECT_NE(reply.find("\\\"pid\\\""), std::string::npos) << reply;
  // A misspelt key is refused, not ignored (it would get the default).
  reply = exchange(EncodeFrame(
      "{\"op\":\"session_create\",\"spec\":{\"pid\":1001,\"bts\":\"lossless\","
      "\"buffer\":1048576}}"));
  EXPECT_NE(reply.find("\"code\":\"INVALID_ARGUMENT\",\"message\":\"unknown spec key \\\"buffer\\\""),
            std::string::npos)
      << reply;
  // sim pids as spec pids: not cut to 32 bits, not negative.
  reply = exchange(EncodeFrame("{\"op\":\"sim\",\"action\":\"exit\",\"pid\":4294968297}"));
  EXPECT_NE(reply.find("sim pid 4294968297: expected 1..1073741823"), std::string::npos)
      << reply;
  reply = exchange(EncodeFrame("{\"op\":\"sim\",\"action\":\"stats\",\"pid\":-5}"));
  EXPECT_NE(reply.find("sim pid -5: expected 1..1073741823"), std::string::npos) << reply;
  reply = exchange(EncodeFrame("{\"op\":\"session_show\",\"id\":-1}"));
  EXPECT_NE(reply.find("NOT_FOUND"), std::string::npos) << reply;
  // session_maps' page position and mode: numbers and a bool; a sim
  // session has no tracer, so no lists.
  const std::string maps = absl::StrCat("{\"op\":\"session_maps\",\"id\":", id);
  reply = exchange(EncodeFrame(maps + ",\"seq\":\"1\"}"));
  EXPECT_NE(reply.find("\"seq\\\" must be a non-negative integer"), std::string::npos) << reply;
  reply = exchange(EncodeFrame(maps + ",\"mapping\":-1}"));
  EXPECT_NE(reply.find("\"mapping\\\" must be a non-negative integer"), std::string::npos)
      << reply;
  reply = exchange(EncodeFrame(maps + ",\"current\":1}"));
  EXPECT_NE(reply.find("\"current\\\" must be true or false"), std::string::npos) << reply;
  reply = exchange(EncodeFrame(maps + "}"));
  EXPECT_NE(reply.find("{\"ok\":true,\"result\":{\"lists\":[],\"newest\":0},"),
            std::string::npos)
      << reply;
  // The largest buffer the spec allows is still over the per-uid limit.
  reply = exchange(EncodeFrame(
      "{\"op\":\"session_create\",\"spec\":{\"pid\":1001,\"bts\":\"lossless\","
      "\"buffer_bytes\":1073741824}}"));
  EXPECT_NE(reply.find("RESOURCE_EXHAUSTED"), std::string::npos) << reply;
  testing::Result r = Pfmctl(socket(), {"session", "create", "--pid", "1001", "--bts",
                                        "lossless", "--buffer", "100GiB"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("buffer"), std::string::npos) << r.err;
  // A truncated frame left hanging: the daemon waits for the rest on that
  // connection only.
  int cut = testing::ConnectRaw(socket());
  ASSERT_GE(cut, 0);
  const std::string partial = EncodeFrame("{\"op\":\"status\",\"pad\":\"xxxxxxxx\"}").substr(0, 9);
  ASSERT_EQ(::write(cut, partial.data(), partial.size()), static_cast<ssize_t>(partial.size()));

  // The good client's connection and session are untouched.
  absl::StatusOr<Client::Reply> show = good->Call("session_show", {{"id", id}});
  ASSERT_TRUE(show.ok()) << show.status();
  EXPECT_EQ(Str(show->result.at("state")), "running");
  json::value snap = PfmctlJson(socket(), {"snapshot", std::to_string(id)});
  EXPECT_GT(snap.at("records").as_array().size(), 0u);
  json::object st = Status();
  EXPECT_EQ(Num(st.at("sessions")), 1u) << "refusals created nothing: " << st;
  ::close(cut);
}

TEST_F(LifecycleE2e, TracedTaskThatExitsLeavesItsRecordsReadable) {
  json::value c = PfmctlJson(socket(), {"session", "create", "--pid", "1003",
                                        "--bts", "lossless"});
  const std::string id = std::to_string(Num(c.at("id")));
  ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "5000000"}).exit_code, 0);
  testing::Result r = Pfmctl(socket(), {"sim", "exit", "1003"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json::value show = PfmctlJson(socket(), {"session", "show", id});
  EXPECT_EQ(Str(show.at("state")), "exited") << show;
  json::value snap = PfmctlJson(socket(), {"snapshot", id});
  size_t branches = 0, exits = 0;
  for (const json::value& rec : snap.at("records").as_array()) {
    branches += Str(rec.at("type")) == "branch";
    exits += Str(rec.at("type")) == "exit";
  }
  EXPECT_GT(branches, 0u) << snap;
  EXPECT_EQ(exits, 1u) << "the stream ends with the task's exit";
  EXPECT_EQ(Str(snap.at("records").as_array().back().at("type")), "exit");
  // Later runs add nothing: the task is gone.
  ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "5000000"}).exit_code, 0);
  json::value again = PfmctlJson(socket(), {"snapshot", id});
  EXPECT_EQ(again.at("records").as_array().size(), snap.at("records").as_array().size());
}

// The example programs (C++ and C API) trace a task and end their sessions.
TEST_F(LifecycleE2e, ExampleProgramsTraceASimTaskAndLeaveNothingBehind) {
  for (const char* example : {"libpfm-bts/trace_sim_task", "libpfm-bts/trace_sim_task_c"}) {
    testing::Result r = testing::Run({testing::Runfile(example), "--socket", socket(),
                                      "--pid", "1001", "--ns", "3000000"});
    ASSERT_EQ(r.exit_code, 0) << example << ": " << r.err;
    EXPECT_NE(r.out.find("pid 1001: "), std::string::npos) << r.out;
    // "  branch N" with N > 0.
    const size_t at = r.out.find("  branch ");
    ASSERT_NE(at, std::string::npos) << r.out;
    EXPECT_GT(std::stoull(r.out.substr(at + 9)), 0u) << r.out;
    EXPECT_NE(r.out.find(", 0 lost"), std::string::npos) << r.out;
    EXPECT_EQ(Num(Status().at("sessions")), 0u) << example;
  }
  // A refusal reaches a C program as code + message.
  testing::Result r = testing::Run({testing::Runfile("libpfm-bts/trace_sim_task_c"),
                                    "--socket", socket(), "--pid", "4242"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("session_create: NOT_FOUND: no simulated task 4242"),
            std::string::npos)
      << r.err;
}

// systemd socket activation: pfmd serves a listening socket passed as fd 3
// (LISTEN_PID/LISTEN_FDS) and leaves the socket file to its owner.
TEST_F(LifecycleE2e, PfmdServesAnInheritedListeningSocket) {
  const std::string dir = testing::MakeSocketDir();
  const std::string path = dir + "/activated.sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  const std::string pfmd = testing::PfmdPath();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::dup2(fd, 3) != 3) ::_exit(126);
    ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
    ::setenv("LISTEN_FDS", "1", 1);
    // --socket names a path nobody listens on: the inherited fd wins.
    ::execl(pfmd.c_str(), pfmd.c_str(), "--driver", "sim", "--socket",
            (dir + "/unused.sock").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fd);
  // The kernel queues the connection even before pfmd accepts it.
  json::value st = PfmctlJson(path, {"status"});
  EXPECT_EQ(Str(st.at("driver")), "sim");
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(::access(path.c_str(), F_OK), 0) << "the socket file is systemd's to remove";
  EXPECT_NE(::access((dir + "/unused.sock").c_str(), F_OK), 0);
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace pfm
