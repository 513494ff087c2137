#include "userspace/pfmctl/session_commands.h"

#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include <boost/json.hpp>

#include "absl/strings/str_cat.h"
#include "pfm/client.h"
#include "pfm/session_spec.h"
#include "userspace/pfmctl/breakpoint_names.h"
#include "userspace/pfmctl/connect.h"
#include "userspace/pfmctl/flags.h"
#include "userspace/pfmctl/render.h"
#include "userspace/pfmctl/reply.h"

namespace pfm {
namespace {

namespace json = boost::json;

// Sessions per session_list request. One reply must fit in a wire frame
// (1 MiB): thousands of sessions in one array did not.
constexpr uint64_t kSessionListPage = 1000;

absl::StatusOr<int> Create(const CliContext& ctx, const CommandArgs& args) {
  CommandFlags f(args, 2);
  absl::StatusOr<SessionSpec> spec = ParseSessionFlags(f);
  if (!spec.ok()) return spec.status();
  // An unknown flag is named before the spec's own checks run: `--pdi 1`
  // is a typo, not a missing target.
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("session create");
  if (!pos.ok()) return pos.status();
  if (!pos->empty())
    return UsageError(absl::StrCat("session create: unexpected '", pos->front(), "'"));
  spec = ValidateSpec(*spec);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  if (spec->HasUnresolvedNames()) {
    // Names are looked up in the target's files now (breakpoint_names.h).
    if (spec->pid < 0)
      return UsageError("breakpoint names need a process (--pid PID): a CPU has no files "
                        "to look them up in");
    if (absl::Status s = CheckDaemonCanResolveNames(*c); !s.ok()) return s;
    if (absl::Status s = ResolveBreakpointNames(spec->pid, &*spec); !s.ok()) return s;
    spec = ValidateSpec(*spec);
    if (!spec.ok()) return spec.status();
  }
  absl::StatusOr<Client::Reply> r = c->Call("session_create", {{"spec", spec->ToJson()}});
  if (!r.ok()) return r.status();
  // Scripts take the id from this reply (both forms): it must be one.
  ReplyReader reader("session_create", r->result);
  const uint64_t id = reader.result().Member("id").Id();
  if (absl::Status s = PrintCheckedReply(ctx, reader, r->result,
                                         absl::StrCat("session ", id, "\n"));
      !s.ok())
    return s;
  return 0;
}

// Every session the daemon shows us, in id order, fetched in pages: each
// request asks for the sessions after the last id of the previous page, until
// a page comes back short. Entries not after the requested id are dropped, so
// a daemon that ignores "after" (one that predates paging) ends the loop
// instead of repeating itself.
absl::StatusOr<json::array> ListAllSessions(Client& c) {
  json::array all;
  std::optional<uint64_t> after;
  for (;;) {
    json::object args{{"limit", kSessionListPage}};
    if (after.has_value()) args["after"] = *after;
    absl::StatusOr<Client::Reply> r = c.Call("session_list", std::move(args));
    if (!r.ok()) return r.status();
    ReplyReader reader("session_list", r->result);
    const std::vector<ReplyNode> page = reader.result().Elements();
    if (!reader.ok()) return reader.status();
    const std::optional<uint64_t> asked_after = after;
    size_t taken = 0;
    for (const ReplyNode& s : page) {
      const uint64_t id = s.Member("id").Id();
      if (!reader.ok()) return reader.status();
      if (asked_after.has_value() && id <= *asked_after) continue;
      all.push_back(*s.json());
      after = id;
      ++taken;
    }
    // A page longer than the limit is a daemon that ignores "limit": it sent
    // everything at once.
    if (page.size() != kSessionListPage || taken == 0) break;
  }
  return all;
}

absl::StatusOr<int> List(const CliContext& ctx, const CommandArgs& args) {
  if (args.size() > 2) return UsageError("session list takes no arguments");
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<json::array> sessions = ListAllSessions(*c);
  if (!sessions.ok()) return sessions.status();
  // The pages joined: indices in errors count from the first session.
  const json::value all(std::move(*sessions));
  ReplyReader reader("session_list", all);
  std::ostringstream text;
  RenderSessionHeader(text);
  for (const ReplyNode& s : reader.result().Elements()) RenderSessionLine(s, text);
  if (absl::Status s = PrintCheckedReply(ctx, reader, all, text.str()); !s.ok()) return s;
  return 0;
}

absl::StatusOr<int> Show(const CliContext& ctx, const CommandArgs& args) {
  if (args.size() != 3) return UsageError("usage: session show ID");
  absl::StatusOr<uint64_t> id = ParseSessionId(args[2]);
  if (!id.ok()) return id.status();
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("session_show", {{"id", *id}});
  if (!r.ok()) return r.status();
  ReplyReader reader("session_show", r->result);
  std::ostringstream text;
  RenderSessionDetail(reader.result(), text);
  if (absl::Status s = PrintCheckedReply(ctx, reader, r->result, text.str()); !s.ok())
    return s;
  return 0;
}

absl::StatusOr<int> Kill(const CliContext& ctx, const CommandArgs& args) {
  if (args.size() != 3) return UsageError("usage: session kill ID");
  absl::StatusOr<uint64_t> id = ParseSessionId(args[2]);
  if (!id.ok()) return id.status();
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("session_kill", {{"id", *id}});
  if (!r.ok()) return r.status();
  ReplyReader reader("session_kill", r->result);
  reader.result().Object();
  if (absl::Status s = PrintCheckedReply(ctx, reader, r->result, ""); !s.ok()) return s;
  return 0;
}

}  // namespace

absl::StatusOr<int> SessionCommand(const CliContext& ctx, const CommandArgs& args) {
  if (args.size() < 2) return UsageError("usage: session create|list|show|kill ...");
  const std::string& sub = args[1];
  if (sub == "create") return Create(ctx, args);
  if (sub == "list") return List(ctx, args);
  if (sub == "show") return Show(ctx, args);
  if (sub == "kill") return Kill(ctx, args);
  return UsageError(absl::StrCat("unknown session command '", sub, "'"));
}

}  // namespace pfm
