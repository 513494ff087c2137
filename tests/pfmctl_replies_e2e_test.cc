// End to end: pfmctl against a fake pfmd that answers with malformed replies.
//
// pfmd is another process, so pfmctl treats its replies as input: for every
// command that reads a reply, a truncated frame, a body that is not an
// object, a result that is missing, null or of the wrong shape, and a wrong
// type (or a missing value, where one is required) for every field the
// command reads must end pfmctl with exit status 1 and exactly one stderr
// line "pfmctl: <CODE>: ...", never a signal, and nothing on stdout. The
// fake speaks the real wire format (pfm/wire.h) on a Unix socket this
// process owns, so Client::Connect's server-uid check passes.
//
// Longer than 600 lines on purpose: the fake daemon, the runner and the
// per-command tables of fields are used only here and only together.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernel/ds/ring.h"
#include "pfm/trace_file.h"
#include "pfm/wire.h"
#include "tests/testing/harness.h"

namespace pfm {
namespace {

namespace json = boost::json;

// ---- the fake pfmd ----

// One scripted answer to a request.
struct FakeReply {
  enum Kind {
    kFrame,      // `body` as a frame, with `fds`
    kTruncated,  // a length prefix promising more than follows, then close
    kClose,      // close the connection without answering
  };
  Kind kind = kFrame;
  std::string body;
  std::vector<int> fds;  // borrowed: they outlive the fake
};

FakeReply Ok(const json::value& result, std::vector<int> fds = {}) {
  return {FakeReply::kFrame,
          json::serialize(json::object{{"ok", true}, {"result", result}}), fds};
}

// Serves connections one at a time on a socket in a fresh /tmp directory,
// answering each request by its "op": the scripted reply if there is one,
// else the well-formed default.
class FakePfmd {
 public:
  FakePfmd() {
    dir_ = testing::MakeSocketDir();
    socket_ = dir_ + "/pfmd.sock";
    listen_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_.c_str(), sizeof(addr.sun_path) - 1);
    ok_ = listen_ >= 0 &&
          ::bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
          ::listen(listen_, 8) == 0;
    if (ok_) thread_ = std::thread([this] { Serve(); });
  }
  ~FakePfmd() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (listen_ >= 0) ::close(listen_);
    ::unlink(socket_.c_str());
    ::rmdir(dir_.c_str());
  }
  FakePfmd(const FakePfmd&) = delete;
  FakePfmd& operator=(const FakePfmd&) = delete;

  bool ok() const { return ok_; }
  const std::string& socket() const { return socket_; }

  void SetDefaults(std::map<std::string, FakeReply> defaults) {
    std::lock_guard<std::mutex> l(mu_);
    defaults_ = std::move(defaults);
  }
  // The replies that differ from the defaults, until the next Script.
  void Script(std::map<std::string, FakeReply> replies) {
    std::lock_guard<std::mutex> l(mu_);
    script_ = std::move(replies);
    queues_.clear();
    seen_.clear();
    requests_.clear();
  }
  // After Script: the replies to the next requests of `op`, one each, in
  // order; the last is repeated.
  void Queue(const std::string& op, std::vector<FakeReply> replies) {
    std::lock_guard<std::mutex> l(mu_);
    queues_[op] = std::deque<FakeReply>(replies.begin(), replies.end());
  }
  // The requests of `op` since the last Script, as they came.
  std::vector<json::value> Requests(const std::string& op) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<json::value> out;
    for (const auto& [o, v] : requests_)
      if (o == op) out.push_back(v);
    return out;
  }
  // The ops asked since the last Script, in order.
  std::vector<std::string> Seen() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int conn = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      while (!stop_) {
        absl::StatusOr<Frame> req = RecvFrame(conn, 5000);
        if (!req.ok()) break;  // pfmctl is done (or gave up)
        if (!Answer(conn, req->body)) break;
      }
      ::close(conn);
    }
  }

  // False when the connection is to be closed.
  bool Answer(int conn, const std::string& request) {
    boost::system::error_code ec;
    const json::value v = json::parse(request, ec);
    std::string op = "?";
    if (!ec && v.is_object())
      if (const json::value* o = v.as_object().if_contains("op"); o && o->is_string())
        op = std::string(o->as_string());
    FakeReply reply;
    {
      std::lock_guard<std::mutex> l(mu_);
      seen_.push_back(op);
      requests_.emplace_back(op, ec ? json::value() : v);
      auto it = script_.find(op);
      if (auto q = queues_.find(op); q != queues_.end() && !q->second.empty()) {
        reply = q->second.front();
        if (q->second.size() > 1) q->second.pop_front();
      } else if (it != script_.end()) {
        reply = it->second;
      } else if (auto d = defaults_.find(op); d != defaults_.end()) {
        reply = d->second;
      } else {
        reply.body = R"({"ok":false,"code":"INVALID_ARGUMENT","message":"fake: unknown op"})";
      }
    }
    switch (reply.kind) {
      case FakeReply::kClose:
        return false;
      case FakeReply::kTruncated: {
        const std::string frame = EncodeFrame(std::string(100, 'x')).substr(0, 14);
        (void)!::write(conn, frame.data(), frame.size());
        return false;
      }
      case FakeReply::kFrame:
        return SendFrame(conn, reply.body, reply.fds).ok();
    }
    return false;
  }

  std::string dir_, socket_;
  int listen_ = -1;
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, FakeReply> defaults_, script_;
  std::map<std::string, std::deque<FakeReply>> queues_;
  std::vector<std::string> seen_;
  std::vector<std::pair<std::string, json::value>> requests_;
};

// ---- running pfmctl ----

// Runs pfmctl to completion. Not testing::Run: its watchdog thread wakes
// every 100 ms, which would dominate a thousand runs of a few ms each.
testing::Result RunPfmctl(const std::string& socket, const std::vector<std::string>& args) {
  testing::Result res;
  std::vector<std::string> argv = {testing::PfmctlPath(), "--socket", socket};
  argv.insert(argv.end(), args.begin(), args.end());
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return res;
  const pid_t pid = ::fork();
  if (pid < 0) return res;  // never kill(-1) below
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::dup2(devnull, 0);
    std::vector<char*> cargs;
    for (const std::string& a : argv) cargs.push_back(const_cast<char*>(a.c_str()));
    cargs.push_back(nullptr);
    ::execv(cargs[0], cargs.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* dst[2] = {&res.out, &res.err};
  int open_fds = 2;
  bool killed = false;
  while (open_fds > 0) {
    if (!killed && std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      killed = true;
    }
    if (::poll(p, 2, 100) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || p[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(p[i].fd, buf, sizeof(buf));
      if (n > 0) {
        dst[i]->append(buf, n);
      } else if (n == 0 || errno != EINTR) {
        ::close(p[i].fd);
        p[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return res;
}

// ---- well-formed replies ----

json::value Parse(const char* text) { return json::parse(text); }

const char kStatus[] = R"({"driver": "host",
  "machine": {"cpus": 2, "pmu": "none", "pmu_desc": "fake", "gp_counters": 0,
              "fixed_counters": 0, "debug_registers": 4, "bts": false, "pebs": false,
              "lbr": false, "soft_bts": true, "software_events": true, "source": "fake"},
  "sessions": 1,
  "memory": {"limit_per_uid": 67108864, "charged": [{"uid": 0, "bytes": 4096}]}})";

const char kHolder[] = R"({"slot": "dr0", "what": "0x401000:1:x", "session": 1,
  "mode": "pinned", "state": "on hw", "ratio": 1.0})";

const char kSession[] = R"({"id": 1, "uid": 0, "role": "profiler", "target": "pid 42",
  "bts": "lossless", "buffer_bytes": 65536, "charged_bytes": 69632, "records": 10,
  "lost": 0})";

const char kCounter[] = R"({"event": "task-clock", "value": 100, "time_enabled": 200,
  "time_running": 100, "scaled": 200, "ratio": 0.5, "counted": true})";

const char kBreakpoint[] = R"({"spec": "0x401000:1:x", "state": "armed", "ratio": 1.0})";

json::value Resources() {
  json::value holder = Parse(kHolder);
  return json::object{
      {"cpus", json::array{json::object{{"cpu", 0}, {"running_pid", 42},
                                        {"holders", json::array{holder}}}}},
      {"tasks", json::array{json::object{{"pid", 42}, {"holders", json::array{holder}}}}}};
}

json::value SessionShow() {
  json::value s = Parse(kSession);
  s.as_object()["counters"] = json::array{Parse(kCounter)};
  s.as_object()["breakpoints"] = json::array{Parse(kBreakpoint)};
  s.as_object()["soft_bts"] = json::object{{"steps", 1234}};
  return s;
}

// One session_maps page: one whole list (seq 1, the newest), no next.
const char kMapping[] = R"({"start": 4194304, "end": 4198400, "offset": 0,
  "path": "/bin/prog", "writable": false, "shared": false})";

json::value MapsList(uint64_t seq, int pid, uint64_t total, uint64_t first, size_t n) {
  json::array mappings;
  for (size_t i = 0; i < n; ++i) {
    json::value m = Parse(kMapping);
    m.as_object()["start"] = 4194304 + 8192 * (first + i);
    m.as_object()["end"] = 4198400 + 8192 * (first + i);
    mappings.push_back(std::move(m));
  }
  return json::object{{"seq", seq},     {"pid", pid},     {"time_ns", 1000 + seq},
                      {"total", total}, {"first", first}, {"cut", false},
                      {"mappings", std::move(mappings)}};
}

json::value MapsPage() {
  return json::object{{"lists", json::array{MapsList(1, 42, 1, 0, 1)}}, {"newest", 1}};
}

// ---- malformations ----

// What a field read by a command must be (pfmctl/reply.h's JsonKind).
enum class Kind { kObject, kArray, kString, kBool, kNumber, kInteger, kUint, kId };

// Values of the wrong type (or range) for a field of `kind`.
std::vector<std::string> WrongValues(Kind kind) {
  switch (kind) {
    case Kind::kObject: return {R"("x")", "5", "[]", "true"};
    case Kind::kArray: return {R"("x")", "5", "{}", "true"};
    case Kind::kString: return {"5", "{}", "[]", "true"};
    case Kind::kBool: return {R"("x")", "5", "{}", "[]"};
    case Kind::kNumber: return {R"("x")", "{}", "[]", "true"};
    case Kind::kInteger: return {R"("x")", "1.5", "{}", "[]", "true"};
    case Kind::kUint: return {R"("x")", "-1", "1.5", "{}", "[]", "true"};
    case Kind::kId: return {R"("x")", "0", "-1", "1.5", "{}", "true"};
  }
  return {};
}

// A field a command reads: where it is in the result (a JSON pointer), what
// it must be, and whether it must be there (else absent or null is shown
// as "-" / "null" / "not counted").
struct Field {
  std::string pointer;
  Kind kind;
  bool required = false;
};

// The value at `pointer` in `root`, and its parent and key for erasing;
// null if there is none.
json::value* At(json::value& root, const std::string& pointer, json::object** parent,
                std::string* key) {
  json::value* v = &root;
  for (absl::string_view tok : absl::StrSplit(pointer.substr(1), '/')) {
    *parent = nullptr;
    if (v->is_object()) {
      *parent = &v->as_object();
      *key = std::string(tok);
      v = v->as_object().if_contains(*key);
    } else if (size_t i; v->is_array() && absl::SimpleAtoi(tok, &i) &&
                         i < v->as_array().size()) {
      v = &v->as_array()[i];
    } else {
      return nullptr;
    }
    if (v == nullptr) return nullptr;
  }
  return v;
}

// A named malformed version of a good result.
struct Mutation {
  std::string name;
  json::value result;
};

std::vector<Mutation> Mutations(const json::value& good, const std::vector<Field>& fields) {
  std::vector<Mutation> out;
  for (const Field& f : fields) {
    std::vector<std::string> values = WrongValues(f.kind);
    if (f.required) values.push_back("null");
    for (const std::string& w : values) {
      json::value r = good;
      json::object* parent = nullptr;
      std::string key;
      json::value* v = At(r, f.pointer, &parent, &key);
      EXPECT_NE(v, nullptr) << "no " << f.pointer << " in " << json::serialize(good);
      if (v == nullptr) continue;
      *v = json::parse(w);
      out.push_back({absl::StrCat(f.pointer, " = ", w), std::move(r)});
    }
    if (f.required) {
      json::value r = good;
      json::object* parent = nullptr;
      std::string key;
      if (At(r, f.pointer, &parent, &key) != nullptr && parent != nullptr) {
        parent->erase(key);
        out.push_back({absl::StrCat(f.pointer, " removed"), std::move(r)});
      }
    }
  }
  return out;
}

// ---- the test fixture ----

class PfmctlRepliesE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.ok()) << "cannot listen on " << fake_.socket();
    // The fake answers pfmctls that may be gone already.
    ::signal(SIGPIPE, SIG_IGN);
    // A lossless ring with a few records, already ended: `stream` and
    // `record` copy it and stop at once.
    RingConfig rc;
    rc.data_bytes = 64 << 10;
    rc.mode = PFM_RING_LOSSLESS;
    ErrorDetail d;
    ASSERT_EQ(Ring::Create(rc, "fake-ring", &ring_, &d), 0) << d.message;
    for (int i = 0; i < 5; ++i) {
      pfm_record r{};
      r.type = PFM_REC_BRANCH;
      r.pid = r.tid = 42;
      r.time = 100 + i;
      r.u.branch.from = 0x401000 + i;
      r.u.branch.to = 0x402000 + i;
      ring_->Write(r);
    }
    ring_->End();
    not_a_ring_ = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    ASSERT_GE(not_a_ring_, 0);
    dir_ = testing::MakeTempDir("replies");
    fake_.SetDefaults({
        {"status", Ok(Parse(kStatus))},
        {"resources", Ok(Resources())},
        {"session_create", Ok(json::object{{"id", 1}})},
        {"session_list", Ok(json::array{Parse(kSession)})},
        {"session_show", Ok(SessionShow())},
        {"session_maps", Ok(MapsPage())},
        {"session_kill", Ok(json::object{{"id", 1}, {"killed", true}})},
        {"session_ring", Ok(RingInfo(), {ring_->fd()})},
        {"sim", Ok(json::object{{"now", 1}})},
        {"shutdown", Ok(json::object{{"stopping", true}})},
    });
  }
  void TearDown() override {
    if (not_a_ring_ >= 0) ::close(not_a_ring_);
  }

  static json::value RingInfo() {
    return json::object{{"id", 1}, {"mode", "lossless"}, {"format", "fixed"},
                        {"target", "pid 42"}, {"mapped_bytes", 69632}};
  }

  std::string File(const std::string& name) { return dir_ + "/" + name; }

  // Runs `args` with `replies` scripted, in text and/or --json form, and
  // expects the one-line failure: exit 1, no signal, stdout empty, stderr
  // one line starting with `prefix`.
  void ExpectFails(const std::vector<std::string>& args,
                   const std::map<std::string, FakeReply>& replies,
                   const std::string& prefix, const std::string& what,
                   std::vector<bool> json_modes = {false, true}) {
    for (bool json_mode : json_modes) {
      std::vector<std::string> a = args;
      if (json_mode) a.insert(a.begin(), "--json");
      fake_.Script(replies);
      const testing::Result r = RunPfmctl(fake_.socket(), a);
      const std::string ctx = absl::StrCat("pfmctl ", absl::StrJoin(a, " "), " with ",
                                           what, "\nstderr: ", r.err, "stdout: ", r.out);
      EXPECT_LT(r.exit_code, 128) << ctx;  // not a signal
      EXPECT_EQ(r.exit_code, 1) << ctx;
      EXPECT_EQ(r.err.rfind(prefix, 0), 0u) << "expected " << prefix << "\n" << ctx;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << ctx;
      EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n') << ctx;
      EXPECT_EQ(r.out, "") << ctx;
    }
  }

  // Every generic malformation of `op`'s reply: transport faults, bodies
  // that are not a reply, results missing or of the wrong shape.
  void ExpectGenericFailures(const std::vector<std::string>& args, const std::string& op,
                             const std::vector<json::value>& wrong_results) {
    const std::string internal = absl::StrCat("pfmctl: INTERNAL: pfmd reply: ", op, ": ");
    const std::map<std::string, std::pair<FakeReply, std::string>> cases = {
        {"a truncated frame", {{FakeReply::kTruncated, "", {}}, "pfmctl: DATA_LOSS: "}},
        {"a hang-up", {{FakeReply::kClose, "", {}}, "pfmctl: UNAVAILABLE: "}},
        {"a body that is not JSON",
         {{FakeReply::kFrame, "{\"ok\":tr", {}}, internal + "not a JSON object"}},
        {"an array body", {{FakeReply::kFrame, "[1,2]", {}}, internal + "not a JSON object"}},
        {"a string body", {{FakeReply::kFrame, "\"ok\"", {}}, internal + "not a JSON object"}},
        {"a non-bool ok",
         {{FakeReply::kFrame, R"({"ok":"yes"})", {}}, internal + "no boolean \"ok\""}},
        {"no ok", {{FakeReply::kFrame, R"({"result":{}})", {}}, internal + "no boolean \"ok\""}},
        {"an error without a code",
         {{FakeReply::kFrame, R"({"ok":false,"message":"m"})", {}},
          internal + "an error reply without a \"code\" string"}},
        {"an error with a numeric code",
         {{FakeReply::kFrame, R"({"ok":false,"code":5,"message":"m"})", {}},
          internal + "an error reply without a \"code\" string"}},
        // absl aborts on an error Status made with code OK: a signal here
        // is the bug this case is for.
        {"an error with code OK",
         {{FakeReply::kFrame, R"({"ok":false,"code":"OK","message":"m"})", {}},
          internal + "an error reply with code \"OK\", which is not an error code"}},
        {"an error with an unknown code",
         {{FakeReply::kFrame, R"({"ok":false,"code":"BOGUS\n","message":"m"})", {}},
          internal + "an error reply with code \"BOGUS\\n\", which is not an error code"}},
        {"an error without a message",
         {{FakeReply::kFrame, R"({"ok":false,"code":"NOT_FOUND"})", {}},
          internal + "an error reply (NOT_FOUND) without a \"message\" string"}},
        {"an error message with line breaks",
         {{FakeReply::kFrame, R"({"ok":false,"code":"NOT_FOUND","message":"a\nb\r\nc"})", {}},
          "pfmctl: NOT_FOUND: a b  c"}},
        {"{\"ok\":true}",
         {{FakeReply::kFrame, R"({"ok":true})", {}}, internal + "result is missing or null"}},
        {"a null result",
         {{FakeReply::kFrame, R"({"ok":true,"result":null})", {}},
          internal + "result is missing or null"}},
    };
    for (const auto& [what, c] : cases) ExpectFails(args, {{op, c.first}}, c.second, what);
    for (const json::value& r : wrong_results)
      ExpectFails(args, {{op, Ok(r)}}, internal + "result",
                  absl::StrCat("result ", json::serialize(r)));
  }

  // Every field malformation of `op`'s good result.
  void ExpectFieldFailures(const std::vector<std::string>& args, const std::string& op,
                           const json::value& good, const std::vector<Field>& fields) {
    const std::string internal = absl::StrCat("pfmctl: INTERNAL: pfmd reply: ", op, ": ");
    // Each field has four or more wrong values: alternating the form covers
    // both forms for every field in half the runs.
    bool json_mode = false;
    for (const Mutation& m : Mutations(good, fields)) {
      ExpectFails(args, {{op, Ok(m.result)}}, internal, m.name, {json_mode});
      json_mode = !json_mode;
    }
  }

  // The well-formed run: exit 0 and the ops asked in order.
  void ExpectWorks(const std::vector<std::string>& args,
                   const std::vector<std::string>& ops) {
    for (bool json_mode : {false, true}) {
      std::vector<std::string> a = args;
      if (json_mode) a.insert(a.begin(), "--json");
      fake_.Script({});
      const testing::Result r = RunPfmctl(fake_.socket(), a);
      EXPECT_EQ(r.exit_code, 0) << absl::StrJoin(a, " ") << ": " << r.err;
      EXPECT_EQ(fake_.Seen(), ops) << absl::StrJoin(a, " ");
      if (json_mode && ops != std::vector<std::string>{"shutdown"}) {
        boost::system::error_code ec;
        json::parse(r.out, ec);
        EXPECT_FALSE(ec) << absl::StrJoin(a, " ") << " printed " << r.out;
      }
    }
  }

  // session_ring: a result that is not an object, and the one fd that must
  // come with it.
  void ExpectRingFailures(const std::vector<std::string>& args) {
    const std::string internal = "pfmctl: INTERNAL: pfmd reply: session_ring: ";
    const json::value info = json::object{{"id", 1}, {"mode", "lossless"}};
    ExpectFails(args, {{"session_ring", Ok(info)}},
                internal + "it passed 0 file descriptors", "no fd");
    ExpectFails(args, {{"session_ring", Ok(info, {ring_->fd(), ring_->fd()})}},
                internal + "it passed 2 file descriptors", "two fds");
    ExpectFails(args, {{"session_ring", Ok(info, {not_a_ring_})}},
                internal + "the ring it passed: ", "/dev/null as the ring");
    for (const json::value& r : NotObjects())
      ExpectFails(args, {{"session_ring", Ok(r, {ring_->fd()})}}, internal + "result is ",
                  absl::StrCat("result ", json::serialize(r), " with the ring"));
  }

  static std::vector<json::value> NotObjects() {
    return {json::array{}, json::value("x"), json::value(5), json::value(true)};
  }
  static std::vector<json::value> NotObjectsOrNull() {
    std::vector<json::value> v = NotObjects();
    v.push_back(nullptr);
    return v;
  }

  FakePfmd fake_;
  std::unique_ptr<Ring> ring_;
  int not_a_ring_ = -1;
  std::string dir_;
};

TEST_F(PfmctlRepliesE2e, WellFormedRepliesWork) {
  ExpectWorks({"status"}, {"status"});
  ExpectWorks({"resources"}, {"resources"});
  ExpectWorks({"session", "create", "--pid", "42", "--bts", "lossless"}, {"session_create"});
  ExpectWorks({"session", "list"}, {"session_list"});
  ExpectWorks({"session", "show", "1"}, {"session_show"});
  ExpectWorks({"session", "kill", "1"}, {"session_kill"});
  ExpectWorks({"snapshot", "1"}, {"session_ring"});
  // session_show twice: the start (the pid and the current maps) first,
  // the summary (every list, then the current one) at the end.
  ExpectWorks({"stream", "1", "-o", File("ok.stream")},
              {"session_ring", "session_show", "session_maps", "session_show", "session_maps",
               "session_maps"});
  ExpectWorks({"record", "-o", File("ok.record"), "--", "/bin/true"},
              {"status", "session_create", "session_ring", "session_show", "session_maps",
               "session_maps", "session_kill"});
  ExpectWorks({"sim", "pause"}, {"sim"});
  ExpectWorks({"shutdown"}, {"shutdown"});
  ExpectWorks({"stat", "--", "/bin/true"},
              {"status", "session_create", "session_show", "session_kill"});
}

TEST_F(PfmctlRepliesE2e, Status) {
  const std::vector<std::string> args = {"status"};
  ExpectGenericFailures(args, "status", NotObjects());
  ExpectFieldFailures(args, "status", Parse(kStatus),
                      {{"/driver", Kind::kString},
                       {"/machine", Kind::kObject, true},
                       {"/machine/cpus", Kind::kUint},
                       {"/machine/pmu", Kind::kString},
                       {"/machine/pmu_desc", Kind::kString},
                       {"/machine/gp_counters", Kind::kUint},
                       {"/machine/fixed_counters", Kind::kUint},
                       {"/machine/debug_registers", Kind::kUint},
                       {"/machine/bts", Kind::kBool},
                       {"/machine/pebs", Kind::kBool},
                       {"/machine/lbr", Kind::kBool},
                       {"/machine/soft_bts", Kind::kBool},
                       {"/machine/software_events", Kind::kBool},
                       {"/machine/source", Kind::kString},
                       {"/sessions", Kind::kUint},
                       {"/memory", Kind::kObject, true},
                       {"/memory/limit_per_uid", Kind::kUint, true},
                       {"/memory/charged", Kind::kArray, true},
                       {"/memory/charged/0", Kind::kObject, true},
                       {"/memory/charged/0/uid", Kind::kUint},
                       {"/memory/charged/0/bytes", Kind::kUint, true}});
}

std::vector<Field> HolderFields(const std::string& at) {
  return {{at, Kind::kObject, true},
          {at + "/slot", Kind::kString},
          {at + "/what", Kind::kString},
          {at + "/session", Kind::kUint},
          {at + "/mode", Kind::kString},
          {at + "/state", Kind::kString},
          {at + "/ratio", Kind::kNumber}};
}

TEST_F(PfmctlRepliesE2e, Resources) {
  const std::vector<std::string> args = {"resources"};
  ExpectGenericFailures(args, "resources", NotObjects());
  std::vector<Field> fields = {{"/cpus", Kind::kArray},
                               {"/cpus/0", Kind::kObject, true},
                               {"/cpus/0/cpu", Kind::kInteger},
                               {"/cpus/0/running_pid", Kind::kInteger},
                               {"/cpus/0/holders", Kind::kArray},
                               {"/tasks", Kind::kArray},
                               {"/tasks/0", Kind::kObject, true},
                               {"/tasks/0/pid", Kind::kInteger},
                               {"/tasks/0/holders", Kind::kArray}};
  for (const char* at : {"/cpus/0/holders/0", "/tasks/0/holders/0"})
    for (const Field& f : HolderFields(at)) fields.push_back(f);
  ExpectFieldFailures(args, "resources", Resources(), fields);
}

TEST_F(PfmctlRepliesE2e, SessionCreate) {
  const std::vector<std::string> args = {"session", "create", "--pid", "42", "--bts",
                                         "lossless"};
  ExpectGenericFailures(args, "session_create", NotObjects());
  ExpectFieldFailures(args, "session_create", json::object{{"id", 1}},
                      {{"/id", Kind::kId, true}});
}

std::vector<Field> SessionLineFields(const std::string& at, Kind id_kind, bool id_required) {
  return {{at + "/id", id_kind, id_required},
          {at + "/uid", Kind::kUint},
          {at + "/role", Kind::kString},
          {at + "/target", Kind::kString},
          {at + "/bts", Kind::kString},
          {at + "/buffer_bytes", Kind::kUint, true},
          {at + "/charged_bytes", Kind::kUint, true},
          {at + "/records", Kind::kUint},
          {at + "/lost", Kind::kUint}};
}

TEST_F(PfmctlRepliesE2e, SessionList) {
  const std::vector<std::string> args = {"session", "list"};
  ExpectGenericFailures(args, "session_list",
                        {json::object{}, json::value("x"), json::value(5)});
  std::vector<Field> fields = {{"/0", Kind::kObject, true}};
  for (const Field& f : SessionLineFields("/0", Kind::kId, true)) fields.push_back(f);
  ExpectFieldFailures(args, "session_list", json::array{Parse(kSession)}, fields);
  // The message names the op, the session's index and the field.
  json::array four;
  for (int i = 1; i <= 4; ++i) {
    json::value s = Parse(kSession);
    s.as_object()["id"] = i;
    four.push_back(s);
  }
  four[3].as_object()["id"] = "4";
  fake_.Script({{"session_list", Ok(four)}});
  const testing::Result r = RunPfmctl(fake_.socket(), args);
  EXPECT_EQ(r.err,
            "pfmctl: INTERNAL: pfmd reply: session_list: result[3].id is a string, "
            "expected a positive integer\n");
}

TEST_F(PfmctlRepliesE2e, SessionShow) {
  const std::vector<std::string> args = {"session", "show", "1"};
  ExpectGenericFailures(args, "session_show", NotObjects());
  std::vector<Field> fields = SessionLineFields("", Kind::kUint, false);
  for (const Field& f : std::vector<Field>{{"/counters", Kind::kArray},
                                           {"/counters/0", Kind::kObject, true},
                                           {"/counters/0/event", Kind::kString},
                                           {"/counters/0/value", Kind::kUint},
                                           {"/counters/0/time_enabled", Kind::kUint},
                                           {"/counters/0/time_running", Kind::kUint},
                                           {"/counters/0/scaled", Kind::kUint},
                                           {"/counters/0/ratio", Kind::kNumber},
                                           {"/breakpoints", Kind::kArray},
                                           {"/breakpoints/0", Kind::kObject, true},
                                           {"/breakpoints/0/spec", Kind::kString},
                                           {"/breakpoints/0/state", Kind::kString},
                                           {"/breakpoints/0/ratio", Kind::kNumber}})
    fields.push_back(f);
  ExpectFieldFailures(args, "session_show", SessionShow(), fields);
}

TEST_F(PfmctlRepliesE2e, SessionKillSimShutdown) {
  ExpectGenericFailures({"session", "kill", "1"}, "session_kill", NotObjects());
  ExpectGenericFailures({"sim", "pause"}, "sim", NotObjects());
  ExpectGenericFailures({"shutdown"}, "shutdown", NotObjects());
}

TEST_F(PfmctlRepliesE2e, SnapshotAndStreamRing) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"snapshot", "1"},
        std::vector<std::string>{"snapshot", "1", "-o", File("snap")},
        std::vector<std::string>{"stream", "1", "-o", File("stream")}}) {
    ExpectGenericFailures(args, "session_ring", {});
    ExpectRingFailures(args);
  }
}

std::vector<Field> SummaryFields() {
  return {{"/soft_bts", Kind::kObject}, {"/soft_bts/steps", Kind::kUint, true}};
}

TEST_F(PfmctlRepliesE2e, StreamSummary) {
  const std::vector<std::string> args = {"stream", "1", "-o", File("summary")};
  const std::string internal = "pfmctl: INTERNAL: pfmd reply: session_show: ";
  for (const json::value& r : NotObjectsOrNull())
    ExpectFails(args, {{"session_show", Ok(r)}}, internal + "result is ",
                absl::StrCat("result ", json::serialize(r)));
  ExpectFieldFailures(args, "session_show", SessionShow(), SummaryFields());
  // The trace is finished all the same: records and trailer, no summary.
  fake_.Script({{"session_show", Ok(json::array{})}});
  (void)RunPfmctl(fake_.socket(), args);
  testing::Result rep = RunPfmctl(fake_.socket(), {"--json", "report", File("summary")});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const json::value v = json::parse(rep.out);
  EXPECT_TRUE(v.at("complete").as_bool());
  EXPECT_FALSE(v.at("trailer").as_object().contains("steps"));
  // A session that is gone (the request refused, or the daemon gone by
  // then) leaves the summary out without failing: best effort, as before.
  for (FakeReply gone : {FakeReply{FakeReply::kFrame,
                                   R"({"ok":false,"code":"NOT_FOUND","message":"gone"})",
                                   {}},
                         FakeReply{FakeReply::kClose, "", {}}}) {
    fake_.Script({{"session_show", gone}});
    const testing::Result r = RunPfmctl(fake_.socket(), args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
}

// session_maps, read by every command that writes a summary (here
// `snapshot -o`): the fields of a page, pages that continue no list or do
// not move forward, and what "gone" is.
TEST_F(PfmctlRepliesE2e, SessionMaps) {
  const std::vector<std::string> args = {"snapshot", "1", "-o", File("maps")};
  const std::string internal = "pfmctl: INTERNAL: pfmd reply: session_maps: ";
  for (const json::value& r : NotObjectsOrNull())
    ExpectFails(args, {{"session_maps", Ok(r)}}, internal + "result is ",
                absl::StrCat("result ", json::serialize(r)));
  ExpectFieldFailures(args, "session_maps", MapsPage(),
                      {{"/newest", Kind::kUint, true},
                       {"/lists", Kind::kArray, true},
                       {"/lists/0", Kind::kObject, true},
                       {"/lists/0/seq", Kind::kUint, true},
                       {"/lists/0/pid", Kind::kInteger, true},
                       {"/lists/0/time_ns", Kind::kUint, true},
                       {"/lists/0/total", Kind::kUint, true},
                       {"/lists/0/first", Kind::kUint, true},
                       {"/lists/0/cut", Kind::kBool},  // absent from an older pfmd
                       {"/lists/0/mappings", Kind::kArray, true},
                       {"/lists/0/mappings/0/start", Kind::kUint, true},
                       {"/lists/0/mappings/0/path", Kind::kString, true}});
  json::value next_page = MapsPage();
  next_page.as_object()["next"] = json::object{{"seq", 2}, {"mapping", 0}};
  ExpectFieldFailures(args, "session_maps", next_page,
                      {{"/next", Kind::kObject},
                       {"/next/seq", Kind::kUint, true},
                       {"/next/mapping", Kind::kUint, true}});
  struct Bad {
    json::value result;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {json::object{{"lists", json::array{MapsList(1, 42, 3, 1, 1)}}, {"newest", 1}},
       "result.lists[0].first is 1: it continues no list the pages before had"},
      {json::object{{"lists", json::array{MapsList(1, 42, 1, 0, 2)}}, {"newest", 1}},
       "result.lists[0].mappings has 2 mappings from 0, past the total 1"},
      {json::object{{"lists", json::array{MapsList(2, 42, 1, 0, 1)}}, {"newest", 1}},
       "result.lists[0].seq is 2, not a list from 0 to 1"},
      {json::object{{"lists", json::array{MapsList(1, 42, 70000, 0, 1)}}, {"newest", 1}},
       "result.lists[0].total is 70000, over 65536"},
      {json::object{{"lists", json::array{}},
                    {"newest", 1},
                    {"next", json::object{{"seq", 0}, {"mapping", 0}}}},
       "result.next is list 0 mapping 0, not past the page asked for (list 0 mapping 0)"},
  };
  for (const Bad& b : bad)
    ExpectFails(args, {{"session_maps", Ok(b.result)}}, internal + b.message,
                json::serialize(b.result));
  // pfmd's refusal other than "gone" is the command's error; gone (the
  // session: NOT_FOUND; pfmd: a hang-up) leaves the maps out, as before.
  ExpectFails(args,
              {{"session_maps",
                FakeReply{FakeReply::kFrame,
                          R"({"ok":false,"code":"INTERNAL","message":"too big"})", {}}}},
              "pfmctl: INTERNAL: too big", "an INTERNAL refusal");
  for (FakeReply gone : {FakeReply{FakeReply::kFrame,
                                   R"({"ok":false,"code":"NOT_FOUND","message":"gone"})",
                                   {}},
                         FakeReply{FakeReply::kClose, "", {}}}) {
    fake_.Script({{"session_maps", gone}});
    const testing::Result r = RunPfmctl(fake_.socket(), args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
}

// A pfmd older than session_maps refuses it as an unknown command. Such a
// pfmd sent the lists in session_show ("process_maps": every list, "maps":
// the target's current one): pfmctl takes them from there. A soft-BTS
// session's trace without either is written with its summary and no MAPS
// block, and pfmctl warns that its addresses cannot be named (before, the
// command failed after the recording); a session without soft BTS has no
// lists and no warning.
TEST_F(PfmctlRepliesE2e, AnOlderPfmdWithoutSessionMapsGivesTheListsSessionShowHas) {
  const FakeReply unknown{FakeReply::kFrame,
                          R"({"ok":false,"code":"INVALID_ARGUMENT",)"
                          R"("message":"unknown command 'session_maps'"})",
                          {}};
  const std::string warning =
      "pfmd does not serve session_maps (it is older than this pfmctl): the trace has no "
      "mapping lists, so report and export cannot name its addresses";
  struct Case {
    std::string what;
    json::value show;
    std::vector<int32_t> pids;  // the MAPS blocks' pids, in order
    bool warns;
  };
  json::value with_lists = SessionShow();
  with_lists.as_object()["process_maps"] = json::array{MapsList(1, 43, 1, 0, 1)};
  with_lists.as_object()["maps"] = MapsList(2, 42, 2, 0, 2);
  json::value counters_only = SessionShow();
  counters_only.as_object().erase("soft_bts");
  const std::vector<Case> cases = {
      {"soft BTS, no lists in session_show", SessionShow(), {}, true},
      {"soft BTS, lists in session_show", with_lists, {43, 42}, false},
      {"counters only", counters_only, {}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string file = File("older");
    fake_.Script({{"session_maps", unknown}, {"session_show", Ok(c.show)}});
    const testing::Result r = RunPfmctl(fake_.socket(), {"snapshot", "1", "-o", file});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, c.warns ? "pfmctl: warning: " + warning + "\n" : "");
    absl::StatusOr<Trace> t = ReadTrace(file, {});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(t->complete);
    std::vector<int32_t> pids;
    for (const ProcessMaps& m : t->maps) pids.push_back(m.pid);
    EXPECT_EQ(pids, c.pids);
    if (!t->maps.empty()) {
      EXPECT_EQ(t->maps.back().mappings.size(), 2u);
    }
    // The rest of the summary is there.
    EXPECT_TRUE(t->trailer.contains("counters")) << json::serialize(t->trailer);
    const json::value* missing = t->trailer.if_contains("maps_missing");
    EXPECT_EQ(missing != nullptr, c.warns);
    if (missing != nullptr) {
      EXPECT_EQ(json::value_to<std::string>(*missing), warning);
    }
  }
  // A stream's start: the current list from session_show.
  fake_.Script({{"session_maps", unknown}, {"session_show", Ok(with_lists)}});
  const testing::Result st = RunPfmctl(fake_.socket(), {"stream", "1", "-o", File("stream")});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  EXPECT_EQ(st.err, "");
  absl::StatusOr<Trace> t = ReadTrace(File("stream"), {});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_FALSE(t->maps.empty());
  EXPECT_EQ(t->maps.front().pid, 42);  // the start block, before any record
  // Another INVALID_ARGUMENT is still the command's error (exit 2, as
  // pfmctl's for every INVALID_ARGUMENT).
  fake_.Script({{"session_maps",
                 FakeReply{FakeReply::kFrame,
                           R"({"ok":false,"code":"INVALID_ARGUMENT","message":"bad seq"})",
                           {}}}});
  const testing::Result bad = RunPfmctl(fake_.socket(), {"snapshot", "1", "-o", File("bad")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "pfmctl: INVALID_ARGUMENT: bad seq\n");
}

// Pages put together: a list split over two pages is one MAPS block, a list
// dropped by the tracer between pages (only its first part came) is left
// out, lists newer than the first page's newest are not waited for, and
// the current list comes last.
TEST_F(PfmctlRepliesE2e, SessionMapsPagesMakeWholeLists) {
  const std::vector<std::string> args = {"snapshot", "1", "-o", File("paged")};
  auto page = [](json::array lists, uint64_t newest, std::optional<std::pair<int, int>> next) {
    json::object o{{"lists", std::move(lists)}, {"newest", newest}};
    if (next) o["next"] = json::object{{"seq", next->first}, {"mapping", next->second}};
    return Ok(o);
  };
  // List 3 is a cut one (ProcessMaps::cut), which each of its pages says.
  auto cut = [](json::value l) {
    l.as_object()["cut"] = true;
    return l;
  };
  fake_.Script({});
  fake_.Queue("session_maps",
              {// every list: 3 (split), 4 (dropped after its first part), 5
               page(json::array{cut(MapsList(3, 42, 3, 0, 2))}, 5, std::make_pair(3, 2)),
               page(json::array{cut(MapsList(3, 42, 3, 2, 1)), MapsList(4, 43, 2, 0, 1)}, 5,
                    std::make_pair(4, 1)),
               page(json::array{MapsList(5, 44, 1, 0, 1)}, 6, std::make_pair(6, 0)),
               // the current list
               page(json::array{MapsList(5, 44, 1, 0, 1)}, 6, std::nullopt)});
  const testing::Result r = RunPfmctl(fake_.socket(), args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<json::value> asked = fake_.Requests("session_maps");
  ASSERT_EQ(asked.size(), 4u);
  EXPECT_EQ(json::serialize(asked[1]),
            R"({"id":1,"seq":3,"mapping":2,"op":"session_maps"})");
  EXPECT_EQ(json::serialize(asked[2]),
            R"({"id":1,"seq":4,"mapping":1,"op":"session_maps"})");
  EXPECT_TRUE(asked[3].as_object().at("current").as_bool());
  absl::StatusOr<Trace> t = ReadTrace(File("paged"), {});
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::pair<int32_t, size_t>> blocks;
  for (const ProcessMaps& m : t->maps) blocks.emplace_back(m.pid, m.mappings.size());
  EXPECT_EQ(blocks, (std::vector<std::pair<int32_t, size_t>>{{42, 3}, {44, 1}, {44, 1}}));
  ASSERT_EQ(t->maps[0].mappings.size(), 3u);
  EXPECT_EQ(t->maps[0].mappings[2].start, 4194304u + 2 * 8192);
  EXPECT_TRUE(t->maps[0].cut);
  EXPECT_FALSE(t->maps[1].cut);
  EXPECT_FALSE(t->maps[2].cut);
}

// record --output-format keeps both existing outputs as .old or neither:
// when the export's cannot be kept (FILE.old is a directory with a file in
// it), the trace file moved aside first goes back, and the error says why.
TEST_F(PfmctlRepliesE2e, RecordKeepsBothOldOutputsOrNeither) {
  const std::string file = File("both.data");
  auto write = [](const std::string& p, const std::string& text) {
    std::ofstream(p, std::ios::trunc) << text;
  };
  write(file, "the last perf.data");
  write(file + ".pfmtrace", "the last trace");
  ASSERT_EQ(::mkdir((file + ".old").c_str(), 0700), 0);
  write(file + ".old/x", "x");
  fake_.Script({});
  const testing::Result r = RunPfmctl(
      fake_.socket(), {"record", "--output-format", "perf", "-o", file, "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("pfmctl: INVALID_ARGUMENT: cannot keep " + file + " as " + file +
                            ".old: ",
                        0),
            0u)
      << r.err;
  std::ifstream trace(file + ".pfmtrace");
  std::string text;
  std::getline(trace, text);
  EXPECT_EQ(text, "the last trace");
  EXPECT_NE(::access((file + ".pfmtrace.old").c_str(), F_OK), 0);
  ::unlink((file + ".old/x").c_str());
  ::rmdir((file + ".old").c_str());
}

TEST_F(PfmctlRepliesE2e, Record) {
  const std::vector<std::string> args = {"record", "-o", File("rec"), "--", "/bin/true"};
  // status: only the driver is read.
  ExpectGenericFailures(args, "status", NotObjects());
  ExpectFieldFailures(args, "status", Parse(kStatus), {{"/driver", Kind::kString, true}});
  // session_create: the id (the command is held, then abandoned).
  ExpectGenericFailures(args, "session_create", NotObjects());
  ExpectFieldFailures(args, "session_create", json::object{{"id", 1}},
                      {{"/id", Kind::kId, true}});
  // session_ring.
  ExpectGenericFailures(args, "session_ring", {});
  ExpectRingFailures(args);
  // session_show, after /bin/true ran: the summary.
  for (const json::value& r : NotObjectsOrNull())
    ExpectFails(args, {{"session_show", Ok(r)}},
                "pfmctl: INTERNAL: pfmd reply: session_show: result is ",
                absl::StrCat("result ", json::serialize(r)));
  ExpectFieldFailures(args, "session_show", SessionShow(), SummaryFields());
}

// stat: status (the default events' gp_counters), session_create, then the
// counts. Its lines go to stderr, as perf stat's do: a failure must leave
// the one error line there and nothing else.
TEST_F(PfmctlRepliesE2e, Stat) {
  const std::vector<std::string> args = {"stat", "--", "/bin/true"};
  ExpectGenericFailures(args, "status", NotObjects());
  ExpectFieldFailures(args, "status", Parse(kStatus),
                      {{"/machine", Kind::kObject, true},
                       {"/machine/gp_counters", Kind::kUint, true}});
  ExpectGenericFailures(args, "session_create", NotObjects());
  ExpectFieldFailures(args, "session_create", json::object{{"id", 1}},
                      {{"/id", Kind::kId, true}});
  ExpectGenericFailures(args, "session_show", NotObjects());
  ExpectFieldFailures(args, "session_show", SessionShow(),
                      {{"/counters", Kind::kArray, true},
                       {"/counters/0", Kind::kObject, true},
                       {"/counters/0/event", Kind::kString, true},
                       {"/counters/0/value", Kind::kUint},
                       {"/counters/0/counted", Kind::kBool},
                       {"/counters/0/scaled", Kind::kUint},
                       {"/counters/0/ratio", Kind::kNumber}});
  // The well-formed counts: perf stat's line, the share when multiplexed.
  fake_.Script({});
  const testing::Result r = RunPfmctl(fake_.socket(), args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("0.00 msec task-clock"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(50.00%)"), std::string::npos) << r.err;
}

// gdbserver (stdio, a launched program): the driver, the session's id and
// the one debug-channel fd are all it reads before GDB talks to it.
TEST_F(PfmctlRepliesE2e, Gdbserver) {
  const std::vector<std::string> args = {"gdbserver", "--", "/bin/true"};
  ExpectGenericFailures(args, "status", NotObjects());
  ExpectFieldFailures(args, "status", Parse(kStatus), {{"/driver", Kind::kString, true}});
  ExpectGenericFailures(args, "session_create", NotObjects());
  ExpectFieldFailures(args, "session_create", json::object{{"id", 1}},
                      {{"/id", Kind::kId, true}});
  const std::string internal = "pfmctl: INTERNAL: pfmd reply: session_debug: ";
  ExpectFails(args, {{"session_debug", Ok(json::object{})}}, internal + "expected one fd",
              "no fd");
  ExpectFails(args, {{"session_debug", Ok(json::object{}, {ring_->fd(), ring_->fd()})}},
              internal + "expected one fd", "two fds");
  ExpectFails(args,
              {{"session_debug",
                {FakeReply::kFrame, R"({"ok":false,"code":"OK","message":"m"})", {}}}},
              internal + "an error reply with code \"OK\"", "an error with code OK");
  ExpectFails(args, {{"session_debug", {FakeReply::kTruncated, "", {}}}},
              "pfmctl: DATA_LOSS: ", "a truncated frame");
  ExpectFails(args, {{"session_debug", {FakeReply::kFrame, "[]", {}}}},
              internal + "not a JSON object", "an array body");
}

}  // namespace
}  // namespace pfm
