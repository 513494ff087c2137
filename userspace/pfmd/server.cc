// Over 600 lines, on purpose: a connection's reply queue, its pause and
// stall rules, the connection caps with their lingering refusals and the
// accept back-off are one state machine on one asio thread, and read best
// together; split it when a second transport appears.
#include "userspace/pfmd/server.h"
#include "userspace/pfmd/socket_dir.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernel/drivers/machine.h"
#include "pfm/client.h"
#include "pfm/events.h"
#include "pfm/wire.h"
#include "userspace/pfmd/auth.h"
#include "userspace/pfmd/errno_status.h"
#include "userspace/pfmd/metrics.h"
#include "kernel/drivers/host_machine.h"

namespace pfm {

namespace asio = boost::asio;
using asio::local::stream_protocol;
using SteadyClock = std::chrono::steady_clock;

namespace {

// A reply's JSON body, as the wire protocol has it (pfm/wire.h). The fds
// of an error reply are not passed.
std::string ReplyBody(const ServiceReply& r) {
  boost::json::object out;
  if (r.status.ok()) {
    out["ok"] = true;
    out["result"] = r.result;
    out["fds"] = r.fds.size();
  } else {
    out["ok"] = false;
    out["code"] = StatusCodeName(r.status.code());
    out["message"] = std::string(r.status.message());
  }
  return boost::json::serialize(out);
}

}  // namespace

ServerLimits ServerLimits::FromConfig(const PfmdConfig& config) {
  ServerLimits l;
  l.max_connections = config.max_connections;
  l.max_connections_per_uid = config.max_connections_per_uid;
  return l;
}

// One client. Owned by Server::conns_ and by its pending handlers (each
// captures `self`), so every path into Finish runs inside a handler that
// keeps the object alive until it returns.
//
// Replies are written with non-blocking sendmsg from queue_: a reply's fds
// ride on the first byte of its frame and stay open until that byte is sent,
// one frame per sendmsg, so the byte stream and where the fds sit are what
// SendFrame produced (clients cannot tell). While the queue is at or over
// the pause bound no request is taken, neither from the socket nor from
// frames already decoded.
class Server::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server& server, ConnectionId id, stream_protocol::socket socket,
             Peer peer)
      : server_(server),
        id_(id),
        socket_(std::move(socket)),
        peer_(std::move(peer)),
        stall_timer_(server.io_) {}

  uid_t uid() const { return peer_.uid; }

  void Start() { Read(); }
  // Closes the socket; pending handlers run with operation_aborted.
  void Close() {
    boost::system::error_code ec;
    socket_.close(ec);
    stall_timer_.cancel();
  }

 private:
  struct Outgoing {
    std::string bytes;          // the whole frame: length prefix and body
    std::vector<UniqueFd> fds;  // passed with bytes[0]; closed once sent
    size_t sent = 0;
  };

  // Brings the uid's held-input total up to date with the decoder's
  // allocation (what it pins, not what it has in use); growing past
  // kMaxHeldInputPerUid (uid 0 exempt) is the refusal to send.
  absl::Status AccountHeldInput() {
    const size_t now = decoder_.capacity();
    if (now == held_accounted_) return absl::OkStatus();
    const bool grew = now > held_accounted_;
    auto it = server_.held_input_per_uid_.try_emplace(peer_.uid, 0).first;
    it->second = it->second - held_accounted_ + now;
    held_accounted_ = now;
    const size_t total = it->second;
    if (total == 0) server_.held_input_per_uid_.erase(it);
    if (!grew || peer_.uid == 0 || total <= kMaxHeldInputPerUid) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        "uid ", peer_.uid, " has ", total, " bytes of requests in progress in pfmd (limit ",
        kMaxHeldInputPerUid, " bytes over its connections, kMaxHeldInputPerUid)"));
  }

  bool Paused() const {
    return queue_.size() >= kPauseReadingReplies ||
           queued_bytes_ >= kPauseReadingBytes;
  }

  // async_read_some is a recv without a control buffer: fds a client
  // attaches (SCM_RIGHTS) are released by the kernel, never installed here.
  void Read() {
    if (reading_ || finished_ || closing_) return;
    reading_ = true;
    auto self = shared_from_this();
    socket_.async_read_some(
        asio::buffer(buf_), [this, self](boost::system::error_code ec,
                                         size_t n) {
          reading_ = false;
          if (finished_) return;
          if (ec == asio::error::eof) {
            // The client may have half-closed after its last request and
            // still read the replies: they go out first.
            return CloseWhenFlushed();
          }
          if (ec) return Finish();
          absl::Status s = decoder_.Feed(buf_.data(), n);
          if (s.ok()) s = AccountHeldInput();
          if (!s.ok()) {
            // No more requests from it: what it sent is dropped now, not
            // when its last reply is written (the uid's bound is freed).
            decoder_.Reset();
            (void)AccountHeldInput();
            Reply(ServiceReply{s, {}, {}});
            return CloseWhenFlushed();
          }
          HandleFrames();
        });
  }

  // Takes decoded requests until none is left or the queue is too long,
  // then reads more (or waits for the queue to drain: the write handler in
  // WaitWritable resumes).
  void HandleFrames() {
    if (turn_posted_) return;  // the posted turn goes on from here
    std::string body;
    size_t handled = 0;
    while (!finished_ && !closing_ && !Paused() && handled < kRequestsPerTurn &&
           decoder_.Next(&body)) {
      HandleFrame(body);
      ++handled;
    }
    (void)AccountHeldInput();  // only down: frames were taken
    if (finished_ || closing_ || Paused()) return;
    if (handled == kRequestsPerTurn) {
      // The budget of this turn is spent: the rest after the others'.
      turn_posted_ = true;
      auto self = shared_from_this();
      asio::post(socket_.get_executor(), [this, self] {
        turn_posted_ = false;
        if (!finished_) HandleFrames();
      });
      return;
    }
    Read();
  }

  void HandleFrame(const std::string& body) {
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(body, ec);
    if (ec || !v.is_object()) {
      return Reply(ServiceReply{
          absl::InvalidArgumentError(
              ec ? absl::StrCat("request is not valid JSON: ", ec.message())
                 : "request is not a JSON object"),
          {},
          {}});
    }
    Reply(server_.service_.Handle(id_, peer_, v.as_object()));
  }

  void Reply(ServiceReply r) {
    std::string body = ReplyBody(r);
    absl::StatusCode sent = r.status.code();
    if (body.size() > kMaxFrameBytes ||
        r.fds.size() > static_cast<size_t>(kMaxFdsPerFrame)) {
      // The client would refuse such a frame; say so instead.
      body = ReplyBody(ServiceReply{
          absl::InternalError(absl::StrCat(
              "reply of ", body.size(), " bytes with ", r.fds.size(),
              " fds exceeds the frame limits (", kMaxFrameBytes, " bytes, ",
              kMaxFdsPerFrame, " fds)")),
          {},
          {}});
      sent = absl::StatusCode::kInternal;
      r.fds.clear();
    }
    server_.service_.refusals().Count(sent);
    if (!r.status.ok()) r.fds.clear();
    if (queue_.empty()) last_progress_ = SteadyClock::now();
    Outgoing out{EncodeFrame(body), std::move(r.fds)};
    queued_bytes_ += out.bytes.size();
    queue_.push_back(std::move(out));
    if (queue_.size() > kMaxQueuedReplies ||
        queued_bytes_ > kMaxQueuedReplyBytes) {
      std::cerr << "pfmd: dropped connection " << id_ << " (uid " << peer_.uid
                << ", pid " << peer_.pid << "): " << queue_.size()
                << " replies, " << queued_bytes_
                << " bytes queued (limit " << kMaxQueuedReplies
                << " replies, " << kMaxQueuedReplyBytes << " bytes)\n";
      return Finish();
    }
    if (!writing_) Flush();
  }

  // Writes queued frames until the queue is empty or the socket is full (then
  // waits for it to be writable). A send error means the peer is gone.
  void Flush() {
    while (!queue_.empty()) {
      Outgoing& out = queue_.front();
      iovec iov{out.bytes.data() + out.sent, out.bytes.size() - out.sent};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
      if (!out.fds.empty()) {
        const size_t len = sizeof(int) * out.fds.size();
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(len);
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(len);
        for (size_t i = 0; i < out.fds.size(); ++i) {
          const int fd = out.fds[i].get();
          std::memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof(int));
        }
      }
      const ssize_t n = ::sendmsg(socket_.native_handle(), &msg,
                                  MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        out.sent += static_cast<size_t>(n);
        out.fds.clear();  // the kernel holds its own references now
        queued_bytes_ -= static_cast<size_t>(n);
        last_progress_ = SteadyClock::now();
        if (out.sent == out.bytes.size()) queue_.pop_front();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return WaitWritable();
      return Finish();
    }
    if (closing_) Finish();
  }

  void WaitWritable() {
    if (!writing_) {
      writing_ = true;
      auto self = shared_from_this();
      socket_.async_wait(stream_protocol::socket::wait_write,
                         [this, self](boost::system::error_code ec) {
                           writing_ = false;
                           if (finished_) return;
                           if (ec) return Finish();
                           Flush();
                           if (finished_ || closing_ || reading_ || Paused())
                             return;
                           HandleFrames();  // resume what the queue paused
                         });
    }
    if (!stall_timer_armed_) ArmStallTimer();
  }

  // Drops the connection once its replies have made no progress for
  // kReplyStallTimeout: the peer stopped reading.
  void ArmStallTimer() {
    stall_timer_armed_ = true;
    stall_timer_.expires_at(last_progress_ + kReplyStallTimeout);
    auto self = shared_from_this();
    stall_timer_.async_wait([this, self](boost::system::error_code ec) {
      stall_timer_armed_ = false;
      if (ec || finished_ || queue_.empty()) return;
      if (SteadyClock::now() - last_progress_ < kReplyStallTimeout)
        return ArmStallTimer();
      std::cerr << "pfmd: dropped connection " << id_ << " (uid " << peer_.uid
                << ", pid " << peer_.pid << "): " << queue_.size()
                << " replies (" << queued_bytes_
                << " bytes) unread for " << kReplyStallTimeout.count()
                << " ms\n";
      Finish();
    });
  }

  // Stops taking requests; the connection ends once its queue is written.
  void CloseWhenFlushed() {
    closing_ = true;
    if (queue_.empty()) Finish();
  }

  void Finish() {
    if (finished_) return;
    finished_ = true;
    Close();
    queue_.clear();  // closes fds never sent
    queued_bytes_ = 0;
    decoder_.Reset();
    (void)AccountHeldInput();
    server_.service_.Disconnected(id_);
    server_.Closed(id_, peer_.uid);
  }

  Server& server_;
  const ConnectionId id_;
  stream_protocol::socket socket_;
  const Peer peer_;
  FrameDecoder decoder_;
  size_t held_accounted_ = 0;  // decoder_.capacity() as counted for the uid
  std::array<char, 16384> buf_;
  std::deque<Outgoing> queue_;
  size_t queued_bytes_ = 0;  // not yet sent, over all of queue_
  // When the queue last moved (a byte sent, or a reply into an empty queue).
  SteadyClock::time_point last_progress_;
  asio::steady_timer stall_timer_;
  bool stall_timer_armed_ = false;
  bool reading_ = false;   // an async_read_some is pending
  bool turn_posted_ = false;  // HandleFrames posted to go on (kRequestsPerTurn)
  bool writing_ = false;   // an async_wait(write) is pending
  bool closing_ = false;   // no more requests; Finish once flushed
  bool finished_ = false;
};

// A refused connection, half-closed after its one reply, until the client
// has sent its request (or hung up) or kRefusalLinger passes.
struct Server::Refusal {
  Refusal(stream_protocol::socket s, asio::io_context& io)
      : socket(std::move(s)), timer(io) {}
  stream_protocol::socket socket;
  asio::steady_timer timer;
};

Server::Server(asio::io_context& io, Service& service, ServerLimits limits)
    : io_(io),
      service_(service),
      limits_(limits),
      acceptor_(io),
      accept_timer_(io),
      trim_timer_(io) {}

Server::~Server() { Stop(); }

size_t Server::connections() const { return conns_.size(); }

namespace {

std::string FamilyName(int domain) {
  switch (domain) {
    case AF_UNIX: return "AF_UNIX";
    case AF_INET: return "AF_INET";
    case AF_INET6: return "AF_INET6";
    case AF_NETLINK: return "AF_NETLINK";
    default: return absl::StrCat("address family ", domain);
  }
}

// systemd socket activation (sd_listen_fds(3)): LISTEN_PID names this
// process and LISTEN_FDS >= 1 means fd 3 is a listening socket already bound
// by the .socket unit, which owns its path and mode. Returns -1 when no fd
// is passed to this process. An fd 3 that is not a listening AF_UNIX stream
// socket is FAILED_PRECONDITION: serving it, or falling back to --socket,
// would hide a broken unit.
absl::StatusOr<int> InheritedListenFd() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  if (pid == nullptr || fds == nullptr) return -1;
  if (std::strtol(pid, nullptr, 10) != ::getpid() ||
      std::strtol(fds, nullptr, 10) < 1)
    return -1;
  constexpr int kFd = 3;
  const std::string what =
      "socket activation (LISTEN_PID, LISTEN_FDS): fd 3 must be a listening "
      "AF_UNIX stream socket, but it is ";
  int domain = 0, type = 0, listening = 0;
  socklen_t len = sizeof(domain);
  if (::getsockopt(kFd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat(what, "not a socket (", strerror(errno), ")"));
  if (domain != AF_UNIX)
    return absl::FailedPreconditionError(
        absl::StrCat(what, "an ", FamilyName(domain), " socket"));
  len = sizeof(type);
  if (::getsockopt(kFd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
      type != SOCK_STREAM)
    return absl::FailedPreconditionError(absl::StrCat(
        what, "an AF_UNIX ",
        type == SOCK_DGRAM       ? "datagram"
        : type == SOCK_SEQPACKET ? "seqpacket"
                                 : absl::StrCat("type ", type),
        " socket"));
  len = sizeof(listening);
  if (::getsockopt(kFd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 ||
      listening == 0)
    return absl::FailedPreconditionError(
        absl::StrCat(what, "an AF_UNIX stream socket that is not listening"));
  return kFd;
}

// What lstat found at a path, for a refusal ("a regular file").
std::string FileKind(const std::string& path, const struct stat& st) {
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
    return n < 0 ? "a symbolic link"
                 : absl::StrCat("a symbolic link to ",
                                std::string(target, static_cast<size_t>(n)));
  }
  if (S_ISREG(st.st_mode)) return "a regular file";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  return "not a socket";
}

}  // namespace

absl::Status Server::Listen(const std::string& path, uint32_t mode) {
  absl::StatusOr<int> inherited = InheritedListenFd();
  if (!inherited.ok()) return inherited.status();
  if (const int fd = *inherited; fd >= 0) {
    ::unsetenv("LISTEN_PID");  // not for our children
    ::unsetenv("LISTEN_FDS");
    ::unsetenv("LISTEN_FDNAMES");
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    boost::system::error_code ec;
    acceptor_.assign(stream_protocol(), fd, ec);
    if (ec)
      return absl::UnavailableError(
          absl::StrCat("cannot use the inherited socket (fd 3): ", ec.message()));
    Accept();  // path_ stays empty: the socket file is systemd's
    return absl::OkStatus();
  }
  if (path.empty() || path.size() >= sizeof(sockaddr_un{}.sun_path))
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path '", path, "' is empty or longer than ",
        sizeof(sockaddr_un{}.sun_path) - 1, " bytes"));
  // Whoever may change the directories decides what answers at the path
  // (and where a root pfmd creates and removes a file): root or pfmd's uid.
  if (absl::Status st = CheckSocketDirectory(path, ::geteuid()); !st.ok()) return st;
  // Only a stale socket is ever removed: the path may be a typo or point
  // (through a symlink) at someone else's file, and pfmd often runs as root.
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return absl::FailedPreconditionError(absl::StrCat(
          "socket path ", path, " is ", FileKind(path, st),
          ", not a socket; pfmd replaces only a stale socket, so nothing "
          "was removed"));
    // Anything that accepts a connection there is live, whoever runs it
    // (Client::Connect would also refuse a daemon of another uid), and so
    // is one whose backlog is full (EAGAIN). Only ECONNREFUSED says nothing
    // listens: a socket we may not connect to (EACCES) or a probe that could
    // not be made tells nothing, and the file is left alone.
    // Non-blocking: a listener with a full backlog answers EAGAIN at once
    // instead of holding pfmd's start-up.
    const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (probe < 0)
      return absl::UnavailableError(absl::StrCat(
          "cannot probe socket path ", path, ": socket: ", strerror(errno)));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.data(), path.size());
    const int rc = ::connect(probe, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    const int err = errno;
    ::close(probe);
    if (rc == 0 || err == EAGAIN)
      return absl::AlreadyExistsError(
          absl::StrCat("something already listens on ", path));
    if (err != ECONNREFUSED)
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot tell whether something listens on ", path, " (connect: ",
          strerror(err), "); pfmd replaces only a socket nothing listens on, "
          "so nothing was removed"));
    ::unlink(path.c_str());  // stale socket file: nothing answered on it
  } else if (errno != ENOENT) {
    return absl::UnavailableError(
        absl::StrCat("cannot check socket path ", path, ": ", strerror(errno)));
  }
  boost::system::error_code ec;
  acceptor_.open(stream_protocol(), ec);
  // Asio opens sockets without SOCK_CLOEXEC; the tracer helpers' children
  // close what they inherit anyway (tracer_process.cc), this closes it on
  // exec too.
  if (!ec) ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) acceptor_.bind(stream_protocol::endpoint(path), ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    return absl::UnavailableError(
        absl::StrCat("cannot bind ", path, ": ", ec.message()));
  }
  // From here a failure removes the socket file it bound (or whatever
  // replaced it: unlink does not follow a symlink).
  auto unbind = [&](absl::Status st) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    ::unlink(path.c_str());
    return st;
  };
  // Not chmod: if the socket file were swapped for a symlink after bind
  // (a directory others can write), root would change the mode of the
  // link's target. AT_SYMLINK_NOFOLLOW refuses a symlink (EOPNOTSUPP).
  if (::fchmodat(AT_FDCWD, path.c_str(), mode, AT_SYMLINK_NOFOLLOW) != 0)
    return unbind(absl::UnavailableError(
        absl::StrCat("chmod ", path, ": ", strerror(errno))));
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return unbind(absl::UnavailableError(
        absl::StrCat("cannot listen on ", path, ": ", ec.message())));
  path_ = path;
  Accept();
  return absl::OkStatus();
}

void Server::Accept() {
  acceptor_.async_accept([this](boost::system::error_code ec,
                                stream_protocol::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Asio retries the per-connection errors (ECONNABORTED, EPROTO) itself;
      // what arrives here is EMFILE, ENFILE, ENOBUFS, ENOMEM and the like,
      // which retrying at once would only repeat at 100% CPU. The pending
      // connections wait in the listen backlog meanwhile.
      if (!accept_backing_off_) {
        accept_backing_off_ = true;
        std::cerr << "pfmd: accept: " << ec.message() << " ("
                  << conns_.size() << " connections open); retrying every "
                  << kAcceptBackoff.count() << " ms until it succeeds\n";
      }
      accept_timer_.expires_after(kAcceptBackoff);
      accept_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec || !acceptor_.is_open()) return;
        Accept();
      });
      return;
    }
    accept_backing_off_ = false;
    ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);  // as the listener's
    // Who the peer is, from the socket alone (userspace/pfmd/auth.h).
    absl::StatusOr<Peer> peer =
        PeerFromSocket(socket.native_handle(), service_.auth_policy());
    if (peer.ok()) {
      if (absl::Status s = CheckCaps(peer->uid); !s.ok()) {
        Refuse(std::move(socket), s, *peer);
      } else {
        const ConnectionId id = next_id_++;
        auto conn = std::make_shared<Connection>(*this, id, std::move(socket),
                                                 *std::move(peer));
        conns_[id] = conn;
        ++conns_per_uid_[conn->uid()];
        conn->Start();
      }
    }
    Accept();
  });
}

absl::Status Server::CheckCaps(uid_t uid) const {
  // uid 0 is not capped per uid, so root can always reach a daemon that
  // another user floods; it counts toward the total like everyone.
  if (uid != 0) {
    auto it = conns_per_uid_.find(uid);
    const int open = it == conns_per_uid_.end() ? 0 : it->second;
    if (open >= limits_.max_connections_per_uid)
      return absl::ResourceExhaustedError(absl::StrCat(
          "uid ", uid, " has ", open, " connections open (limit ",
          limits_.max_connections_per_uid, ", --max-connections-per-uid)"));
  }
  if (conns_.size() >= static_cast<size_t>(limits_.max_connections))
    return absl::ResourceExhaustedError(absl::StrCat(
        "pfmd has ", conns_.size(), " connections open (limit ",
        limits_.max_connections, ", --max-connections)"));
  return absl::OkStatus();
}

void Server::Refuse(stream_protocol::socket socket, const absl::Status& why,
                    const Peer& peer) {
  // One line a second at most: a client looping on connect must not fill
  // the log.
  const SteadyClock::time_point now = SteadyClock::now();
  if (now - last_refusal_log_ >= std::chrono::seconds(1)) {
    std::cerr << "pfmd: refused a connection of uid " << peer.uid << " (pid "
              << peer.pid << "): " << why.message();
    if (unlogged_refusals_ > 0)
      std::cerr << " (and " << unlogged_refusals_
                << " more refusals since the last line)";
    std::cerr << "\n";
    last_refusal_log_ = now;
    unlogged_refusals_ = 0;
  } else {
    ++unlogged_refusals_;
  }
  service_.refusals().Count(why.code());
  // A new connection's send buffer is empty: the small frame fits at once.
  (void)SendFrame(socket.native_handle(), ReplyBody(ServiceReply{why, {}, {}}),
                  {}, /*timeout_ms=*/0);
  boost::system::error_code ec;
  socket.shutdown(stream_protocol::socket::shutdown_send, ec);
  if (refusals_.size() >= kMaxLingeringRefusals) return;  // closed at once
  const uint64_t id = next_refusal_++;
  auto r = std::make_shared<Refusal>(std::move(socket), io_);
  refusals_[id] = r;
  auto done = [this, id] {
    auto it = refusals_.find(id);
    if (it == refusals_.end()) return;
    std::shared_ptr<Refusal> r = std::move(it->second);
    refusals_.erase(it);
    // Take what the client sent, so closing does not reset the connection
    // before it reads the refusal; bounded, it is only a courtesy.
    char scratch[4096];
    for (int i = 0; i < 16; ++i) {
      if (::recv(r->socket.native_handle(), scratch, sizeof(scratch),
                 MSG_DONTWAIT) <= 0)
        break;
    }
    boost::system::error_code ec;
    r->socket.close(ec);
    r->timer.cancel();
  };
  r->socket.async_wait(stream_protocol::socket::wait_read,
                       [done](boost::system::error_code) { done(); });
  r->timer.expires_after(kRefusalLinger);
  r->timer.async_wait([done](boost::system::error_code ec) {
    if (ec != asio::error::operation_aborted) done();
  });
}

void Server::Closed(ConnectionId id, uid_t uid) {
  auto it = conns_per_uid_.find(uid);
  if (it != conns_per_uid_.end() && --it->second <= 0) conns_per_uid_.erase(it);
  conns_.erase(id);
  // What a burst of clients made pfmd allocate (their buffers, their
  // sessions' records) is free now, but glibc keeps freed pages mapped in
  // its arenas: without a trim a daemon's RSS stays at the high-water mark
  // of its busiest moment. Once per burst, kTrimDelay after its first
  // close (the trim walks every arena: microseconds to a few ms).
  if (!trim_pending_ && !stopped_) {
    trim_pending_ = true;
    trim_timer_.expires_after(kTrimDelay);
    trim_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec == asio::error::operation_aborted) return;  // Stop: `this` may be gone
      trim_pending_ = false;
      ::malloc_trim(0);
    });
  }
}

void Server::Stop() {
  stopped_ = true;  // no trim armed by the closes below
  boost::system::error_code ec;
  if (acceptor_.is_open()) acceptor_.close(ec);
  accept_timer_.cancel();
  trim_timer_.cancel();
  trim_pending_ = false;
  auto conns = conns_;
  for (auto& [id, c] : conns) c->Close();
  for (auto& [id, r] : refusals_) {
    r->socket.close(ec);
    r->timer.cancel();
  }
  refusals_.clear();
  if (!path_.empty()) {
    ::unlink(path_.c_str());
    path_.clear();
  }
}

int RunPfmd(const PfmdConfig& config, int ready_fd) {
  MachineInfo machine;
  ErrorDetail detail;
  if (config.driver == "sim") {
    // Event names of the simulated PMU encode with libpfm4's tables for it
    // (LIBPFM_FORCE_PMU); must precede libpfm4's first initialisation.
    if (absl::Status s = ForcePmu(config.sim_pmu); !s.ok()) {
      std::cerr << "pfmd: " << StatusCodeName(s.code()) << ": " << s.message()
                << "\n";
      return 1;
    }
  }
  int err = config.driver == "sim"
                ? DescribeSimMachine(config.sim_pmu, config.sim_cpus, &machine,
                                     &detail)
                : DescribeHostMachine(&machine, &detail);
  if (err < 0) {
    absl::Status s = ErrnoToStatus(err, detail);
    std::cerr << "pfmd: " << StatusCodeName(s.code()) << ": " << s.message()
              << "\n";
    return 1;
  }
  absl::StatusOr<AuthPolicy> auth = MakeAuthPolicy(config.admin_group);
  if (!auth.ok()) {
    std::cerr << "pfmd: " << StatusCodeName(auth.status().code()) << ": "
              << auth.status().message() << "\n";
    return 1;
  }
  asio::io_context io;
  Service service(config, machine, *auth);
  // /metrics, before the socket accepts so `status` reports its address.
  // Declared after `service`, so it stops (joining its threads) first.
  std::unique_ptr<MetricsEndpoint> metrics;
  if (!config.metrics_listen.empty()) {
    absl::StatusOr<ListenAddress> where = ParseListenAddress(config.metrics_listen);
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> m =
        where.ok() ? MetricsEndpoint::Start(
                         *where, std::make_shared<MetricsCollector>(
                                     &service.session_manager(), &service.refusals()))
                   : where.status();
    if (!m.ok()) {
      std::cerr << "pfmd: " << StatusCodeName(m.status().code()) << ": "
                << m.status().message() << "\n";
      return 1;
    }
    metrics = *std::move(m);
    service.set_metrics_address(metrics->address());
    std::cerr << "pfmd: metrics on http://" << metrics->address() << "/metrics";
    if (!metrics->loopback())
      std::cerr << " (NOT loopback, as --metrics-listen asked: whoever reaches "
                   "this address reads uids, session ids and event names)";
    std::cerr << "\n";
  }
  Server server(io, service, ServerLimits::FromConfig(config));
  const std::string path = ResolveSocketPath(config.socket);
  // Caught before the socket exists: a SIGTERM as soon as a client can
  // connect (the socket listens) stops pfmd cleanly, its socket removed,
  // instead of killing it with the file left behind.
  asio::signal_set signals(io, SIGTERM, SIGINT);
  if (absl::Status s = server.Listen(path, config.socket_mode); !s.ok()) {
    std::cerr << "pfmd: " << StatusCodeName(s.code()) << ": " << s.message()
              << "\n";
    return 1;
  }
  signals.async_wait([&](boost::system::error_code, int) {
    server.Stop();
    io.stop();
  });
  ::signal(SIGPIPE, SIG_IGN);
  // After the reply is written: stop from the event loop, not mid-handler.
  service.set_shutdown_hook([&] {
    asio::post(io, [&] {
      server.Stop();
      io.stop();
    });
  });

  // The host's flexible breakpoints rotate every mux interval while a task
  // has more than its free debug registers; otherwise a slow check.
  asio::steady_timer tick_timer(io);
  std::function<void()> arm_tick = [&] {
    tick_timer.expires_after(service.Tick() ? std::chrono::milliseconds(4)
                                            : std::chrono::milliseconds(100));
    tick_timer.async_wait([&](boost::system::error_code ec) {
      if (!ec) arm_tick();
    });
  };
  arm_tick();

  // The embedded daemon leaves when nobody has used it for a while.
  asio::steady_timer idle_timer(io);
  int idle_s = 0;
  std::function<void()> arm_idle = [&] {
    idle_timer.expires_after(std::chrono::seconds(1));
    idle_timer.async_wait([&](boost::system::error_code ec) {
      if (ec) return;
      idle_s = (server.connections() == 0 && service.Idle()) ? idle_s + 1 : 0;
      if (idle_s >= config.idle_exit_s) {
        server.Stop();
        io.stop();
        return;
      }
      arm_idle();
    });
  };
  if (config.idle_exit_s > 0) arm_idle();

  if (ready_fd >= 0) {
    char c = 1;
    (void)!::write(ready_fd, &c, 1);
    ::close(ready_fd);
  }
  io.run();
  return 0;
}

}  // namespace pfm
