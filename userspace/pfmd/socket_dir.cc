#include "userspace/pfmd/socket_dir.h"

#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace pfm {
namespace {

// As the kernel's limit on links followed in one lookup (MAXSYMLINKS).
constexpr int kMaxLinks = 40;

std::string Describe(const struct stat& st) {
  return absl::StrFormat("owned by uid %u, mode %04o", st.st_uid, st.st_mode & 07777);
}

void PushComponents(absl::string_view path, std::deque<std::string>* todo) {
  std::deque<std::string> parts;
  for (absl::string_view c : absl::StrSplit(path, '/', absl::SkipEmpty()))
    if (c != ".") parts.emplace_back(c);
  todo->insert(todo->begin(), parts.begin(), parts.end());
}

}  // namespace

absl::Status CheckSocketDirectory(const std::string& socket_path, uid_t self) {
  const auto trusted = [self](uid_t u) { return u == 0 || u == self; };
  const std::string who = self == 0 ? std::string("root") : absl::StrCat("root or uid ", self);
  const std::string what = absl::StrCat("socket path ", socket_path, ": ");
  const size_t slash = socket_path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".")
                          : slash == 0               ? std::string("/")
                                                     : socket_path.substr(0, slash);
  std::string start = dir;
  if (start[0] != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd) == nullptr)
      return absl::UnavailableError(
          absl::StrCat(what, "cannot read the working directory: ", strerror(errno)));
    start = absl::StrCat(cwd, "/", dir);
  }
  // The path is resolved here, a component at a time, as the kernel would
  // (links expanded where met, ".." to the parent of what was reached), so
  // that every link on the way, inside a link's target too, and every
  // directory reached is judged. `at` is the resolved directory so far (no
  // link in it), `at_st` what lstat said of it: the very observation that
  // is judged, so a name swapped between two looks is never judged by one
  // and used by the other.
  std::deque<std::string> todo;
  PushComponents(start, &todo);
  std::string at;
  struct stat at_st, st;
  // Judges `at`; `last`: as the socket's own directory.
  const auto judge = [&](bool last) -> absl::Status {
    if (!trusted(at_st.st_uid))
      return absl::FailedPreconditionError(absl::StrCat(
          what, at, " is a directory ", Describe(at_st),
          "; the socket's directories must be owned by ", who,
          " (their owner decides what answers there), so nothing was created"));
    const bool others_write = (at_st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    // Sticky (/tmp): only an entry's owner may rename or remove it, and
    // the next directory's owner is judged in turn; but in the socket's own
    // directory anyone could take the socket's name first.
    if (others_write && (last || (at_st.st_mode & S_ISVTX) == 0))
      return absl::FailedPreconditionError(absl::StrCat(
          what, at, " is a directory ", Describe(at_st), ", writable by group or others",
          last ? ", and it is the socket's own: another user could take the socket's name"
               : " without the sticky bit: another user could replace what is in it",
          ", so nothing was created"));
    return absl::OkStatus();
  };
  // Moves `at` to a directory already resolved ("/", or the parent of one
  // judged before) and judges it.
  const auto go_to = [&](std::string dir_path) -> absl::Status {
    at = std::move(dir_path);
    if (::lstat(at.c_str(), &at_st) != 0)
      return absl::UnavailableError(
          absl::StrCat(what, "cannot inspect ", at, ": ", strerror(errno)));
    if (!S_ISDIR(at_st.st_mode))
      return absl::FailedPreconditionError(
          absl::StrCat(what, at, " changed while it was being checked"));
    return judge(false);
  };
  int links = 0;
  if (absl::Status s = go_to("/"); !s.ok()) return s;
  while (!todo.empty()) {
    const std::string c = std::move(todo.front());
    todo.pop_front();
    if (c == "..") {
      if (absl::Status s = go_to(at.substr(0, std::max<size_t>(1, at.rfind('/')))); !s.ok())
        return s;
      continue;
    }
    const std::string next = at == "/" ? "/" + c : at + "/" + c;
    if (::lstat(next.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR)
        return absl::NotFoundError(absl::StrCat(what, "its directory ", dir,
                                                " does not exist (", next, ": ",
                                                strerror(errno), ")"));
      return absl::UnavailableError(
          absl::StrCat(what, "cannot inspect ", next, ": ", strerror(errno)));
    }
    if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      const ssize_t n = ::readlink(next.c_str(), target, sizeof target - 1);
      if (n <= 0)
        return absl::UnavailableError(
            absl::StrCat(what, "cannot read the link ", next, ": ", strerror(errno)));
      const absl::string_view to(target, static_cast<size_t>(n));
      if (!trusted(st.st_uid))
        return absl::FailedPreconditionError(absl::StrCat(
            what, next, " is a symbolic link ", Describe(st), " (to ", to,
            "); pfmd follows only links owned by ", who, ", so nothing was created"));
      if (++links > kMaxLinks)
        return absl::FailedPreconditionError(
            absl::StrCat(what, "more than ", kMaxLinks, " symbolic links on the way"));
      PushComponents(to, &todo);
      // A relative target is resolved from `at`, an absolute one from /.
      if (to[0] == '/')
        if (absl::Status s = go_to("/"); !s.ok()) return s;
      continue;
    }
    if (!S_ISDIR(st.st_mode))
      return absl::NotFoundError(absl::StrCat(what, next, " is not a directory"));
    at = next;
    at_st = st;
    if (absl::Status s = judge(false); !s.ok()) return s;
  }
  return judge(true);  // the socket's own directory, as last seen
}

}  // namespace pfm
