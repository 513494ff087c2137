#include "userspace/pfmd/errno_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pfm {

absl::Status ErrnoToStatus(int err, absl::string_view message) {
  if (err >= 0) return absl::OkStatus();
  std::string msg = message.empty() ? std::string(strerror(-err))
                                    : std::string(message);
  switch (-err) {
    case EINVAL:
    case E2BIG:
    case ERANGE:
      return absl::InvalidArgumentError(msg);
    case ENOSPC:
    case EBUSY:
    case ENOMEM:
    case EDQUOT:
    case EMFILE:
      return absl::ResourceExhaustedError(msg);
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(msg);
    case ENOENT:
    case ESRCH:
      return absl::NotFoundError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EOPNOTSUPP:
    case ENODEV:
      return absl::UnimplementedError(msg);
    case EAGAIN:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(absl::StrCat(msg, " (errno ", -err, ")"));
  }
}

}  // namespace pfm
