#include "userspace/pfmd/socket_dir.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace pfm {
namespace {

std::string Describe(const struct stat& st) {
  return absl::StrFormat("owned by uid %u, mode %04o", st.st_uid, st.st_mode & 07777);
}

// "/a", "/a/b", ... for an absolute path ("/" alone: none).
std::vector<std::string> Prefixes(const std::string& abs) {
  std::vector<std::string> out;
  std::string at;
  for (absl::string_view c : absl::StrSplit(abs, '/', absl::SkipEmpty())) {
    if (c == ".") continue;
    at = absl::StrCat(at, "/", c);
    out.push_back(at);
  }
  return out;
}

absl::Status Missing(const std::string& socket_path, const std::string& dir,
                     const std::string& at, int err) {
  if (err == ENOENT || err == ENOTDIR)
    return absl::NotFoundError(absl::StrCat("socket path ", socket_path, ": its directory ",
                                            dir, " does not exist (", at, ": ",
                                            strerror(err), ")"));
  return absl::UnavailableError(absl::StrCat("socket path ", socket_path, ": cannot inspect ",
                                             at, ": ", strerror(err)));
}

}  // namespace

absl::Status CheckSocketDirectory(const std::string& socket_path, uid_t self) {
  const auto trusted = [self](uid_t u) { return u == 0 || u == self; };
  const std::string who = self == 0 ? std::string("root") : absl::StrCat("root or uid ", self);
  const size_t slash = socket_path.rfind('/');
  std::string dir = slash == std::string::npos ? std::string(".")
                    : slash == 0               ? std::string("/")
                                               : socket_path.substr(0, slash);
  std::string abs = dir;
  if (abs[0] != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd) == nullptr)
      return absl::UnavailableError(absl::StrCat(
          "socket path ", socket_path, ": cannot read the working directory: ",
          strerror(errno)));
    abs = absl::StrCat(cwd, "/", dir);
  }
  // 1. Links as given.
  struct stat st;
  for (const std::string& at : Prefixes(abs)) {
    if (::lstat(at.c_str(), &st) != 0) return Missing(socket_path, dir, at, errno);
    if (S_ISLNK(st.st_mode) && !trusted(st.st_uid)) {
      char target[PATH_MAX];
      const ssize_t n = ::readlink(at.c_str(), target, sizeof target - 1);
      return absl::FailedPreconditionError(absl::StrCat(
          "socket path ", socket_path, ": ", at, " is a symbolic link ", Describe(st),
          n > 0 ? absl::StrCat(" (to ", absl::string_view(target, static_cast<size_t>(n)), ")")
                : "",
          "; pfmd follows only links owned by ", who, ", so nothing was created"));
    }
  }
  // 2. The directories it resolves to, from /.
  char real[PATH_MAX];
  if (::realpath(abs.c_str(), real) == nullptr) return Missing(socket_path, dir, abs, errno);
  std::vector<std::string> dirs = {"/"};
  for (std::string& p : Prefixes(real)) dirs.push_back(std::move(p));
  for (const std::string& at : dirs) {
    if (::stat(at.c_str(), &st) != 0) return Missing(socket_path, dir, at, errno);
    if (!S_ISDIR(st.st_mode))
      return absl::NotFoundError(absl::StrCat("socket path ", socket_path, ": ", at,
                                              " is not a directory"));
    if (!trusted(st.st_uid))
      return absl::FailedPreconditionError(absl::StrCat(
          "socket path ", socket_path, ": ", at, " is a directory ", Describe(st),
          "; the socket's directories must be owned by ", who,
          " (their owner decides what answers there), so nothing was created"));
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
      return absl::FailedPreconditionError(absl::StrCat(
          "socket path ", socket_path, ": ", at, " is a directory ", Describe(st),
          ", writable by group or others without the sticky bit: another user could "
          "replace what is in it, so nothing was created"));
  }
  return absl::OkStatus();
}

}  // namespace pfm
