// End to end, issue 6: authorization. The real pfmd (--driver host, run as
// root here) and a client that drops to uid 65534 after fork: it may trace
// only what it could ptrace, sees and controls only its own sessions, and
// needs privilege for kernel-mode and CPU-wide sessions.
//
// The unprivileged side runs in a forked child that calls setgid/setuid and
// then talks to pfmd with the C++ Client (no exec: the runfiles tree is not
// readable by uid 65534). The child reports what it saw as one JSON line;
// the assertions are all in the parent.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "pfm/client.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::AsUid;
using testing::Daemon;
using testing::kNobody;
using testing::Num;
using testing::PfmctlJson;
using testing::Str;

// A reply as plain JSON, so a child can send it to the parent:
// {"ok": true, "result": ...} or {"ok": false, "code": "...", "message": "..."}.
json::object CallJson(Client& c, const std::string& op, json::object args = {}) {
  absl::StatusOr<Client::Reply> r = c.Call(op, std::move(args));
  if (!r.ok())
    return {{"ok", false},
            {"code", StatusCodeName(r.status().code())},
            {"message", std::string(r.status().message())}};
  return {{"ok", true}, {"result", r->result}};
}


// A child of the calling process that spins until killed.
pid_t SpawnSpinner() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (;;) {
      for (volatile int i = 0; i < 1000000; ++i) {}
      ::usleep(1000);
    }
  }
  return pid;
}

void KillAndReap(pid_t pid) {
  if (pid <= 0) return;  // a failed fork: never kill(-1)
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

json::object CounterSpec(int pid, const std::string& event) {
  return {{"pid", pid}, {"counters", json::array{json::value(event)}},
          {"detached", false}};
}

class SecurityE2e : public testing::DaemonTest {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: the test drops to uid 65534";
    ASSERT_NO_FATAL_FAILURE(StartDaemon({"--driver", "host"}));
    ASSERT_TRUE(d_->OpenToOtherUids());
  }
  void TearDown() override {
    for (pid_t p : spinners_) KillAndReap(p);
  }
  pid_t RootSpinner() {
    spinners_.push_back(SpawnSpinner());
    return spinners_.back();
  }
  // The session count once the daemon has seen departed clients hang up
  // (bounded: 200 polls).
  uint64_t Sessions() {
    uint64_t n = 0;
    for (int i = 0; i < 200; ++i) {
      n = Num(PfmctlJson(socket(), {"status"}).at("sessions"));
      if (n == 0) break;
      ::usleep(10000);
    }
    return n;
  }
  std::vector<pid_t> spinners_;
};

TEST_F(SecurityE2e, OtherUidIsRefusedTracingARootOwnedProcess) {
  const pid_t target = RootSpinner();
  const std::string socket = d_->socket();
  json::object got = AsUid(kNobody, [&]() -> json::object {
    absl::StatusOr<Client> c = Client::Connect(socket);
    if (!c.ok()) return {{"connect", std::string(c.status().message())}};
    json::object ping = CallJson(*c, "ping");
    json::object counters = CallJson(*c, "session_create",
                                     {{"spec", CounterSpec(target, "task-clock")}});
    json::object bts = CallJson(
        *c, "session_create",
        {{"spec", json::object{{"pid", target}, {"bts", "lossless"}, {"detached", false}}}});
    return {{"ping", ping}, {"counters", counters}, {"bts", bts}};
  });
  ASSERT_FALSE(got.contains("child_failed")) << got;
  ASSERT_FALSE(got.contains("connect")) << got;
  // The daemon saw the dropped uid, not root.
  EXPECT_EQ(Num(got.at("ping").at("result").at("peer_uid")), kNobody);
  for (const char* what : {"counters", "bts"}) {
    const json::object& r = got.at(what).as_object();
    EXPECT_FALSE(r.at("ok").as_bool()) << what << ": " << r;
    EXPECT_EQ(Str(r.at("code")), "PERMISSION_DENIED") << what << ": " << r;
    const std::string msg(r.at("message").as_string());
    EXPECT_NE(msg.find("uid 65534 may not trace pid " + std::to_string(target)),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(Sessions(), 0u) << "a refusal leaves nothing behind";
}

TEST_F(SecurityE2e, OtherUidCannotSeeOrKillRootsSessions) {
  const pid_t target = RootSpinner();
  json::value created = PfmctlJson(
      socket(), {"session", "create", "--pid", std::to_string(target),
                 "--counter", "task-clock"});
  const uint64_t id = Num(created.at("id"));
  const std::string socket = d_->socket();
  json::object got = AsUid(kNobody, [&]() -> json::object {
    absl::StatusOr<Client> c = Client::Connect(socket);
    if (!c.ok()) return {{"connect", std::string(c.status().message())}};
    json::object args{{"id", id}};
    return {{"list", CallJson(*c, "session_list")},
            {"show", CallJson(*c, "session_show", args)},
            {"maps", CallJson(*c, "session_maps", args)},
            {"ring", CallJson(*c, "session_ring", args)},
            {"kill", CallJson(*c, "session_kill", args)},
            {"resources", CallJson(*c, "resources")}};
  });
  ASSERT_FALSE(got.contains("child_failed")) << got;
  ASSERT_TRUE(got.at("list").at("ok").as_bool()) << got;
  EXPECT_TRUE(got.at("list").at("result").as_array().empty()) << got.at("list");
  for (const char* op : {"show", "maps", "ring", "kill"}) {
    const json::object& r = got.at(op).as_object();
    EXPECT_EQ(Str(r.at("code")), "NOT_FOUND") << op << ": " << r;
    EXPECT_EQ(Str(r.at("message")), "no session " + std::to_string(id)) << op;
  }
  // Hardware holders of other uids are anonymous.
  EXPECT_EQ(json::serialize(got.at("resources")).find("task-clock"), std::string::npos)
      << got.at("resources");
  // Root's session survived the attempt.
  json::value list = PfmctlJson(d_->socket(), {"session", "list"});
  ASSERT_EQ(list.as_array().size(), 1u) << list;
  EXPECT_EQ(Num(list.as_array()[0].at("id")), id);
  EXPECT_EQ(Num(list.as_array()[0].at("uid")), 0u);
}

TEST_F(SecurityE2e, OtherUidTracesItsOwnChildWithTaskClock) {
  const std::string socket = d_->socket();
  json::object got = AsUid(kNobody, [&]() -> json::object {
    const pid_t child = SpawnSpinner();  // forked after dropping privileges
    json::object out;
    absl::StatusOr<Client> c = Client::Connect(socket);
    if (!c.ok()) {
      KillAndReap(child);
      return {{"connect", std::string(c.status().message())}};
    }
    out["create"] = CallJson(*c, "session_create",
                             {{"spec", CounterSpec(child, "task-clock")}});
    if (out["create"].at("ok").as_bool()) {
      const uint64_t id = Num(out["create"].at("result").at("id"));
      // Until the child has run a little (bounded: 500 polls).
      for (int i = 0; i < 500; ++i) {
        out["show"] = CallJson(*c, "session_show", {{"id", id}});
        const json::object& s = out["show"].as_object();
        if (!s.at("ok").as_bool()) break;
        const json::array& cs = s.at("result").at("counters").as_array();
        if (!cs.empty() && cs[0].as_object().contains("value") &&
            Num(cs[0].at("value")) > 0)
          break;
        ::usleep(10000);
      }
      out["list"] = CallJson(*c, "session_list");
      out["kill"] = CallJson(*c, "session_kill", {{"id", id}});
    }
    KillAndReap(child);
    return out;
  });
  ASSERT_FALSE(got.contains("child_failed")) << got;
  ASSERT_TRUE(got.at("create").at("ok").as_bool()) << got;
  const json::object& show = got.at("show").at("result").as_object();
  EXPECT_EQ(Num(show.at("uid")), kNobody);
  const json::array& counters = show.at("counters").as_array();
  ASSERT_EQ(counters.size(), 1u) << show;
  EXPECT_EQ(Str(counters[0].at("event")), "task-clock");
  EXPECT_GT(Num(counters[0].at("value")), 0u) << show;
  // Its own session is visible to it and it may end it.
  ASSERT_EQ(got.at("list").at("result").as_array().size(), 1u) << got.at("list");
  EXPECT_TRUE(got.at("kill").at("ok").as_bool()) << got.at("kill");
  EXPECT_EQ(Sessions(), 0u);
}

TEST_F(SecurityE2e, KernelModeAndCpuWideNeedPrivilege) {
  const std::string socket = d_->socket();
  auto attempt = [&](bool drop) {
    auto fn = [&]() -> json::object {
      const pid_t child = SpawnSpinner();
      absl::StatusOr<Client> c = Client::Connect(socket);
      if (!c.ok()) {
        KillAndReap(child);
        return {{"connect", std::string(c.status().message())}};
      }
      json::object kernel_spec = CounterSpec(child, "task-clock");
      kernel_spec["filter"] = "kernel";
      json::object cpu_spec{{"cpu", 0},
                            {"counters", json::array{json::value("task-clock")}},
                            {"detached", false}};
      json::object out{{"kernel", CallJson(*c, "session_create", {{"spec", kernel_spec}})},
                       {"cpu", CallJson(*c, "session_create", {{"spec", cpu_spec}})}};
      KillAndReap(child);
      return out;
    };
    return AsUid(drop ? kNobody : 0, fn);
  };
  json::object nobody = attempt(true);
  ASSERT_FALSE(nobody.contains("child_failed")) << nobody;
  for (const char* what : {"kernel", "cpu"}) {
    const json::object& r = nobody.at(what).as_object();
    EXPECT_EQ(Str(r.at("code")), "PERMISSION_DENIED") << what << ": " << r;
    EXPECT_NE(std::string(r.at("message").as_string())
                  .find("needs a privileged client (uid 0 or a member of pfmd's "
                        "--admin-group); uid 65534 is neither"),
              std::string::npos)
        << r;
  }
  // The same requests from root are admitted: the refusal is about the uid.
  json::object root = attempt(false);
  ASSERT_FALSE(root.contains("child_failed")) << root;
  EXPECT_TRUE(root.at("kernel").at("ok").as_bool()) << root;
  EXPECT_TRUE(root.at("cpu").at("ok").as_bool()) << root;
  // Both children's connections are gone: their sessions with them.
  EXPECT_EQ(Sessions(), 0u);
}

// The simulated machine is the daemon owner's: another uid may not pause,
// run or end its tasks, and nobody may hold the daemon with one huge run.
TEST(SimOwnership, SimCommandIsForTheOwnerAndBoundedInTime) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the test drops to uid 65534";
  Daemon d({"--driver", "sim", "--sim-tasks", "2", "--sim-paused"});
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(d.OpenToOtherUids());
  const std::string socket = d.socket();
  json::object got = AsUid(kNobody, [&]() -> json::object {
    absl::StatusOr<Client> c = Client::Connect(socket);
    if (!c.ok()) return {{"connect", std::string(c.status().message())}};
    return {{"run", CallJson(*c, "sim", {{"action", "run"}, {"ns", 1000}})},
            {"exit", CallJson(*c, "sim", {{"action", "exit"}, {"pid", 1000}})},
            {"resume", CallJson(*c, "sim", {{"action", "resume"}})}};
  });
  ASSERT_FALSE(got.contains("child_failed")) << got;
  for (const char* op : {"run", "exit", "resume"}) {
    EXPECT_EQ(Str(got.at(op).at("code")), "PERMISSION_DENIED") << op << ": " << got;
  }
  // The owner may, within the bound; 3600 s of virtual time is refused
  // (it held the daemon for 5 minutes), nothing ran.
  testing::Result big = testing::Pfmctl(socket, {"sim", "run", "3600000000000"});
  EXPECT_NE(big.exit_code, 0);
  EXPECT_NE(big.err.find("INVALID_ARGUMENT"), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("10000000000"), std::string::npos) << big.err;
  json::value ran = PfmctlJson(socket, {"sim", "run", "1000000"});
  EXPECT_EQ(Num(ran.at("now")), 1000000u) << ran;
}

}  // namespace
}  // namespace pfm
