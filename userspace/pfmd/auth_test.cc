#include "userspace/pfmd/auth.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace pfm {
namespace {

constexpr uid_t kNobody = 65534;

Peer Unprivileged(uid_t uid, gid_t gid) {
  Peer p;
  p.uid = uid;
  p.gid = gid;
  return p;
}

Peer Self() { return Unprivileged(::getuid(), ::getgid()); }

TEST(Auth, SameUidAndGidMayTraceItsOwnProcess) {
  EXPECT_TRUE(MayTraceTask(Self(), ::getpid()).ok());
}

TEST(Auth, OtherUidIsDeniedNamingTheRule) {
  if (::getuid() == kNobody) GTEST_SKIP() << "running as nobody";
  absl::Status s = MayTraceTask(Unprivileged(kNobody, kNobody), ::getpid());
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("same uid and gid"), std::string::npos) << s;
}

TEST(Auth, SameUidOtherGidIsDenied) {
  // The setgid-program case: every gid of the task must be the peer's.
  absl::Status s = MayTraceTask(Unprivileged(::getuid(), ::getgid() + 1), ::getpid());
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
}

TEST(Auth, PrivilegedPeerMayTraceAnythingAndKernelMode) {
  Peer admin = Unprivileged(kNobody, kNobody);
  EXPECT_EQ(MayTracePrivileged(admin, "kernel tracing").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(admin.TracerCredentials().has_value());
  admin.admin = true;
  EXPECT_TRUE(MayTracePrivileged(admin, "x").ok());
  EXPECT_TRUE(MayTraceTask(admin, ::getpid()).ok());
  EXPECT_FALSE(admin.TracerCredentials().has_value());
}

TEST(Auth, MissingProcessIsNotFound) {
  Peer root;
  root.admin = true;
  EXPECT_EQ(MayTraceTask(root, 0x3ffffff0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenTraceTarget(root, 0x3ffffff0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenTraceTarget(root, -4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Auth, PidfdSeesTheTargetExit) {
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  auto fd = OpenTraceTarget(Self(), child);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(PidfdAlive(fd->get()));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(PidfdAlive(fd->get()));
}

TEST(Auth, AdminGroupByNumberAndUnknownName) {
  absl::StatusOr<AuthPolicy> p = MakeAuthPolicy("4242");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->admin_gid, 4242u);
  EXPECT_FALSE(MakeAuthPolicy("")->admin_gid.has_value());
  EXPECT_EQ(MakeAuthPolicy("no-such-group-pfm").status().code(),
            absl::StatusCode::kNotFound);
}

// A listening socket; a forked child runs `become` then connects. Returns
// the peer pfmd would see.
absl::StatusOr<Peer> PeerOfChild(const AuthPolicy& policy,
                                 void (*become)()) {
  char dir[] = "/tmp/pfm-auth-XXXXXX";
  if (::mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp");
  ::chmod(dir, 0755);
  const std::string path = std::string(dir) + "/s";
  int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  const auto cleanup = [&] {
    ::close(lfd);
    ::unlink(path.c_str());
    ::rmdir(dir);
  };
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::chmod(path.c_str(), 0666) != 0 || ::listen(lfd, 4) != 0) {
    cleanup();
    return absl::InternalError("bind/listen");
  }
  const pid_t child = ::fork();
  if (child < 0) {
    cleanup();
    return absl::InternalError("fork");
  }
  if (child == 0) {
    become();
    int c = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) ::_exit(3);
    char b;
    (void)!::read(c, &b, 1);  // until the parent has looked
    ::_exit(0);
  }
  // The child may fail before it connects: never wait for it unbounded.
  pollfd pl{lfd, POLLIN, 0};
  int cfd = ::poll(&pl, 1, 10000) == 1 ? ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC)
                                        : -1;
  absl::StatusOr<Peer> peer = PeerFromSocket(cfd, policy);
  ::close(cfd);
  int st = 0;
  ::waitpid(child, &st, 0);
  cleanup();
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return absl::InternalError("the child could not connect");
  return peer;
}

void BecomeNobody() {
  if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 ||
      ::setuid(kNobody) != 0)
    ::_exit(2);
}

// Finding 1 of the security review: a user namespace makes its creator
// "root" with every capability inside it. The socket reports the uid as the
// daemon's namespace sees it.
void BecomeRootOfOwnUserNamespace() {
  BecomeNobody();
  // setuid() made this process non-dumpable, which hides its own uid_map.
  ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  if (::unshare(CLONE_NEWUSER) != 0) ::_exit(4);
  int fd = ::open("/proc/self/setgroups", O_WRONLY);
  if (fd >= 0) {
    (void)!::write(fd, "deny", 4);
    ::close(fd);
  }
  fd = ::open("/proc/self/uid_map", O_WRONLY);
  if (fd < 0 || ::write(fd, "0 65534 1", 9) != 9) ::_exit(5);
  ::close(fd);
  fd = ::open("/proc/self/gid_map", O_WRONLY);
  if (fd < 0 || ::write(fd, "0 65534 1", 9) != 9) ::_exit(6);
  ::close(fd);
  if (::getuid() != 0) ::_exit(7);
}

TEST(Auth, PeerCredentialsComeFromTheSocket) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become uid 65534";
  absl::StatusOr<Peer> p = PeerOfChild(AuthPolicy{}, &BecomeNobody);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->uid, kNobody);
  EXPECT_EQ(p->gid, kNobody);
  EXPECT_FALSE(p->privileged());
  AuthPolicy admins;
  admins.admin_gid = kNobody;
  p = PeerOfChild(admins, &BecomeNobody);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->privileged());
}

TEST(Auth, RootOfAUserNamespaceIsNotPrivileged) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become uid 65534";
  absl::StatusOr<Peer> p = PeerOfChild(AuthPolicy{}, &BecomeRootOfOwnUserNamespace);
  ASSERT_TRUE(p.ok()) << p.status() << " (user namespaces unavailable?)";
  EXPECT_EQ(p->uid, kNobody);
  EXPECT_FALSE(p->privileged());
  EXPECT_EQ(MayTracePrivileged(*p, "a CPU-wide session").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(MayTraceTask(*p, 1).code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace pfm
