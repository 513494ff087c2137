// Text renderings of pfmd's replies (the --json forms are the replies
// themselves) and of ring records.
//
// The renderers read replies through ReplyNode, so a malformed reply records
// an error in its ReplyReader instead of throwing; PrintCheckedReply then
// prints either nothing (and returns that error) or the whole rendering.
#ifndef PFM_USERSPACE_PFMCTL_RENDER_H_
#define PFM_USERSPACE_PFMCTL_RENDER_H_

#include <ostream>
#include <string>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "kernel/uapi/pfm_uapi.h"
#include "userspace/pfmctl/context.h"
#include "userspace/pfmctl/reply.h"

namespace pfm {

// `status`: the daemon at `socket_path`, its machine, sessions and charges.
void RenderStatus(const ReplyNode& result, const std::string& socket_path,
                  std::ostream& out);

// `resources`: per CPU and per task, who holds what, with running ratios.
void RenderResources(const ReplyNode& result, std::ostream& out);

// `session list`: the column titles, then one line per session.
void RenderSessionHeader(std::ostream& out);
void RenderSessionLine(const ReplyNode& session, std::ostream& out);

// `session show`: the session's line, its counters and its breakpoints.
void RenderSessionDetail(const ReplyNode& session, std::ostream& out);

// `snapshot`: one record per line.
void RenderRecordLine(const pfm_record& r, std::ostream& out);

// The end of every reply-reading command: the reply's error if it was
// malformed (nothing printed), else `raw` as JSON (--json) or `text`.
absl::Status PrintCheckedReply(const CliContext& ctx, const ReplyReader& reader,
                               const boost::json::value& raw,
                               const std::string& text);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_RENDER_H_
