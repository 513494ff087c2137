// The debug channel: run control of a traced process for a debugger
// (pfmctl gdbserver, docs/gdb.md), spoken between the debugger's client and
// the pid's tracer process on a socket pfmd hands out (session_debug). pfmd
// creates the socket pair, passes one end to the tracer (tracer_protocol's
// kDebugOpen) and the other to the client, which must own a debugger
// session on that pid; pfmd itself stays out of the conversation, so a slow
// or hostile debugger never blocks the daemon. The tracer runs as the
// client (tracer_process.h): the channel grants nothing the kernel would
// not let the client do with ptrace itself.
//
// Messages are tracer_protocol's frames ({u32 type, u32 len}, payload,
// host-endian: both ends are one binary on one machine). Every request gets
// exactly one kReply {i32 rc, payload}, in order; kStop events come in
// between, whenever the process stops. At most one channel per tracer; a
// channel that closes ends debug control (DebugDisable(kill_on_close)).
#ifndef PFM_KERNEL_DRIVERS_PTRACE_DEBUG_CHANNEL_H_
#define PFM_KERNEL_DRIVERS_PTRACE_DEBUG_CHANNEL_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "kernel/drivers/ptrace/soft_bts.h"
#include "pfm/unique_fd.h"

namespace pfm::debug_channel {

enum Type : uint32_t {
  // client -> tracer
  kEnable = 1,     // u8 stop_at_exec, u8 kill_on_close
  kInterrupt = 2,  // (empty)
  kResume = 3,     // u8 continue_others, u8 pad[3], u32 nstep, u32 nsig,
                   // u32 ncont, i32 step[nstep], {i32 tid, i32 sig}[nsig],
                   // i32 cont[ncont]
  kGetRegs = 4,    // i32 tid -> DebugRegs
  kSetRegs = 5,    // i32 tid, DebugRegs
  kReadMem = 6,    // u64 addr, u32 len (<= kMaxMemBytes) -> the bytes read
  kWriteMem = 7,   // u64 addr, bytes (<= kMaxMemBytes)
  kBreak = 8,      // u64 addr, u8 insert
  kThreads = 9,    // -> i32 tid[]
  kKill = 10,      // (empty)
  kDetach = 11,    // (empty): debug control ends, the process runs on
  kAuxv = 12,      // -> /proc/PID/auxv
  kHwPoint = 13,   // u64 addr, u32 len, u8 kind (kDebugHw*), u8 insert
                   // -> on failure, why (text)
  // tracer -> client
  kReply = 100,    // i32 rc (0 or -errno), payload
  kStop = 101,     // WireStop
};

struct WireStop {
  int32_t kind;  // DebugStopEvent::Kind
  int32_t tid;
  int32_t signo;
  int32_t exit_code;
  uint8_t swbreak;
  uint8_t hw_kind;  // DebugStopEvent::hw_kind
  uint8_t pad[2];
  uint64_t hw_addr;
};

inline constexpr uint32_t kMaxMemBytes = 1u << 16;
inline constexpr uint32_t kMaxThreads = 4096;
inline constexpr uint32_t kMaxMsg = kMaxMemBytes + 64;

// Serves one channel in the tracer process until it closes (or the caller
// shuts `fd` down); ends debug control on the way out.
void Serve(int fd, SoftBtsTracer* tracer, pid_t pid);

// The client's end.
class Client {
 public:
  explicit Client(UniqueFd fd) : fd_(std::move(fd)) {}
  int fd() const { return fd_.get(); }
  bool closed() const { return closed_; }

  // Reads what has arrived (call when fd() is readable): stop events are
  // queued. False once the tracer closed the channel. A request may queue
  // stops too: look at PopStop after every call, not only when fd() polls
  // readable.
  bool Pump();
  bool PopStop(DebugStopEvent* e);
  bool has_stops() const { return !stops_.empty(); }

  int Enable(bool stop_at_exec, bool kill_on_close);
  int Interrupt();
  int Resume(const DebugResumeSpec& spec);
  int GetRegs(pid_t tid, DebugRegs* out);
  int SetRegs(pid_t tid, const DebugRegs& in);
  int ReadMemory(uint64_t addr, uint32_t len, std::string* out);
  int WriteMemory(uint64_t addr, const std::string& bytes);
  int Breakpoint(uint64_t addr, bool insert);
  // DebugHwPoint; `err` gets the tracer's reason when it fails.
  int HwPoint(int kind, uint64_t addr, uint32_t len, bool insert, std::string* err);
  int Threads(std::vector<pid_t>* out);
  int Kill();
  int Detach();
  int Auxv(std::string* out);

 private:
  // Sends a request and waits for its reply (stop events meanwhile are
  // queued); -EPIPE when the channel is gone.
  int Call(uint32_t type, const std::string& payload, std::string* reply);
  bool ReadOne(uint32_t* type, std::string* payload);
  void QueueStop(uint32_t type, const std::string& payload);

  UniqueFd fd_;
  bool closed_ = false;
  std::deque<DebugStopEvent> stops_;
  std::string in_;  // bytes received, not yet a whole frame
};

}  // namespace pfm::debug_channel

#endif  // PFM_KERNEL_DRIVERS_PTRACE_DEBUG_CHANNEL_H_
