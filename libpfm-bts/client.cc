#include "pfm/client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "pfm/wire.h"

namespace pfm {

std::string StatusCodeName(absl::StatusCode code) {
  return absl::StatusCodeToString(code);
}

absl::StatusCode StatusCodeFromName(const std::string& name) {
  for (int c = 0; c <= 16; ++c) {
    auto code = static_cast<absl::StatusCode>(c);
    if (absl::StatusCodeToString(code) == name) return code;
  }
  return absl::StatusCode::kUnknown;
}

absl::StatusOr<Client> Client::Connect(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path))
    return absl::InvalidArgumentError(
        absl::StrCat("socket path '", path, "' is empty or too long"));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid())
    return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) <
      0)
    return absl::UnavailableError(absl::StrCat(
        "no pfmd answers on ", path, ": ", strerror(errno)));
  // A socket path proves nothing about who listens on it: whoever could
  // create the file (or its directory) could be serving a fake daemon that
  // collects our requests or hands back crafted fds. The kernel recorded the
  // listener's credentials at listen(); only a daemon of our own uid or of
  // root is trusted, and this is decided before the first byte is sent.
  ucred peer{};
  socklen_t len = sizeof(peer);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0)
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot read the credentials of pfmd on ", path, ": ",
        strerror(errno), ": refusing to talk to it"));
  const uid_t me = ::getuid();
  if (peer.uid != me && peer.uid != 0)
    return absl::PermissionDeniedError(absl::StrCat(
        "pfmd on ", path, " runs as uid ", peer.uid, ", neither you (uid ", me,
        ") nor root: refusing to talk to it"));
  return Client(std::move(fd));
}

absl::StatusOr<Client::Reply> Client::Call(const std::string& op,
                                           boost::json::object args) {
  args["op"] = op;
  absl::Status s = SendFrame(fd_.get(), boost::json::serialize(args), {});
  if (!s.ok()) return s;
  absl::StatusOr<Frame> frame = RecvFrame(fd_.get());
  if (!frame.ok()) return frame.status();
  // pfmd is another process: its reply is input. A reply that is not one
  // is INTERNAL "pfmd reply: OP: what was wrong", the form pfmctl's checked
  // accessors give for a malformed result (never a crash: absl aborts on
  // an error Status built with code OK, so "code" is checked here).
  auto bad = [&op](absl::string_view what) {
    return absl::InternalError(absl::StrCat("pfmd reply: ", op, ": ", what));
  };
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(frame->body, ec);
  if (ec || !v.is_object()) return bad("not a JSON object");
  const boost::json::object& o = v.as_object();
  const boost::json::value* ok = o.if_contains("ok");
  if (ok == nullptr || !ok->is_bool()) return bad("no boolean \"ok\"");
  if (!ok->as_bool()) {
    const auto* code = o.if_contains("code");
    const auto* msg = o.if_contains("message");
    if (code == nullptr || !code->is_string())
      return bad("an error reply without a \"code\" string");
    const std::string name(code->as_string());
    const absl::StatusCode c = StatusCodeFromName(name);
    if (c == absl::StatusCode::kOk || StatusCodeName(c) != name)
      return bad(absl::StrCat("an error reply with code \"", absl::CHexEscape(name),
                              "\", which is not an error code"));
    if (msg == nullptr || !msg->is_string())
      return bad(absl::StrCat("an error reply (", name, ") without a \"message\" string"));
    return absl::Status(c, std::string(msg->as_string()));
  }
  Reply reply;
  if (const auto* r = o.if_contains("result")) reply.result = *r;
  reply.fds = std::move(frame->fds);
  return reply;
}

}  // namespace pfm
