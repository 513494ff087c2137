// How pfmctl reaches a daemon: the socket the user named, the system one, or
// an embedded pfmd it starts on a private per-user socket.
#ifndef PFM_USERSPACE_PFMCTL_CONNECT_H_
#define PFM_USERSPACE_PFMCTL_CONNECT_H_

#include <string>

#include "absl/status/statusor.h"
#include "pfm/client.h"
#include "userspace/pfmctl/context.h"

namespace pfm {

// Connects to the daemon: the --socket flag or $PFMD_SOCKET if given
// (UNAVAILABLE if nothing answers there); otherwise /run/pfmd.sock, then the
// per-user private socket, starting an embedded pfmd there if none answers.
// Every connection passes Client::Connect's check of the server's uid; the
// private socket is used only once PrivateSocketPath accepted it.
absl::StatusOr<Client> ConnectOrStart(const CliContext& ctx,
                                      std::string* path_used);

// ConnectOrStart for commands that do not show the path.
absl::StatusOr<Client> Connect(const CliContext& ctx);

// The daemon's driver ("host", "sim"), from its `status` reply (checked:
// INTERNAL "pfmd reply: status: ..." when malformed).
absl::StatusOr<std::string> DaemonDriver(Client& c);

// The per-user private socket of the embedded daemon:
// $XDG_RUNTIME_DIR/pfmd/pfmd.sock, else /tmp/pfmd-$UID/pfmd.sock. Before
// anything connects there or starts a daemon there, its directory is checked
// with lstat (created 0700 if missing): it must be a real directory owned by
// getuid() with no group or other permission bits, and the socket, if it
// exists, a socket owned by getuid(). Otherwise PERMISSION_DENIED naming the
// file, the owner and the mode found: someone else could be serving a fake
// daemon there.
absl::StatusOr<std::string> PrivateSocketPath();

// pfmctl's own argv (main's), which an embedded daemon overwrites so that
// `ps` shows it as "pfmd (embedded) --socket PATH", not as the pfmctl
// command that started it. Without it only the thread name changes.
void SetProcessArgv(int argc, char** argv);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_CONNECT_H_
