#include "userspace/pfmctl/daemon_commands.h"

#include <sstream>
#include <string>

#include <boost/json.hpp>

#include "absl/strings/numbers.h"
#include "pfm/client.h"
#include "userspace/pfmctl/connect.h"
#include "userspace/pfmctl/flags.h"
#include "userspace/pfmctl/render.h"
#include "userspace/pfmctl/reply.h"

namespace pfm {

absl::StatusOr<int> StatusCommand(const CliContext& ctx, const CommandArgs& args) {
  if (args.size() > 1) return UsageError("status takes no arguments");
  std::string path;
  absl::StatusOr<Client> c = ConnectOrStart(ctx, &path);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("status");
  if (!r.ok()) return r.status();
  ReplyReader reader("status", r->result);
  std::ostringstream text;
  RenderStatus(reader.result(), path, text);
  if (absl::Status s = PrintCheckedReply(ctx, reader, r->result, text.str()); !s.ok())
    return s;
  return 0;
}

absl::StatusOr<int> ResourcesCommand(const CliContext& ctx, const CommandArgs& args) {
  if (args.size() > 1) return UsageError("resources takes no arguments");
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("resources");
  if (!r.ok()) return r.status();
  ReplyReader reader("resources", r->result);
  std::ostringstream text;
  RenderResources(reader.result(), text);
  if (absl::Status s = PrintCheckedReply(ctx, reader, r->result, text.str()); !s.ok())
    return s;
  return 0;
}

absl::StatusOr<int> SimCommand(const CliContext& ctx, const CommandArgs& args) {
  if (args.size() < 2) return UsageError("usage: sim pause|resume|run NS|stats [PID]|exit PID");
  boost::json::object req{{"action", args[1]}};
  if (args[1] == "run") {
    uint64_t ns;
    if (args.size() != 3 || !absl::SimpleAtoi(args[2], &ns))
      return UsageError("usage: sim run NS (virtual nanoseconds)");
    req["ns"] = ns;
  } else if ((args[1] == "stats" || args[1] == "exit") && args.size() == 3) {
    absl::StatusOr<int> pid = ParseIntArg("pid", args[2], 1, 0x3fffffff);
    if (!pid.ok()) return pid.status();
    req["pid"] = *pid;
  } else if (args.size() != 2) {
    return UsageError("usage: sim pause|resume|run NS|stats [PID]");
  }
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("sim", req);
  if (!r.ok()) return r.status();
  // Printed as it came, in both forms; every sim action answers an object.
  ReplyReader reader("sim", r->result);
  reader.result().Object();
  if (!reader.ok()) return reader.status();
  PrintJson(ctx, r->result);
  return 0;
}

absl::StatusOr<int> ShutdownCommand(const CliContext& ctx, const CommandArgs& args) {
  std::string path = ctx.socket_flag;
  if (path.empty()) {
    absl::StatusOr<std::string> priv = PrivateSocketPath();
    if (!priv.ok()) return priv.status();
    path = *priv;
  }
  absl::StatusOr<Client> c = Client::Connect(path);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("shutdown");
  if (!r.ok()) return r.status();
  ReplyReader reader("shutdown", r->result);
  reader.result().Object();
  if (!reader.ok()) return reader.status();
  if (ctx.json) PrintJson(ctx, r->result);
  return 0;
}

}  // namespace pfm
