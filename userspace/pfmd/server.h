// pfmd's transport: a Unix stream socket served with Boost.Asio on one
// thread. Reads SO_PEERCRED at accept, decodes frames, hands each request to
// the Service and queues the reply (with fds) for writing.
//
// A malformed frame (bad JSON) gets an INVALID_ARGUMENT reply and the
// connection stays; an oversized frame gets an error reply and the connection
// is closed (the stream can't be resynchronised). One bad client never
// affects another:
//   - replies are written without blocking, from a bounded per-connection
//     queue; a connection stops being read while its queue is long, and is
//     dropped when its replies make no progress for kReplyStallTimeout (or
//     the queue passes its hard bound);
//   - connections are capped per uid (uid 0 exempt) and in all; one over a
//     cap gets a RESOURCE_EXHAUSTED reply and is closed;
//   - accept() failing for lack of fds or memory pauses accepting for
//     kAcceptBackoff instead of retrying at once.
// The limits and their reasons: docs/pfmd.md, "Limits".
#ifndef PFM_USERSPACE_PFMD_SERVER_H_
#define PFM_USERSPACE_PFMD_SERVER_H_

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "absl/status/status.h"
#include "userspace/pfmd/config.h"
#include "userspace/pfmd/service.h"

namespace pfm {

// Replies waiting to be written to one connection. Past the pause bound the
// connection's requests are not read (so a client that pipelines requests
// and never reads cannot grow its queue); past the hard bound it is dropped.
// A reply is at most kMaxFrameBytes (1 MiB), so pausing keeps the queue
// under the hard bound: that one is a backstop.
inline constexpr size_t kPauseReadingReplies = 16;
inline constexpr size_t kPauseReadingBytes = 1 << 20;
inline constexpr size_t kMaxQueuedReplies = 64;
inline constexpr size_t kMaxQueuedReplyBytes = 4 << 20;
// Requests of one connection handled in one turn of the event loop. What
// else it already sent waits behind every other ready connection (and the
// listener), so a client that pipelines thousands of requests in one write
// delays another client by at most this many of its requests, not by all.
inline constexpr size_t kRequestsPerTurn = 16;
// A connection with replies waiting that the peer has not let us write for
// this long is dropped: it stopped reading.
inline constexpr std::chrono::milliseconds kReplyStallTimeout{5000};
// accept() failing with EMFILE/ENFILE/ENOBUFS/ENOMEM (or anything else)
// stops accepting for this long; the pending connections wait in the
// listen backlog.
inline constexpr std::chrono::milliseconds kAcceptBackoff{100};
// The heap's free pages go back to the kernel this long after the first of
// a burst of connection closes (Server::Closed).
inline constexpr std::chrono::milliseconds kTrimDelay{500};
// A refused connection is kept half-closed this long so its client can send
// its first request and still read the refusal (closing at once would make
// that send fail with EPIPE). At most kMaxLingeringRefusals at a time; more
// are closed at once.
inline constexpr std::chrono::milliseconds kRefusalLinger{1000};
inline constexpr size_t kMaxLingeringRefusals = 16;

// Request bytes pfmd holds for one uid's connections (frames in progress
// and read but not yet handled), over all of them. Without it, a uid's 64
// connections could each park a 1 MiB frame cut short. A connection whose
// read passes it is refused (RESOURCE_EXHAUSTED) and closed. Not uid 0 (as
// the connection cap).
inline constexpr size_t kMaxHeldInputPerUid = 8 << 20;

// Connection caps (docs/pfmd.md, "Limits").
struct ServerLimits {
  int max_connections = 1024;         // --max-connections, all uids
  int max_connections_per_uid = 64;   // --max-connections-per-uid; not uid 0

  static ServerLimits FromConfig(const PfmdConfig& config);
};

class Server {
 public:
  Server(boost::asio::io_context& io, Service& service,
         ServerLimits limits = {});
  ~Server();

  // Binds and listens on `path` with file mode `mode`. A stale socket file
  // (nothing answers) is replaced; a live daemon there is ALREADY_EXISTS;
  // anything at `path` that is not a socket (a symlink, a regular file, ...)
  // is FAILED_PRECONDITION and left alone.
  // With systemd socket activation (LISTEN_PID is this process, LISTEN_FDS
  // >= 1) fd 3 is served instead and `path` is unused; fd 3 must be a
  // listening AF_UNIX stream socket, else FAILED_PRECONDITION.
  absl::Status Listen(const std::string& path, uint32_t mode);
  // Stops accepting, closes every connection (their sessions end) and
  // removes the socket file.
  void Stop();

  size_t connections() const;

 private:
  class Connection;
  struct Refusal;
  void Accept();
  // Why a new connection of `uid` may not open; OK if it may.
  absl::Status CheckCaps(uid_t uid) const;
  // Sends `why` as the one reply of `socket` and closes it (after a linger).
  void Refuse(boost::asio::local::stream_protocol::socket socket,
              const absl::Status& why, const Peer& peer);
  // A connection finished: it no longer counts toward the caps.
  void Closed(ConnectionId id, uid_t uid);

  boost::asio::io_context& io_;
  Service& service_;
  const ServerLimits limits_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer accept_timer_;
  // Gives the heap's free pages back to the kernel (malloc_trim) a moment
  // after connections close, once per burst of closes: see Closed.
  boost::asio::steady_timer trim_timer_;
  bool trim_pending_ = false;
  bool stopped_ = false;  // Stop ran: nothing more is armed
  bool accept_backing_off_ = false;  // one log line per back-off episode
  std::string path_;
  ConnectionId next_id_ = 1;
  std::map<ConnectionId, std::shared_ptr<Connection>> conns_;
  std::map<uid_t, int> conns_per_uid_;
  std::map<uid_t, size_t> held_input_per_uid_;  // see kMaxHeldInputPerUid
  uint64_t next_refusal_ = 1;
  std::map<uint64_t, std::shared_ptr<Refusal>> refusals_;
  // Refusals are logged at most once per second, with a count of the rest.
  std::chrono::steady_clock::time_point last_refusal_log_{};
  uint64_t unlogged_refusals_ = 0;
};

// Runs a daemon in this process until SIGTERM/SIGINT or idle exit: builds the
// machine description, the service and the server. Returns the exit code.
// If `ready_fd` >= 0, writes one byte to it once listening (pfmctl's embedded
// start waits on it) and closes it.
int RunPfmd(const PfmdConfig& config, int ready_fd = -1);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_SERVER_H_
