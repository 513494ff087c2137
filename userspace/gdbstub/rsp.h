// The GDB Remote Serial Protocol as bytes and requests: framing ($...#xx),
// escaping, hex, and a strict parser for the packets a branch-trace stub
// answers. No I/O and no ptrace: the stub feeds socket bytes in and sends
// the strings it gets back.
//
// Facts follow the GDB manual, "Remote Protocol" (gdb/doc/gdb.texinfo), and
// what gdbserver accepts (gdbserver/remote-utils.cc, server.cc).
//
// Thread-compatible: one PacketReader per connection; the free functions are
// pure.
#ifndef PFM_USERSPACE_GDBSTUB_RSP_H_
#define PFM_USERSPACE_GDBSTUB_RSP_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pfm::gdbstub {

// Largest m/M/X length ParseRequest accepts; a longer one is kMalformed.
// GDB sizes those requests by the PacketSize the stub advertises in its
// qSupported reply, which should stay well below this.
inline constexpr uint64_t kMaxMemoryLength = 1 << 20;

struct RspEvent {
  enum Kind {
    kPacket,       // payload: the raw (still escaped) bytes between $ and #
    kInterrupt,    // 0x03 outside a packet (GDB's Ctrl-C)
    kAck,          // +
    kNack,         // - (GDB wants the last packet again)
    kBadChecksum,  // payload: what arrived; in ack mode answer '-'
    kOversized,    // payload longer than max_payload: dropped, not buffered
    kGarbage,      // one per run of bytes that start nothing
  };
  Kind kind;
  std::string payload;
};

// Incremental decoder of the byte stream GDB sends. Bytes may be split at
// any point across Feed calls. Never holds more than max_payload bytes.
//
// Escaped data never contains a raw '$', so a '$' inside a packet means the
// packet was cut short: it is reported as kGarbage and a new one starts. An
// oversized packet is reported once, then skipped up to its checksum or the
// next '$'. GDB waits for an answer to it: reply with an error, not '-', or
// GDB sends it again.
class PacketReader {
 public:
  explicit PacketReader(size_t max_payload);

  // Appends the events completed by data[0, n) to *out, in stream order.
  void Feed(const char* data, size_t n, std::vector<RspEvent>* out);

  // Bytes held for a packet not yet complete.
  size_t buffered() const { return payload_.size(); }

 private:
  enum class State {
    kIdle,
    kPayload,
    kChecksum1,
    kChecksum2,
    kDiscard,           // inside an oversized packet
    kDiscardChecksum1,  // after its '#'
    kDiscardChecksum2,
  };

  void StartPacket();
  void Idle(char c, std::vector<RspEvent>* out);

  const size_t max_payload_;
  State state_ = State::kIdle;
  bool in_garbage_ = false;
  std::string payload_;
  uint8_t sum_ = 0;    // of payload_ so far
  int checksum_ = 0;   // first checksum digit's value
};

// "$" + escaped payload + "#" + two lower-case hex digits of the checksum of
// the escaped bytes. Escapes '$', '#', '}' and '*' as '}' then byte ^ 0x20.
// GDB unescapes only binary replies (qXfer data, X...): text replies must
// not contain those four bytes, which none of the stub's do.
std::string EncodePacket(std::string_view payload);

// Undoes the escaping ("}x" -> x ^ 0x20). False for a trailing lone '}'
// (then *out is unspecified).
bool Unescape(std::string_view in, std::string* out);

// Lower-case hex of n bytes at p.
std::string ToHex(const void* p, size_t n);
// Even length and hex digits only (either case); false otherwise.
bool FromHex(std::string_view hex, std::string* bytes);
// 1 to 16 hex digits and nothing else.
bool ParseHexU64(std::string_view hex, uint64_t* value);

// GDB's thread-id: "-1" (all), "0" (any), a hex id, or, with the
// multiprocess extension, "pPID.TID" ("pPID" alone means "pPID.-1").
struct ThreadId {
  static constexpr int64_t kAll = -1;
  static constexpr int64_t kAny = 0;
  int64_t pid = 0;  // only meaningful when has_pid
  int64_t tid = 0;
  bool has_pid = false;

  bool operator==(const ThreadId& o) const {
    return pid == o.pid && tid == o.tid && has_pid == o.has_pid;
  }
};

// Parses exactly one thread-id (the whole of text).
bool ParseThreadId(std::string_view text, ThreadId* out);

struct VContAction {
  char action = 0;       // 'c', 'C', 's', 'S', 't' or 'r'
  int signal = 0;        // for 'C' and 'S'
  uint64_t start = 0;    // for 'r': step while start <= pc < end
  uint64_t end = 0;
  // None matches every thread; per thread the leftmost matching action
  // applies (GDB manual, "vCont").
  std::optional<ThreadId> thread;
};

struct Request {
  enum Kind {
    kUnsupported,      // answer with an empty packet
    kMalformed,        // a known packet with bad arguments; see error
    kHaltReason,       // ?
    kReadRegs,         // g
    kWriteRegs,        // G: bytes
    kReadReg,          // p: regno
    kWriteReg,         // P: regno, bytes
    kReadMem,          // m: addr, length
    kWriteMem,         // M: addr, length, bytes (length == bytes.size())
    kWriteMemBinary,   // X: addr, length, bytes (unescaped)
    kContinue,         // c / C: has_signal, signal, has_addr, addr
    kStep,             // s / S: likewise
    kVContQuery,       // vCont?
    kVCont,            // vCont;...: actions
    kSetThread,        // Hg / Hc: which, thread
    kThreadAlive,      // T: thread
    kInsertBreak,      // Z: break_type, addr, break_kind
    kRemoveBreak,      // z: likewise
    kSupported,        // qSupported: features
    kXferRead,         // qXfer:object:read:annex:offset,length
    kThreadInfoFirst,  // qfThreadInfo
    kThreadInfoNext,   // qsThreadInfo
    kCurrentThread,    // qC
    kAttached,         // qAttached[:pid]: has_pid, pid
    kStartNoAck,       // QStartNoAckMode
    kKill,             // k
    kVKill,            // vKill;pid: pid
    kDetach,           // D[;pid]: has_pid, pid
    kBtraceEnable,     // Qbtrace:bts|pt|off: mode
    kBtraceConfSize,   // Qbtrace-conf:bts:size=V: value
  };

  Kind kind = kUnsupported;
  std::string error;  // kMalformed only: what was wrong, for the log

  uint64_t addr = 0;
  bool has_addr = false;
  uint64_t length = 0;
  std::string bytes;
  int regno = 0;
  int signal = 0;
  bool has_signal = false;
  std::vector<VContAction> actions;
  char which = 0;
  ThreadId thread;
  int break_type = 0;
  uint64_t break_kind = 0;
  std::vector<std::string> features;
  std::string object;
  std::string annex;
  uint64_t offset = 0;
  int64_t pid = 0;
  bool has_pid = false;
  std::string mode;
  uint64_t value = 0;
};

// Parses one raw packet payload (as PacketReader delivers it: still
// escaped). Total: any input gives a Request, never a crash; what it does not
// know is kUnsupported. Names match whole ("qC" is not "qCRC:...").
Request ParseRequest(std::string_view payload);

}  // namespace pfm::gdbstub

#endif  // PFM_USERSPACE_GDBSTUB_RSP_H_
