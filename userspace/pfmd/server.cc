#include "userspace/pfmd/server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "kernel/drivers/machine.h"
#include "pfm/client.h"
#include "pfm/events.h"
#include "pfm/wire.h"
#include "userspace/pfmd/auth.h"
#include "userspace/pfmd/errno_status.h"
#include "kernel/drivers/host_machine.h"

namespace pfm {

namespace asio = boost::asio;
using asio::local::stream_protocol;

class Server::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server& server, ConnectionId id, stream_protocol::socket socket,
             Peer peer)
      : server_(server), id_(id), socket_(std::move(socket)), peer_(peer) {}

  void Start() { Read(); }
  void Close() {
    boost::system::error_code ec;
    socket_.close(ec);
  }

 private:
  void Read() {
    auto self = shared_from_this();
    socket_.async_read_some(
        asio::buffer(buf_), [this, self](boost::system::error_code ec,
                                         size_t n) {
          if (ec) return Finish();
          absl::Status s = decoder_.Feed(buf_.data(), n);
          std::string body;
          while (s.ok() && decoder_.Next(&body)) {
            if (!HandleFrame(body)) return Finish();
          }
          if (!s.ok()) {
            Reply(ServiceReply{s, {}, {}});
            return Finish();
          }
          Read();
        });
  }

  // Returns false when the connection must close.
  bool HandleFrame(const std::string& body) {
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
    return Reply(server_.service_.Handle(id_, peer_, v.as_object()));
  }

  bool Reply(const ServiceReply& r) {
    boost::json::object out;
    std::vector<int> fds;
    if (r.status.ok()) {
      out["ok"] = true;
      out["result"] = r.result;
      for (const UniqueFd& f : r.fds) fds.push_back(f.get());
      out["fds"] = fds.size();
    } else {
      out["ok"] = false;
      out["code"] = StatusCodeName(r.status.code());
      out["message"] = std::string(r.status.message());
    }
    // Replies are small and the client waits for them: a bounded blocking
    // send keeps the code simple; a client that stops reading is dropped.
    absl::Status s = SendFrame(socket_.native_handle(),
                               boost::json::serialize(out), fds, 2000);
    return s.ok();
  }

  void Finish() {
    if (finished_) return;
    finished_ = true;
    Close();
    server_.service_.Disconnected(id_);
    server_.conns_.erase(id_);
  }

  Server& server_;
  ConnectionId id_;
  stream_protocol::socket socket_;
  Peer peer_;
  FrameDecoder decoder_;
  std::array<char, 16384> buf_;
  bool finished_ = false;
};

Server::Server(asio::io_context& io, Service& service)
    : io_(io), service_(service), acceptor_(io) {}

Server::~Server() { Stop(); }

size_t Server::connections() const { return conns_.size(); }

namespace {

// systemd socket activation (sd_listen_fds(3)): LISTEN_PID names this
// process and LISTEN_FDS >= 1 means fd 3 is a listening socket already bound
// by the .socket unit, which owns its path and mode.
int InheritedListenFd() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  if (pid == nullptr || fds == nullptr) return -1;
  if (std::strtol(pid, nullptr, 10) != ::getpid() || std::strtol(fds, nullptr, 10) < 1)
    return -1;
  int type = 0;
  socklen_t len = sizeof(type);
  if (::getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
    return -1;
  return 3;
}

}  // namespace

absl::Status Server::Listen(const std::string& path, uint32_t mode) {
  if (const int fd = InheritedListenFd(); fd >= 0) {
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
  if (Client::Connect(path).ok())
    return absl::AlreadyExistsError(
        absl::StrCat("a pfmd already answers on ", path));
  ::unlink(path.c_str());  // stale socket file: nothing answered on it
  boost::system::error_code ec;
  acceptor_.open(stream_protocol(), ec);
  if (!ec) acceptor_.bind(stream_protocol::endpoint(path), ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("cannot bind ", path, ": ", ec.message()));
  if (::chmod(path.c_str(), mode) != 0)
    return absl::UnavailableError(
        absl::StrCat("chmod ", path, ": ", strerror(errno)));
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", path, ": ", ec.message()));
  path_ = path;
  Accept();
  return absl::OkStatus();
}

void Server::Accept() {
  acceptor_.async_accept([this](boost::system::error_code ec,
                                stream_protocol::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      // Who the peer is, from the socket alone (userspace/pfmd/auth.h).
      absl::StatusOr<Peer> peer =
          PeerFromSocket(socket.native_handle(), service_.auth_policy());
      if (peer.ok()) {
        const ConnectionId id = next_id_++;
        auto conn = std::make_shared<Connection>(*this, id, std::move(socket),
                                                 *std::move(peer));
        conns_[id] = conn;
        conn->Start();
      }
    }
    Accept();
  });
}

void Server::Stop() {
  boost::system::error_code ec;
  if (acceptor_.is_open()) acceptor_.close(ec);
  auto conns = conns_;
  for (auto& [id, c] : conns) c->Close();
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
  Server server(io, service);
  const std::string path = ResolveSocketPath(config.socket);
  if (absl::Status s = server.Listen(path, config.socket_mode); !s.ok()) {
    std::cerr << "pfmd: " << StatusCodeName(s.code()) << ": " << s.message()
              << "\n";
    return 1;
  }
  asio::signal_set signals(io, SIGTERM, SIGINT);
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
