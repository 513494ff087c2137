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
// (pfmd's effective uid). The path is resolved a component at a time, as
// the kernel resolves it, and on the way:
//   1. every symbolic link met, in the path as given or inside a link's
//      target, is owned by root or `self` (so /var/run -> /run is
//      followed; a link planted by another user is not);
//   2. every directory reached, from /, is owned by root or `self`, and is
//      not writable by group or others unless it has the sticky bit (/tmp:
//      there only an entry's owner may rename or remove it, and the next
//      directory's owner is judged in turn);
//   3. the socket's own directory is not writable by group or others even
//      with the sticky bit (anyone could take the socket's name first).
// Since nobody else can change what was judged, the path means the same
// when pfmd binds it. The socket's own name is not judged here
// (Server::Listen: only a stale socket is replaced). The idea is OpenSSH's
// StrictModes for a user's key files, applied to a daemon's socket.
// FAILED_PRECONDITION naming the component, its owner and mode, and the
// rule it breaks; NOT_FOUND for a directory that does not exist;
// UNAVAILABLE when it cannot be inspected. Changes nothing.
absl::Status CheckSocketDirectory(const std::string& socket_path, uid_t self);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_SOCKET_DIR_H_
