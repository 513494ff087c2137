#include "userspace/pfmd/socket_dir.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace pfm {
namespace {

constexpr uid_t kOther = 65534;

// A fresh directory in /tmp (root's, sticky): the tree under it is the
// test's. Removed with everything in it at the end.
class SocketDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pfm-sockdir-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
  }
  void TearDown() override {
    if (!base_.empty()) (void)!::system(("rm -rf '" + base_ + "'").c_str());
  }
  std::string Mkdir(const std::string& name, mode_t mode = 0700) {
    const std::string p = base_ + "/" + name;
    EXPECT_EQ(::mkdir(p.c_str(), 0700), 0) << p;
    EXPECT_EQ(::chmod(p.c_str(), mode), 0) << p;
    return p;
  }
  std::string base_;
};

absl::Status Check(const std::string& sock) { return CheckSocketDirectory(sock, ::geteuid()); }

TEST_F(SocketDirTest, TrustsTheCallersOwnPrivateDirectory) {
  const std::string d = Mkdir("run");
  EXPECT_TRUE(Check(d + "/pfmd.sock").ok()) << Check(d + "/pfmd.sock");
  // /tmp itself: root's, world-writable with the sticky bit.
  EXPECT_TRUE(Check("/tmp/pfmd.sock").ok()) << Check("/tmp/pfmd.sock");
  EXPECT_TRUE(Check("/pfmd.sock").ok());
}

TEST_F(SocketDirTest, FollowsALinkOfTheCallerOrRoot) {
  const std::string d = Mkdir("real");
  const std::string link = base_ + "/link";
  ASSERT_EQ(::symlink(d.c_str(), link.c_str()), 0);
  EXPECT_TRUE(Check(link + "/pfmd.sock").ok()) << Check(link + "/pfmd.sock");
}

TEST_F(SocketDirTest, RefusesALinkOfAnotherUidNamingItAndItsTarget) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (lchown to another uid)";
  const std::string d = Mkdir("real");
  const std::string link = base_ + "/link";
  ASSERT_EQ(::symlink(d.c_str(), link.c_str()), 0);
  ASSERT_EQ(::lchown(link.c_str(), kOther, kOther), 0);
  const absl::Status s = Check(link + "/pfmd.sock");
  EXPECT_EQ(s, absl::FailedPreconditionError(
                   "socket path " + link + "/pfmd.sock: " + link +
                   " is a symbolic link owned by uid 65534, mode 0777 (to " + d +
                   "); pfmd follows only links owned by root, so nothing was created"));
  // A link above the socket's directory counts the same.
  const std::string sub = Mkdir("real/sub");
  EXPECT_EQ(Check(link + "/sub/pfmd.sock").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Check(sub + "/pfmd.sock").ok());
}

TEST_F(SocketDirTest, RefusesADirectoryOfAnotherUidAnywhereOnThePath) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown to another uid)";
  const std::string d = Mkdir("theirs");
  const std::string sub = Mkdir("theirs/mine");
  ASSERT_EQ(::chown(d.c_str(), kOther, kOther), 0);
  for (const std::string& sock : {d + "/pfmd.sock", sub + "/pfmd.sock"}) {
    const absl::Status s = Check(sock);
    EXPECT_EQ(s, absl::FailedPreconditionError(
                     "socket path " + sock + ": " + d +
                     " is a directory owned by uid 65534, mode 0700; the socket's "
                     "directories must be owned by root (their owner decides what "
                     "answers there), so nothing was created"));
  }
  // The same directory is fine for a pfmd running as its owner.
  EXPECT_TRUE(CheckSocketDirectory(sub + "/pfmd.sock", kOther).ok());
  EXPECT_EQ(CheckSocketDirectory(sub + "/pfmd.sock", kOther - 1).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(SocketDirTest, RefusesAWritableDirectoryUnlessSticky) {
  const std::string shared = Mkdir("shared", 0777);
  const std::string sock = shared + "/pfmd.sock";
  EXPECT_EQ(Check(sock),
            absl::FailedPreconditionError(
                "socket path " + sock + ": " + shared +
                " is a directory owned by uid " + std::to_string(::geteuid()) +
                ", mode 0777, writable by group or others without the sticky bit: "
                "another user could replace what is in it, so nothing was created"));
  const std::string group = Mkdir("group", 0770);
  EXPECT_EQ(Check(group + "/mine/pfmd.sock").code(), absl::StatusCode::kNotFound);
  Mkdir("group/mine");
  EXPECT_EQ(Check(group + "/mine/pfmd.sock").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  EXPECT_TRUE(Check(sock).ok()) << Check(sock);
}

TEST_F(SocketDirTest, MissingDirectoryIsNotFoundAndAFileIsNotADirectory) {
  const std::string sock = base_ + "/nope/pfmd.sock";
  const absl::Status s = Check(sock);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("its directory " + base_ + "/nope does not exist"),
            std::string::npos)
      << s;
  const std::string file = base_ + "/file";
  ASSERT_EQ(::close(::creat(file.c_str(), 0600)), 0);
  EXPECT_EQ(Check(file + "/pfmd.sock").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pfm
