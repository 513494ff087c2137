#include "userspace/gdbstub/rsp.h"

#include <utility>

namespace pfm::gdbstub {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool NeedsEscape(char c) { return c == '$' || c == '#' || c == '}' || c == '*'; }

// Splits at the first `sep`; false when there is none.
bool Split(std::string_view s, char sep, std::string_view* head, std::string_view* tail) {
  const size_t at = s.find(sep);
  if (at == std::string_view::npos) return false;
  *head = s.substr(0, at);
  *tail = s.substr(at + 1);
  return true;
}

// A positive id (or 0) that fits int64_t, as pids and tids do.
bool ParseId(std::string_view s, int64_t* out) {
  uint64_t v = 0;
  if (!ParseHexU64(s, &v) || v > static_cast<uint64_t>(INT64_MAX)) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// A thread-id component: "-1" or a hex id.
bool ParseIdOrAll(std::string_view s, int64_t* out) {
  if (s == "-1") {
    *out = ThreadId::kAll;
    return true;
  }
  return ParseId(s, out);
}

// GDB sends signals as two hex digits ("C%02x"); one is accepted too.
bool ParseSignal(std::string_view s, int* out) {
  uint64_t v = 0;
  if (s.size() > 2 || !ParseHexU64(s, &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

// Register numbers stay within int so they can be passed on unchecked.
bool ParseRegno(std::string_view s, int* out) {
  uint64_t v = 0;
  if (!ParseHexU64(s, &v) || v > static_cast<uint64_t>(INT32_MAX)) return false;
  *out = static_cast<int>(v);
  return true;
}

Request Make(Request::Kind kind) {
  Request r;
  r.kind = kind;
  return r;
}

Request Bad(std::string error) {
  Request r;
  r.kind = Request::kMalformed;
  r.error = std::move(error);
  return r;
}

// "addr,length" with the length capped at kMaxMemoryLength.
bool ParseAddrLength(std::string_view s, Request* r, std::string* error) {
  std::string_view a, l;
  if (!Split(s, ',', &a, &l)) {
    *error = "expected addr,length";
    return false;
  }
  if (!ParseHexU64(a, &r->addr)) {
    *error = "bad address";
    return false;
  }
  if (!ParseHexU64(l, &r->length)) {
    *error = "bad length";
    return false;
  }
  if (r->length > kMaxMemoryLength) {
    *error = "length over the 1 MiB limit";
    return false;
  }
  return true;
}

// m addr,length / M addr,length:hex / X addr,length:binary
Request ParseMemory(char op, std::string_view args) {
  Request r;
  std::string error;
  if (op == 'm') {
    if (!ParseAddrLength(args, &r, &error)) return Bad(std::string("m: ") + error);
    r.kind = Request::kReadMem;
    return r;
  }
  // The data follows the first ':'; the address and length are hex, so a
  // ':' inside binary data cannot be mistaken for it.
  std::string_view head, data;
  if (!Split(args, ':', &head, &data)) return Bad(std::string(1, op) + ": expected ':' and data");
  if (!ParseAddrLength(head, &r, &error)) return Bad(std::string(1, op) + ": " + error);
  if (op == 'M') {
    if (!FromHex(data, &r.bytes)) return Bad("M: data is not hex");
    r.kind = Request::kWriteMem;
  } else {
    if (!Unescape(data, &r.bytes)) return Bad("X: data ends in a lone escape");
    r.kind = Request::kWriteMemBinary;
  }
  if (r.bytes.size() != r.length) return Bad(std::string(1, op) + ": data length differs from length");
  return r;
}

// c [addr] / s [addr] / C sig[;addr] / S sig[;addr]
Request ParseResume(char op, std::string_view args) {
  Request r;
  r.kind = (op == 'c' || op == 'C') ? Request::kContinue : Request::kStep;
  std::string_view addr = args;
  if (op == 'C' || op == 'S') {
    std::string_view sig = args;
    addr = std::string_view();
    Split(args, ';', &sig, &addr);
    if (!ParseSignal(sig, &r.signal)) return Bad(std::string(1, op) + ": bad signal");
    r.has_signal = true;
    if (args.find(';') != std::string_view::npos && addr.empty())
      return Bad(std::string(1, op) + ": empty address");
  }
  if (!addr.empty()) {
    if (!ParseHexU64(addr, &r.addr)) return Bad(std::string(1, op) + ": bad address");
    r.has_addr = true;
  }
  return r;
}

// Z/z type,addr,kind[;X...][;cmds:...]: conditions and commands are for
// agents that evaluate them; this stub does not, so they are skipped.
Request ParseBreak(char op, std::string_view args) {
  const std::string name(1, op);
  if (args.empty()) return Bad(name + ": missing type");
  if (args[0] < '0' || args[0] > '4') return Make(Request::kUnsupported);
  Request r;
  r.kind = op == 'Z' ? Request::kInsertBreak : Request::kRemoveBreak;
  r.break_type = args[0] - '0';
  std::string_view rest = args.substr(1);
  if (rest.empty() || rest[0] != ',') return Bad(name + ": expected ,addr,kind");
  rest = rest.substr(1);
  std::string_view cond;
  Split(rest, ';', &rest, &cond);
  std::string_view addr, kind;
  if (!Split(rest, ',', &addr, &kind)) return Bad(name + ": expected addr,kind");
  if (!ParseHexU64(addr, &r.addr)) return Bad(name + ": bad address");
  if (!ParseHexU64(kind, &r.break_kind)) return Bad(name + ": bad kind");
  return r;
}

bool ParseVContAction(std::string_view item, VContAction* a) {
  std::string_view act = item, thread;
  if (Split(item, ':', &act, &thread)) {
    ThreadId t;
    if (!ParseThreadId(thread, &t)) return false;
    a->thread = t;
  }
  if (act.empty()) return false;
  a->action = act[0];
  const std::string_view rest = act.substr(1);
  switch (a->action) {
    case 'c':
    case 's':
    case 't':
      return rest.empty();
    case 'C':
    case 'S':
      return ParseSignal(rest, &a->signal);
    case 'r': {
      std::string_view start, end;
      return Split(rest, ',', &start, &end) && ParseHexU64(start, &a->start) &&
             ParseHexU64(end, &a->end);
    }
    default:
      return false;
  }
}

Request ParseVCont(std::string_view args) {
  Request r;
  r.kind = Request::kVCont;
  while (true) {
    std::string_view item = args, rest;
    const bool more = Split(args, ';', &item, &rest);
    VContAction a;
    if (!ParseVContAction(item, &a)) return Bad("vCont: bad action '" + std::string(item) + "'");
    r.actions.push_back(a);
    if (!more) break;
    args = rest;
  }
  return r;
}

// qXfer:object:read:annex:offset,length. The annex runs to the next ':',
// as gdbserver's decode_xfer splits it.
Request ParseXfer(std::string_view args) {
  std::string_view object, op, rest, annex, range;
  if (!Split(args, ':', &object, &rest) || !Split(rest, ':', &op, &rest))
    return Bad("qXfer: expected object:operation:...");
  if (op != "read") return Make(Request::kUnsupported);
  if (object.empty()) return Bad("qXfer: empty object");
  if (!Split(rest, ':', &annex, &range)) return Bad("qXfer: expected annex:offset,length");
  Request r;
  r.kind = Request::kXferRead;
  r.object = std::string(object);
  r.annex = std::string(annex);
  std::string_view offset, length;
  if (!Split(range, ',', &offset, &length) || !ParseHexU64(offset, &r.offset) ||
      !ParseHexU64(length, &r.length))
    return Bad("qXfer: bad offset,length");
  return r;
}

// Qbtrace-conf:bts:size=V. GDB writes V as "0x%x" (remote.c
// btrace_sync_conf) and gdbserver reads it with strtoul base 16, refusing
// values over UINT_MAX; the same here.
Request ParseBtraceConf(std::string_view args) {
  constexpr std::string_view kBtsSize = "bts:size=";
  if (args.substr(0, kBtsSize.size()) != kBtsSize) return Make(Request::kUnsupported);
  std::string_view v = args.substr(kBtsSize.size());
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) v.remove_prefix(2);
  Request r;
  r.kind = Request::kBtraceConfSize;
  if (!ParseHexU64(v, &r.value) || r.value > UINT32_MAX)
    return Bad("Qbtrace-conf: bad bts size");
  return r;
}

// Packets named by a word (q..., Q..., v...): the name ends at the first
// ':', ';' or ',' (the manual keeps those out of names), so "qC" never
// matches "qCRC:...".
Request ParseNamed(std::string_view payload) {
  const size_t cut = payload.find_first_of(":;,");
  const std::string_view name = payload.substr(0, cut);
  const char sep = cut == std::string_view::npos ? 0 : payload[cut];
  const std::string_view args =
      cut == std::string_view::npos ? std::string_view() : payload.substr(cut + 1);
  const std::string name_str(name);

  struct Bare {
    const char* name;
    Request::Kind kind;
  };
  static constexpr Bare kBare[] = {
      {"qfThreadInfo", Request::kThreadInfoFirst},
      {"qsThreadInfo", Request::kThreadInfoNext},
      {"qC", Request::kCurrentThread},
      {"QStartNoAckMode", Request::kStartNoAck},
      {"vCont?", Request::kVContQuery},
  };
  for (const Bare& b : kBare) {
    if (name != b.name) continue;
    if (sep != 0) return Bad(name_str + " takes no arguments");
    return Make(b.kind);
  }

  if (name == "qSupported") {
    Request r = Make(Request::kSupported);
    if (sep == 0) return r;
    if (sep != ':') return Bad("qSupported: expected ':'");
    std::string_view rest = args;
    while (true) {
      std::string_view item = rest, tail;
      const bool more = Split(rest, ';', &item, &tail);
      if (item.empty()) return Bad("qSupported: empty feature");
      r.features.emplace_back(item);
      if (!more) break;
      rest = tail;
    }
    return r;
  }
  if (name == "qXfer") {
    if (sep != ':') return Bad("qXfer: expected ':'");
    return ParseXfer(args);
  }
  if (name == "qAttached") {
    Request r = Make(Request::kAttached);
    if (sep == 0) return r;
    if (sep != ':' || !ParseId(args, &r.pid)) return Bad("qAttached: bad pid");
    r.has_pid = true;
    return r;
  }
  if (name == "vCont") {
    if (sep != ';') return Bad("vCont: expected ';' and actions");
    return ParseVCont(args);
  }
  if (name == "vKill") {
    Request r = Make(Request::kVKill);
    if (sep != ';' || !ParseId(args, &r.pid)) return Bad("vKill: bad pid");
    r.has_pid = true;
    return r;
  }
  if (name == "Qbtrace") {
    if (sep != ':' || (args != "bts" && args != "pt" && args != "off"))
      return Bad("Qbtrace: expected bts, pt or off");
    Request r = Make(Request::kBtraceEnable);
    r.mode = std::string(args);
    return r;
  }
  if (name == "Qbtrace-conf") {
    if (sep != ':') return Bad("Qbtrace-conf: expected ':'");
    return ParseBtraceConf(args);
  }
  return Make(Request::kUnsupported);
}

}  // namespace

PacketReader::PacketReader(size_t max_payload) : max_payload_(max_payload) {}

void PacketReader::StartPacket() {
  payload_.clear();
  sum_ = 0;
  in_garbage_ = false;
  state_ = State::kPayload;
}

void PacketReader::Idle(char c, std::vector<RspEvent>* out) {
  switch (c) {
    case '$':
      StartPacket();
      return;
    case '+':
      out->push_back({RspEvent::kAck, {}});
      break;
    case '-':
      out->push_back({RspEvent::kNack, {}});
      break;
    case '\x03':
      out->push_back({RspEvent::kInterrupt, {}});
      break;
    default:
      if (!in_garbage_) out->push_back({RspEvent::kGarbage, {}});
      in_garbage_ = true;
      return;
  }
  in_garbage_ = false;
}

void PacketReader::Feed(const char* data, size_t n, std::vector<RspEvent>* out) {
  for (size_t i = 0; i < n; ++i) {
    const char c = data[i];
    switch (state_) {
      case State::kIdle:
        Idle(c, out);
        break;
      case State::kPayload:
        if (c == '#') {
          state_ = State::kChecksum1;
        } else if (c == '$') {
          out->push_back({RspEvent::kGarbage, {}});
          StartPacket();
        } else if (payload_.size() >= max_payload_) {
          out->push_back({RspEvent::kOversized, {}});
          payload_.clear();
          state_ = State::kDiscard;
        } else {
          payload_.push_back(c);
          sum_ = static_cast<uint8_t>(sum_ + static_cast<uint8_t>(c));
        }
        break;
      case State::kChecksum1:
      case State::kChecksum2: {
        // A '$' here means the checksum was cut short: report it, and do
        // not swallow the next packet's start.
        if (c == '$') {
          out->push_back({RspEvent::kBadChecksum, payload_});
          StartPacket();
          break;
        }
        const int v = HexValue(c);
        if (state_ == State::kChecksum1) {
          checksum_ = v;
          state_ = State::kChecksum2;
          break;
        }
        const bool ok = checksum_ >= 0 && v >= 0 && ((checksum_ << 4) | v) == sum_;
        out->push_back({ok ? RspEvent::kPacket : RspEvent::kBadChecksum, payload_});
        payload_.clear();
        state_ = State::kIdle;
        break;
      }
      case State::kDiscard:
        if (c == '#') state_ = State::kDiscardChecksum1;
        if (c == '$') StartPacket();
        break;
      case State::kDiscardChecksum1:
      case State::kDiscardChecksum2:
        if (c == '$') {
          StartPacket();
        } else {
          state_ = state_ == State::kDiscardChecksum1 ? State::kDiscardChecksum2 : State::kIdle;
        }
        break;
    }
  }
}

std::string EncodePacket(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 4);
  out.push_back('$');
  uint8_t sum = 0;
  auto put = [&](char c) {
    out.push_back(c);
    sum = static_cast<uint8_t>(sum + static_cast<uint8_t>(c));
  };
  for (const char c : payload) {
    if (NeedsEscape(c)) {
      put('}');
      put(static_cast<char>(c ^ 0x20));
    } else {
      put(c);
    }
  }
  out.push_back('#');
  out += ToHex(&sum, 1);
  return out;
}

bool Unescape(std::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '}') {
      out->push_back(in[i]);
      continue;
    }
    if (++i == in.size()) return false;
    out->push_back(static_cast<char>(in[i] ^ 0x20));
  }
  return true;
}

std::string ToHex(const void* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* b = static_cast<const uint8_t*>(p);
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[b[i] >> 4];
    out[2 * i + 1] = kDigits[b[i] & 0xf];
  }
  return out;
}

bool FromHex(std::string_view hex, std::string* bytes) {
  bytes->clear();
  if (hex.size() % 2 != 0) return false;
  bytes->reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = HexValue(hex[i]);
    const int lo = HexValue(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes->push_back(static_cast<char>((hi << 4) | lo));
  }
  return true;
}

bool ParseHexU64(std::string_view hex, uint64_t* value) {
  if (hex.empty() || hex.size() > 16) return false;
  uint64_t v = 0;
  for (const char c : hex) {
    const int d = HexValue(c);
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *value = v;
  return true;
}

bool ParseThreadId(std::string_view text, ThreadId* out) {
  ThreadId t;
  if (!text.empty() && text[0] == 'p') {
    std::string_view pid = text.substr(1), tid = "-1";
    Split(text.substr(1), '.', &pid, &tid);
    if (!ParseIdOrAll(pid, &t.pid) || !ParseIdOrAll(tid, &t.tid)) return false;
    // "It is an error to specify all processes but a specific thread."
    if (t.pid == ThreadId::kAll && t.tid != ThreadId::kAll) return false;
    t.has_pid = true;
  } else if (!ParseIdOrAll(text, &t.tid)) {
    return false;
  }
  *out = t;
  return true;
}

Request ParseRequest(std::string_view payload) {
  if (payload.empty()) return Make(Request::kUnsupported);
  const char op = payload[0];
  const std::string_view args = payload.substr(1);
  switch (op) {
    case '?':
    case 'g':
    case 'k': {
      if (!args.empty()) return Bad(std::string(1, op) + " takes no arguments");
      return Make(op == '?' ? Request::kHaltReason
                            : op == 'g' ? Request::kReadRegs : Request::kKill);
    }
    case 'G': {
      Request r = Make(Request::kWriteRegs);
      if (args.empty() || !FromHex(args, &r.bytes)) return Bad("G: data is not hex");
      return r;
    }
    case 'p': {
      Request r = Make(Request::kReadReg);
      if (!ParseRegno(args, &r.regno)) return Bad("p: bad register number");
      return r;
    }
    case 'P': {
      Request r = Make(Request::kWriteReg);
      std::string_view n, hex;
      if (!Split(args, '=', &n, &hex)) return Bad("P: expected n=value");
      if (!ParseRegno(n, &r.regno)) return Bad("P: bad register number");
      if (hex.empty() || !FromHex(hex, &r.bytes)) return Bad("P: value is not hex");
      return r;
    }
    case 'm':
    case 'M':
    case 'X':
      return ParseMemory(op, args);
    case 'c':
    case 's':
    case 'C':
    case 'S':
      return ParseResume(op, args);
    case 'H': {
      if (args.empty()) return Bad("H: missing operation");
      if (args[0] != 'g' && args[0] != 'c') return Make(Request::kUnsupported);
      Request r = Make(Request::kSetThread);
      r.which = args[0];
      if (!ParseThreadId(args.substr(1), &r.thread)) return Bad("H: bad thread-id");
      return r;
    }
    case 'T': {
      Request r = Make(Request::kThreadAlive);
      if (!ParseThreadId(args, &r.thread)) return Bad("T: bad thread-id");
      return r;
    }
    case 'Z':
    case 'z':
      return ParseBreak(op, args);
    case 'D': {
      Request r = Make(Request::kDetach);
      if (args.empty()) return r;
      if (args[0] != ';' || !ParseId(args.substr(1), &r.pid)) return Bad("D: bad pid");
      r.has_pid = true;
      return r;
    }
    case 'q':
    case 'Q':
    case 'v':
      return ParseNamed(payload);
    default:
      return Make(Request::kUnsupported);
  }
}

}  // namespace pfm::gdbstub
