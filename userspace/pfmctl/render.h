// Human-readable renderings of pfmd replies (the --json forms are the
// replies themselves).
#ifndef PFM_USERSPACE_PFMCTL_RENDER_H_
#define PFM_USERSPACE_PFMCTL_RENDER_H_

#include <ostream>

#include <boost/json.hpp>

namespace pfm {

// `resources`: per CPU and per task, who holds what, with running ratios.
void PrintResources(std::ostream& out, const boost::json::object& r);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_RENDER_H_
