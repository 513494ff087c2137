// End to end: the real pfmd binary and the real pfmctl binary over a real
// Unix socket (issue 2's walking skeleton).
#include <perfmon/pfmlib.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "pfm/wire.h"
#include "tests/testing/harness.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Daemon;
using testing::Pfmctl;
using testing::PfmctlJson;

pfm_pmu_info_t LibpfmInfo(const char* name) {
  EXPECT_EQ(pfm_initialize(), PFM_SUCCESS);
  pfm_pmu_info_t found;
  std::memset(&found, 0, sizeof(found));
  for (int p = PFM_PMU_NONE; p < PFM_PMU_MAX; ++p) {
    pfm_pmu_info_t info;
    std::memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (pfm_get_pmu_info(static_cast<pfm_pmu_t>(p), &info) == PFM_SUCCESS &&
        std::strcmp(info.name, name) == 0)
      found = info;
  }
  return found;
}

TEST(StatusE2e, SimSkylakeReportsLibpfmShape) {
  Daemon d({"--driver", "sim", "--sim-pmu", "skl", "--sim-cpus", "4"});
  ASSERT_TRUE(d.started());
  json::value v = PfmctlJson(d.socket(), {"status"});
  const json::object& m = v.at("machine").as_object();
  pfm_pmu_info_t skl = LibpfmInfo("skl");
  EXPECT_EQ(v.at("driver").as_string(), "sim");
  EXPECT_EQ(m.at("cpus").as_int64(), 4);
  EXPECT_EQ(m.at("pmu").as_string(), "skl");
  EXPECT_EQ(m.at("gp_counters").as_int64(), skl.num_cntrs);
  EXPECT_EQ(m.at("fixed_counters").as_int64(), skl.num_fixed_cntrs);
  EXPECT_EQ(m.at("debug_registers").as_int64(), 4);
  EXPECT_TRUE(m.at("bts").as_bool());
  EXPECT_TRUE(m.at("pebs").as_bool());
  EXPECT_TRUE(v.as_object().contains("sessions"));
  EXPECT_TRUE(v.at("memory").as_object().contains("limit_per_uid"));
  EXPECT_TRUE(v.at("memory").at("charged").is_array());
}

TEST(StatusE2e, SimIcelakeDiffersFromSkylake) {
  Daemon d({"--driver", "sim", "--sim-pmu", "icl", "--sim-cpus", "2"});
  ASSERT_TRUE(d.started());
  json::value v = PfmctlJson(d.socket(), {"status"});
  EXPECT_EQ(v.at("machine").at("gp_counters").as_int64(),
            LibpfmInfo("icl").num_cntrs);
  EXPECT_EQ(v.at("machine").at("cpus").as_int64(), 2);
}

TEST(StatusE2e, HostReportsWhatThisMachineHas) {
  Daemon d({"--driver", "host"});
  ASSERT_TRUE(d.started());
  json::value v = PfmctlJson(d.socket(), {"status"});
  const json::object& m = v.at("machine").as_object();
  EXPECT_EQ(v.at("driver").as_string(), "host");
  EXPECT_EQ(m.at("cpus").as_int64(), sysconf(_SC_NPROCESSORS_ONLN));
  const bool has_cpu_pmu =
      access("/sys/bus/event_source/devices/cpu", F_OK) == 0 ||
      access("/sys/bus/event_source/devices/cpu_core", F_OK) == 0;
  if (!has_cpu_pmu) {
    // No CPU PMU (this VM): no counters, no Debug Store.
    EXPECT_EQ(m.at("gp_counters").as_int64(), 0);
    EXPECT_EQ(m.at("fixed_counters").as_int64(), 0);
    EXPECT_FALSE(m.at("pebs").as_bool());
    EXPECT_EQ(m.at("pmu").as_string(), "none");
  } else {
    EXPECT_GT(m.at("gp_counters").as_int64(), 0);
  }
  EXPECT_EQ(m.at("bts").as_bool(),
            access("/sys/bus/event_source/devices/intel_bts", F_OK) == 0);
}

TEST(StatusE2e, HumanOutputNamesThePmu) {
  Daemon d({"--driver", "sim", "--sim-pmu", "skl"});
  ASSERT_TRUE(d.started());
  testing::Result r = Pfmctl(d.socket(), {"status"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("pmu skl"), std::string::npos) << r.out;
}

TEST(StatusE2e, MalformedRequestsLeaveOtherClientsServed) {
  Daemon d({"--driver", "sim"});
  ASSERT_TRUE(d.started());
  // A well-behaved client connected before the abuse.
  int good = testing::ConnectRaw(d.socket());
  ASSERT_GE(good, 0);

  // Garbage JSON: an INVALID_ARGUMENT reply, the connection stays usable.
  int bad = testing::ConnectRaw(d.socket());
  ASSERT_TRUE(SendFrame(bad, "this is not json", {}).ok());
  auto reply = RecvFrame(bad, 5000);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_NE(reply->body.find("INVALID_ARGUMENT"), std::string::npos);
  ASSERT_TRUE(SendFrame(bad, "{\"op\":\"no-such-command\"}", {}).ok());
  reply = RecvFrame(bad, 5000);
  ASSERT_TRUE(reply.ok());
  EXPECT_NE(reply->body.find("unknown command 'no-such-command'"),
            std::string::npos);
  ASSERT_TRUE(SendFrame(bad, "[1,2,3]", {}).ok());
  reply = RecvFrame(bad, 5000);
  ASSERT_TRUE(reply.ok());
  EXPECT_NE(reply->body.find("not a JSON object"), std::string::npos);
  close(bad);

  // An oversized length: an error reply, then the daemon closes.
  int huge = testing::ConnectRaw(d.socket());
  const unsigned char hdr[4] = {0xff, 0xff, 0xff, 0xff};
  ASSERT_EQ(write(huge, hdr, 4), 4);
  reply = RecvFrame(huge, 5000);
  ASSERT_TRUE(reply.ok());
  EXPECT_NE(reply->body.find("exceeds"), std::string::npos);
  // Closed: the hang-up, not the timeout.
  EXPECT_EQ(RecvFrame(huge, 5000).status().code(), absl::StatusCode::kUnavailable);
  close(huge);

  // A truncated frame and a hang-up mid-frame.
  int cut = testing::ConnectRaw(d.socket());
  std::string partial = EncodeFrame("{\"op\":\"status\"}").substr(0, 7);
  ASSERT_EQ(write(cut, partial.data(), partial.size()),
            static_cast<ssize_t>(partial.size()));
  close(cut);

  // The first client is still served, and so is a new one.
  ASSERT_TRUE(SendFrame(good, "{\"op\":\"status\"}", {}).ok());
  reply = RecvFrame(good, 5000);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_NE(reply->body.find("\"ok\":true"), std::string::npos);
  close(good);
  json::value v = PfmctlJson(d.socket(), {"status"});
  EXPECT_EQ(v.at("driver").as_string(), "sim");
}

TEST(StatusE2e, PfmdRefusesUnknownFlagWithExitTwo) {
  testing::Result r = testing::Run({testing::PfmdPath(), "--frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("pfmd: INVALID_ARGUMENT: unknown flag '--frobnicate'"),
            std::string::npos)
      << r.err;
  r = testing::Run({testing::PfmdPath(), "--driver", "sim", "--sim-pmu",
                    "nosuchpmu", "--socket", "/tmp/never-used.sock"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("nosuchpmu"), std::string::npos) << r.err;
}

TEST(StatusE2e, PfmctlReportsUnavailableOnADeadSocket) {
  std::string dir = testing::MakeSocketDir();
  testing::Result r = Pfmctl(dir + "/nobody.sock", {"status"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("pfmctl: UNAVAILABLE: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  rmdir(dir.c_str());
}

TEST(StatusE2e, PfmctlStartsAnEmbeddedDaemonWhenNoneRuns) {
  std::string runtime = testing::MakeSocketDir();
  chmod(runtime.c_str(), 0700);
  std::map<std::string, std::string> env = {{"XDG_RUNTIME_DIR", runtime},
                                            {"PFMD_SOCKET", ""}};
  // Stops the daemon if an assertion ends the test before its shutdown: by
  // its socket (once `runtime` is gone, pfmctl's own choice of private
  // socket would be another daemon's).
  struct Stopper {
    std::string socket;
    ~Stopper() { testing::Run({testing::PfmctlPath(), "--socket", socket, "shutdown"}); }
  } stopper{runtime + "/pfmd/pfmd.sock"};
  testing::Result r = testing::Run(
      {testing::PfmctlPath(), "--json", "--driver", "sim", "status"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json::value v = json::parse(r.out);
  EXPECT_EQ(v.at("driver").as_string(), "sim");
  // The second call finds the same daemon on the private socket.
  EXPECT_EQ(access((runtime + "/pfmd/pfmd.sock").c_str(), F_OK), 0);
  r = testing::Run({testing::PfmctlPath(), "--json", "status"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("driver").as_string(), "sim");
  r = testing::Run({testing::PfmctlPath(), "shutdown"}, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int i = 0; i < 100 && access((runtime + "/pfmd/pfmd.sock").c_str(), F_OK) == 0; ++i)
    usleep(20000);
  EXPECT_NE(access((runtime + "/pfmd/pfmd.sock").c_str(), F_OK), 0);
  unlink((runtime + "/pfmd/pfmd.sock.log").c_str());
  rmdir((runtime + "/pfmd").c_str());
  rmdir(runtime.c_str());
}

// The embedded daemon outlives the pfmctl that started it, so it must keep
// none of that pfmctl's files: a pipe its caller reads to EOF (here: the
// write end, inherited by pfmctl without close-on-exec, must be closed once
// pfmctl has exited while the daemon runs on), a lock, a directory it holds
// busy (its working directory is /).
TEST(StatusE2e, TheEmbeddedDaemonKeepsNoneOfItsStartersFiles) {
  const std::string runtime = testing::MakeSocketDir();
  ASSERT_EQ(chmod(runtime.c_str(), 0700), 0);
  const std::map<std::string, std::string> env = {{"XDG_RUNTIME_DIR", runtime},
                                                  {"PFMD_SOCKET", ""}};
  // Stops the daemon whatever the test's outcome (by its socket, as above).
  struct Stopper {
    std::string socket;
    ~Stopper() { testing::Run({testing::PfmctlPath(), "--socket", socket, "shutdown"}); }
  } stopper{runtime + "/pfmd/pfmd.sock"};
  int p[2];
  ASSERT_EQ(pipe(p), 0);  // not close-on-exec: pfmctl inherits both ends
  testing::Result r = testing::Run(
      {testing::PfmctlPath(), "--json", "--driver", "sim", "status"}, env);
  close(p[1]);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  pollfd pf{p[0], POLLIN, 0};
  ASSERT_EQ(poll(&pf, 1, 5000), 1) << "the pipe's write end is still open somewhere";
  char c;
  EXPECT_EQ(read(p[0], &c, 1), 0);  // EOF: nobody holds the write end
  close(p[0]);
  // The daemon runs on, in /.
  const std::string title = "pfmd (embedded) --socket " + runtime + "/pfmd/pfmd.sock";
  pid_t daemon = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
    if (pid <= 0) continue;
    std::ifstream in(e.path() / "cmdline");
    std::string cmd;
    std::getline(in, cmd, '\0');
    if (cmd == title) daemon = pid;
  }
  ASSERT_GT(daemon, 0) << "no process named '" << title << "'";
  std::error_code ec;
  EXPECT_EQ(std::filesystem::read_symlink("/proc/" + std::to_string(daemon) + "/cwd", ec),
            "/");
}

TEST(StatusE2e, PfmdRefusesOverlongSocketPath) {
  testing::Result r = testing::Run(
      {testing::PfmdPath(), "--driver", "sim", "--socket",
       "/tmp/" + std::string(200, 'x') + ".sock"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("pfmd: INVALID_ARGUMENT: socket path"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace pfm
