#include "userspace/pfmd/auth.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace pfm {
namespace {

TEST(Auth, SameUidMayTraceItsOwnProcess) {
  EXPECT_TRUE(MayTraceTask(::getuid(), 0, ::getpid()).ok());
}

TEST(Auth, OtherUidWithoutCapIsDeniedNamingTheRule) {
  if (::getuid() == 65534) GTEST_SKIP() << "running as nobody";
  absl::Status s = MayTraceTask(65534, 0, ::getpid());
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("CAP_SYS_PTRACE"), std::string::npos);
  EXPECT_TRUE(MayTraceTask(65534, 1ull << kCapSysPtrace, ::getpid()).ok());
}

TEST(Auth, PrivilegedTracingNeedsPerfmonOrSysAdmin) {
  EXPECT_EQ(MayTracePrivileged(1000, 0, "kernel tracing").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(MayTracePrivileged(1000, 1ull << kCapPerfmon, "x").ok());
  EXPECT_TRUE(MayTracePrivileged(1000, 1ull << kCapSysAdmin, "x").ok());
}

TEST(Auth, MissingProcessIsNotFound) {
  EXPECT_EQ(MayTraceTask(0, ~0ull, 0x3ffffff0).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenTraceTarget(0, ~0ull, 0x3ffffff0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenTraceTarget(0, ~0ull, -4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Auth, PidfdSeesTheTargetExit) {
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  auto fd = OpenTraceTarget(::getuid(), EffectiveCaps(::getpid()), child);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(PidfdAlive(fd->get()));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(PidfdAlive(fd->get()));
}

}  // namespace
}  // namespace pfm
