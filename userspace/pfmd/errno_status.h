// The one place where kernel/'s negative errno becomes an absl::Status.
#ifndef PFM_USERSPACE_PFMD_ERRNO_STATUS_H_
#define PFM_USERSPACE_PFMD_ERRNO_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernel/uapi/pfm_error.h"

namespace pfm {

// `err` is 0 or a negative errno; `message` says what was wrong (kernel/'s
// ErrorDetail). 0 gives OK.
absl::Status ErrnoToStatus(int err, absl::string_view message);
inline absl::Status ErrnoToStatus(int err, const ErrorDetail& d) {
  return ErrnoToStatus(err, d.message);
}

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_ERRNO_STATUS_H_
