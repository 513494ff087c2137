// Whether the directories above pfmd's socket can be trusted: who may
// change them decides what answers at the socket's path (and, for a pfmd
// running as root, where root creates and removes a file).
#ifndef PFM_USERSPACE_PFMD_SOCKET_DIR_H_
#define PFM_USERSPACE_PFMD_SOCKET_DIR_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace pfm {

// The directory holding `socket_path` (its parent; "." for a bare name),
// and every directory above it, may be changed only by root or by `self`
// (pfmd's effective uid):
//   1. every symbolic link among the path's components as given is owned by
//      root or `self` (so /var/run -> /run is followed; a link planted by
//      another user is not);
//   2. every directory of the resolved path, from /, is owned by root or
//      `self`, and is not writable by group or others unless it has the
//      sticky bit (/tmp: there only an entry's owner may rename or remove
//      it, and the next directory's owner is checked by this same rule).
// The socket's own name is not judged here (Server::Listen: only a stale
// socket is replaced). The same rule as OpenSSH's StrictModes applies to a
// user's key files, applied to a daemon's socket directory.
// FAILED_PRECONDITION naming the component, its owner and mode, and the
// rule it breaks; NOT_FOUND for a directory that does not exist;
// UNAVAILABLE when it cannot be inspected. Changes nothing.
absl::Status CheckSocketDirectory(const std::string& socket_path, uid_t self);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_SOCKET_DIR_H_
