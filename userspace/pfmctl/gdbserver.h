// `pfmctl gdbserver`: a GDB remote stub whose run control, memory and
// registers go through pfm's tracer of the process (a debug channel pfmd
// hands out, kernel/drivers/ptrace/debug_channel.h) and whose branch history
// (`record btrace bts`) comes from pfm history sessions on it. The packets
// and what is supported: docs/gdb.md.
#ifndef PFM_USERSPACE_PFMCTL_GDBSERVER_H_
#define PFM_USERSPACE_PFMCTL_GDBSERVER_H_

#include "absl/status/statusor.h"
#include "userspace/pfmctl/context.h"

namespace pfm {

//   pfmctl gdbserver --pid PID [--listen [HOST:]PORT]
//   pfmctl gdbserver [--listen [HOST:]PORT] -- CMD [ARGS...]
// Speaks the protocol on stdin/stdout (gdb's `target remote | pfmctl
// gdbserver ...`) or, with --listen, on one TCP connection (loopback unless
// HOST says otherwise).
absl::StatusOr<int> GdbserverCommand(const CliContext& ctx, const CommandArgs& args);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_GDBSERVER_H_
