// Error detail for kernel/ calls: a negative errno plus one human sentence.
//
// kernel/ functions that can refuse take an optional ErrorDetail* and return
// `detail->Set(-ENOSPC, "...")` in one step, so the code and the message
// that explains it (which limit, who holds the resource) never drift apart.
// Fixed-size, no allocation; userspace/ turns (errno, message) into an
// absl::Status at its one boundary.
#ifndef PFM_KERNEL_UAPI_PFM_ERROR_H_
#define PFM_KERNEL_UAPI_PFM_ERROR_H_

#include <cstdarg>
#include <cstdio>

namespace pfm {

struct ErrorDetail {
  char message[256] = {};

  // Formats the message and returns `err` (a negative errno).
  __attribute__((format(printf, 3, 4))) int Set(int err, const char* fmt,
                                                ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    return err;
  }
};

// For call sites that take an optional detail: SetError(d, -EINVAL, "...").
__attribute__((format(printf, 3, 4))) inline int SetError(ErrorDetail* d,
                                                          int err,
                                                          const char* fmt,
                                                          ...) {
  if (d != nullptr) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->message, sizeof(d->message), fmt, ap);
    va_end(ap);
  }
  return err;
}

}  // namespace pfm

#endif  // PFM_KERNEL_UAPI_PFM_ERROR_H_
