// End to end, issue 17: pfmctl's trace readers (`report`, `script`,
// `export`) on any file a user may hand them: a directory, an empty file, a
// device, a FIFO, a missing path, a valid trace, that trace cut at many
// offsets and with bytes flipped, random bytes with and without a valid
// magic. Every run must end by itself with status 0, or with 1 or 2 and the
// one error line `pfmctl: CODE: message`, never by a signal (an abort from
// an uncaught exception, a crash) and never with the catch-all "uncaught
// exception" line. The real pfmctl binary, no daemon.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "kernel/uapi/pfm_uapi.h"
#include "pfm/trace_file.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;

// A complete trace with every record type, MAPS naming /bin/true and a
// trailer with counters, as `record` writes one.
std::string WriteValidTrace(const std::string& path) {
  auto w = TraceWriter::Create(path, {{"kind", "record"}, {"command", "/bin/true"},
                                      {"pid", 4242}});
  EXPECT_TRUE(w.ok()) << w.status();
  std::vector<pfm_record> recs;
  for (uint16_t type = 1; type <= PFM_REC_TYPE_MAX; ++type) {  // and one unknown
    for (int i = 0; i < 20; ++i) {
      pfm_record r{};
      r.type = type;
      r.time = 1000 + recs.size();
      r.pid = r.tid = 4242;
      r.u.branch.from = 0x400000 + 16 * static_cast<uint64_t>(i);
      r.u.branch.to = 0x400100;
      r.u.branch.flags = 3;
      recs.push_back(r);
    }
  }
  EXPECT_TRUE(w->Append(recs.data(), recs.size()).ok());
  ProcessMaps maps{2000, 4242, {Mapping{0x400000, 0x500000, 0, "/bin/true", false, false}}};
  EXPECT_TRUE(w->AppendMaps(maps).ok());
  EXPECT_TRUE(w->Append(recs.data(), 50).ok());
  json::array counters{json::object{{"event", "task-clock"}, {"value", 123456}, {"ratio", 1.0}},
                       json::object{{"event", "page-faults"}, {"value", 12}, {"ratio", 0.5}}};
  EXPECT_TRUE(w->Finish({{"exit", "exit 0"}, {"counters", counters}, {"steps", 999}}).ok());
  return testing::ReadFile(path);
}

void WriteBytes(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

// testing::Run, without its 100 ms watchdog steps (this test runs pfmctl
// over a thousand times): both pipes drained with poll, SIGKILL after
// `timeout_s`.
testing::Result RunFast(const std::vector<std::string>& argv, int timeout_s = 60) {
  testing::Result res;
  int outp[2], errp[2];
  if (::pipe2(outp, O_CLOEXEC) != 0 || ::pipe2(errp, O_CLOEXEC) != 0) return res;
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return res;  // never kill(-1) below
  if (pid == 0) {
    ::dup2(outp[1], 1);
    ::dup2(errp[1], 2);
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::dup2(devnull, 0);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(outp[1]);
  ::close(errp[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  pollfd fds[2] = {{outp[0], POLLIN, 0}, {errp[0], POLLIN, 0}};
  std::string* sinks[2] = {&res.out, &res.err};
  for (int open = 2; open > 0;) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      break;
    }
    if (::poll(fds, 2, 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  for (const pollfd& p : fds)
    if (p.fd >= 0) ::close(p.fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return res;
}

bool IsErrorLine(const std::string& line) {
  // "pfmctl: CODE: message", CODE in capitals and underscores.
  if (line.rfind("pfmctl: ", 0) != 0) return false;
  const size_t colon = line.find(": ", 8);
  if (colon == std::string::npos || colon == 8 || colon + 2 >= line.size()) return false;
  for (size_t i = 8; i < colon; ++i)
    if (!(std::isupper(static_cast<unsigned char>(line[i])) || line[i] == '_')) return false;
  return true;
}

class PfmctlInputE2e : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("input"); }

  // Runs every reading command on `input`; `what` names the input in
  // failures.
  void ExpectCleanEnds(const std::string& input, const std::string& what) {
    const std::string out = dir_ + "/out.data";
    const std::vector<std::vector<std::string>> commands = {
        {"report", input},
        {"--json", "report", input},
        {"report", "--records", input},
        {"--json", "report", "--records", input},
        {"script", input},
        {"--json", "script", input},
        {"export", input, "-o", out},
        {"export", input, "-o", out, "--format", "chrome-json"},
    };
    for (const std::vector<std::string>& c : commands) {
      std::vector<std::string> argv = {testing::PfmctlPath()};
      argv.insert(argv.end(), c.begin(), c.end());
      const testing::Result r = RunFast(argv);
      std::string cmd;
      for (const std::string& a : c) cmd += " " + a;
      SCOPED_TRACE(what + ":" + cmd);
      ++runs_;
      ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2)
          << "exit " << r.exit_code << " (128+N is a signal)\n" << r.err;
      EXPECT_EQ(r.err.find("uncaught exception"), std::string::npos) << r.err;
      if (r.exit_code != 0) {
        ASSERT_FALSE(r.err.empty());
        const std::string last = r.err.substr(
            r.err.rfind('\n', r.err.size() - 2) == std::string::npos
                ? 0
                : r.err.rfind('\n', r.err.size() - 2) + 1);
        EXPECT_TRUE(IsErrorLine(last.substr(0, last.size() - 1))) << r.err;
        ++failures_;
      }
      // --json: stdout is one document whenever there is one.
      if (c[0] == "--json" && !r.out.empty()) {
        boost::system::error_code ec;
        json::parse(r.out, ec);
        EXPECT_FALSE(ec) << r.out.substr(0, 300);
      }
    }
  }

  std::string dir_;
  int runs_ = 0, failures_ = 0;
};

TEST_F(PfmctlInputE2e, NonTraceInputsAreRefusedWithOneErrorLine) {
  const std::string empty = dir_ + "/empty", fifo = dir_ + "/fifo", text = dir_ + "/text";
  WriteBytes(empty, "");
  WriteBytes(text, "hello, not a trace\n");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& input : {dir_, empty, fifo, text, dir_ + "/missing",
                                   std::string("/dev/null"), std::string("/dev/zero")}) {
    ExpectCleanEnds(input, input);
  }
  // None of them is a trace: every run failed.
  EXPECT_EQ(failures_, runs_);
  // The directory case by name (it used to abort with std::__ios_failure).
  const testing::Result r = testing::Run({testing::PfmctlPath(), "report", dir_});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "pfmctl: INVALID_ARGUMENT: " + dir_ +
                       " is a directory, not a pfm trace file\n");
}

TEST_F(PfmctlInputE2e, ValidTraceAndItsCutsEndCleanly) {
  const std::string valid = dir_ + "/valid.pfmtrace";
  const std::string data = WriteValidTrace(valid);
  ASSERT_GT(data.size(), 1000u);
  ExpectCleanEnds(valid, "valid");
  EXPECT_EQ(failures_, 0);
  const testing::Result script = testing::Run({testing::PfmctlPath(), "script", valid});
  EXPECT_EQ(script.exit_code, 0) << script.err;
  EXPECT_EQ(testing::CountOf(script.out, "\n"), size_t{PFM_REC_TYPE_MAX} * 20 + 50);
  // Cut at 60 offsets spread over the file, and at every byte of its start
  // (magic, version, header).
  const std::string cut = dir_ + "/cut.pfmtrace";
  std::vector<size_t> offsets;
  for (size_t n = 0; n < 40; ++n) offsets.push_back(n);
  for (size_t i = 1; i < 60; ++i) offsets.push_back(data.size() * i / 60);
  offsets.push_back(data.size() - 1);
  for (size_t n : offsets) {
    WriteBytes(cut, data.substr(0, n));
    ExpectCleanEnds(cut, "cut at " + std::to_string(n));
  }
}

TEST_F(PfmctlInputE2e, DamagedAndRandomBytesEndCleanly) {
  const std::string data = WriteValidTrace(dir_ + "/valid.pfmtrace");
  const std::string path = dir_ + "/damaged.pfmtrace";
  std::mt19937_64 rng(17);
  // Flipped bytes: in block headers, the JSON, the MAPS block, records.
  for (int i = 0; i < 25; ++i) {
    std::string d = data;
    for (int k = 0; k < 1 + i % 4; ++k) {
      const size_t at = 12 + rng() % (d.size() - 12);
      d[at] = static_cast<char>(rng());
    }
    WriteBytes(path, d);
    ExpectCleanEnds(path, "flipped #" + std::to_string(i));
  }
  // Random bytes, with and without a valid magic and version in front.
  for (int i = 0; i < 10; ++i) {
    std::string d(1 + rng() % 20000, '\0');
    for (char& c : d) c = static_cast<char>(rng());
    if (i % 2) d = data.substr(0, 12) + d;
    WriteBytes(path, d);
    ExpectCleanEnds(path, "random #" + std::to_string(i));
  }
}

}  // namespace
}  // namespace pfm
