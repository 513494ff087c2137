// libpfm-bts client: a connection to pfmd.
//
// One Client is one Unix-socket connection; calls are synchronous
// request/reply. Not thread-safe: use one Client per thread. Sessions a
// client creates without "detached" end when the connection closes.
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_CLIENT_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_CLIENT_H_

#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pfm/unique_fd.h"

namespace pfm {

// The daemon's default socket, and the variable that overrides it.
inline constexpr char kDefaultSocket[] = "/run/pfmd.sock";
inline constexpr char kSocketEnv[] = "PFMD_SOCKET";

// absl code <-> the code names on the wire ("INVALID_ARGUMENT", ...).
std::string StatusCodeName(absl::StatusCode code);
absl::StatusCode StatusCodeFromName(const std::string& name);

class Client {
 public:
  struct Reply {
    boost::json::value result;
    std::vector<UniqueFd> fds;
  };

  // Connects to the daemon at `path`. UNAVAILABLE when nothing listens.
  // PERMISSION_DENIED when the listener (SO_PEERCRED) is neither this
  // process's real uid nor root: such a daemon could be anyone's fake, so
  // the connection is closed before a byte is sent. Connect itself sends
  // nothing; the first bytes on the wire are those of the first Call.
  static absl::StatusOr<Client> Connect(const std::string& path);

  // Sends {"op": op, ...args} and waits for the reply. A refusal comes back
  // as the daemon's status (code and message); fds come with the reply.
  absl::StatusOr<Reply> Call(const std::string& op,
                             boost::json::object args = {});

  int fd() const { return fd_.get(); }

 private:
  explicit Client(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_CLIENT_H_
