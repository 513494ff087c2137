// pfmd's transport: a Unix stream socket served with Boost.Asio on one
// thread. Reads SO_PEERCRED at accept, decodes frames, hands each request to
// the Service and writes the reply (with fds) back.
//
// A malformed frame (bad JSON) gets an INVALID_ARGUMENT reply and the
// connection stays; an oversized frame gets an error reply and the connection
// is closed (the stream can't be resynchronised). One bad client never
// affects another.
#ifndef PFM_USERSPACE_PFMD_SERVER_H_
#define PFM_USERSPACE_PFMD_SERVER_H_

#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "absl/status/status.h"
#include "userspace/pfmd/service.h"

namespace pfm {

class Server {
 public:
  Server(boost::asio::io_context& io, Service& service);
  ~Server();

  // Binds and listens on `path` with file mode `mode`. A stale socket file
  // (nothing answers) is replaced; a live daemon there is ALREADY_EXISTS.
  absl::Status Listen(const std::string& path, uint32_t mode);
  // Stops accepting, closes every connection (their sessions end) and
  // removes the socket file.
  void Stop();

  size_t connections() const;

 private:
  class Connection;
  void Accept();

  boost::asio::io_context& io_;
  Service& service_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  std::string path_;
  ConnectionId next_id_ = 1;
  std::map<ConnectionId, std::shared_ptr<Connection>> conns_;
};

// Runs a daemon in this process until SIGTERM/SIGINT or idle exit: builds the
// machine description, the service and the server. Returns the exit code.
// If `ready_fd` >= 0, writes one byte to it once listening (pfmctl's embedded
// start waits on it) and closes it.
int RunPfmd(const PfmdConfig& config, int ready_fd = -1);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_SERVER_H_
