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
  // Above it, /tmp: root's, world-writable with the sticky bit.
  EXPECT_TRUE(Check("/pfmd.sock").ok());
  // "..", "." and repeated slashes resolve as the kernel resolves them.
  EXPECT_TRUE(Check(d + "/../run/.//pfmd.sock").ok()) << Check(d + "/../run/.//pfmd.sock");
}

TEST_F(SocketDirTest, ResolvesARelativePathFromTheWorkingDirectory) {
  const std::string d = Mkdir("run");
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(d.c_str()), 0);
  const absl::Status bare = Check("pfmd.sock");
  const absl::Status up = Check("../run/pfmd.sock");
  const absl::Status missing = Check("nope/pfmd.sock");
  ASSERT_EQ(::chdir(cwd), 0);
  EXPECT_TRUE(bare.ok()) << bare;
  EXPECT_TRUE(up.ok()) << up;
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
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
  // A link of root's whose target goes through that link is judged all the
  // way: the other uid's link is found inside it.
  const std::string outer = base_ + "/outer";
  ASSERT_EQ(::symlink("link/sub", outer.c_str()), 0);
  const absl::Status inner = Check(outer + "/pfmd.sock");
  EXPECT_EQ(inner.code(), absl::StatusCode::kFailedPrecondition) << inner;
  EXPECT_NE(inner.message().find(link + " is a symbolic link owned by uid 65534"),
            std::string::npos)
      << inner;
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
  // Judged in order, from /: the group-writable directory is refused
  // before what lies below it is looked at.
  EXPECT_EQ(Check(group + "/mine/pfmd.sock").code(), absl::StatusCode::kFailedPrecondition);
  Mkdir("group/mine");
  EXPECT_EQ(Check(group + "/mine/pfmd.sock").code(), absl::StatusCode::kFailedPrecondition);
  // Sticky: fine above the socket's directory, not as the socket's own
  // (as /tmp/pfmd.sock: anyone could take the name first).
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  const std::string mine = Mkdir("shared/mine");
  EXPECT_TRUE(Check(mine + "/pfmd.sock").ok()) << Check(mine + "/pfmd.sock");
  EXPECT_EQ(Check(sock),
            absl::FailedPreconditionError(
                "socket path " + sock + ": " + shared +
                " is a directory owned by uid " + std::to_string(::geteuid()) +
                ", mode 1777, writable by group or others, and it is the socket's own: "
                "another user could take the socket's name, so nothing was created"));
  EXPECT_EQ(Check("/tmp/pfmd.sock").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SocketDirTest, RefusesALoopOfLinks) {
  const std::string a = base_ + "/a", b = base_ + "/b";
  ASSERT_EQ(::symlink(b.c_str(), a.c_str()), 0);
  ASSERT_EQ(::symlink(a.c_str(), b.c_str()), 0);
  const absl::Status s = Check(a + "/pfmd.sock");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("more than 40 symbolic links"), std::string::npos) << s;
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
