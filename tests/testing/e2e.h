// What the end-to-end tests (tests/*_e2e_test.cc) share on top of the
// harness: a fixture that owns one pfmd, and the small helpers and constants
// they read replies and files with. Includes harness.h, so a test includes
// this header alone.
#ifndef PFM_TESTS_TESTING_E2E_H_
#define PFM_TESTS_TESTING_E2E_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "tests/testing/harness.h"

namespace pfm::testing {

// The unprivileged uid the security tests drop to ("nobody").
inline constexpr uid_t kNobody = 65534;

// Twelve events of the simulated Skylake (libpfm4's skl table names) that go
// on general-purpose counters only: more than its eight, so they rotate.
inline const std::vector<std::string> kSkylakeGpOnlyEvents = {
    "branch-instructions", "branch-misses",  "cache-references",
    "cache-misses",        "bus-cycles",     "L2_RQSTS.REFERENCES",
    "BR_INST_RETIRED.ALL_BRANCHES", "BR_MISP_RETIRED.ALL_BRANCHES",
    "MEM_LOAD_RETIRED.L1_HIT", "MEM_LOAD_RETIRED.L2_HIT",
    "MEM_LOAD_RETIRED.L3_MISS", "UOPS_ISSUED.ANY"};

// A JSON number as an unsigned integer (ids, counts, bytes, times).
uint64_t Num(const boost::json::value& v);
// A JSON string of hex digits ("0x401000", as pfmctl prints addresses).
uint64_t Addr(const boost::json::value& v);
// A JSON string's text; any other value serialized.
std::string Str(const boost::json::value& v);

bool Contains(const std::string& s, const std::string& part);
bool StartsWith(const std::string& s, const std::string& prefix);
// Occurrences of `what` in `text`, overlapping ones included.
size_t CountOf(const std::string& text, const std::string& what);

// The whole file at `path`; "" if it cannot be read.
std::string ReadFile(const std::string& path);
// Reads `fd` to EOF (EINTR-safe); does not close it.
std::string ReadAll(int fd);
// The number of fds `pid` has open (/proc/PID/fd), or -1.
int FdCount(pid_t pid);

// A test fixture that runs one pfmd for each test. Its SetUp starts the
// daemon with StartDaemon or StartSim (which fail the test fatally if pfmd
// does not come up: wrap them in ASSERT_NO_FATAL_FAILURE when more of
// SetUp follows). The daemon is stopped when the fixture is destroyed.
class DaemonTest : public ::testing::Test {
 protected:
  // pfmd with exactly `flags` (besides its --socket).
  void StartDaemon(std::vector<std::string> flags);
  // pfmd on the simulated machine: "--driver sim", then `extra`.
  void StartSim(const std::vector<std::string>& extra);

  // The daemon's socket; only after a successful Start*.
  const std::string& socket() const { return d_->socket(); }

  // `pfmctl session create <flags> --json`: the new session's id. A refusal
  // fails the test.
  uint64_t Create(std::vector<std::string> flags);

  std::unique_ptr<Daemon> d_;
};

// A forked child killed (SIGKILL) and reaped when this goes out of scope,
// however the test ends. A pid <= 0 (the fork failed, or the test reaped
// it and set pid to -1) is left alone: never kill(-1).
struct ScopedChild {
  pid_t pid;
  ~ScopedChild();
};

}  // namespace pfm::testing

#endif  // PFM_TESTS_TESTING_E2E_H_
