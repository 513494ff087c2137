#include <sys/user.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_targets.h"
#include "userspace/gdbstub/amd64_regs.h"
#include "userspace/gdbstub/btrace_xml.h"
#include "userspace/gdbstub/rsp.h"

namespace pfm::fuzz {

namespace {

using gdbstub::Request;
using gdbstub::RspEvent;

constexpr size_t kMaxPayload = 16 * 1024;

void Check(bool ok) {
  if (!ok) std::abort();
}

// Reads every field a stub would read, so sanitizers see each one used.
volatile uint64_t g_sink;

void Touch(const gdbstub::ThreadId& t) { g_sink = g_sink + t.pid + t.tid + t.has_pid; }

void TouchRequest(const Request& r) {
  uint64_t s = r.addr + r.has_addr + r.length + r.bytes.size() + r.regno + r.signal +
               r.has_signal + r.which + r.break_type + r.break_kind + r.offset + r.pid +
               r.has_pid + r.value + r.object.size() + r.annex.size() + r.mode.size();
  for (const std::string& f : r.features) s += f.size();
  for (const gdbstub::VContAction& a : r.actions) {
    s += a.action + a.signal + a.start + a.end;
    if (a.thread) Touch(*a.thread);
  }
  Touch(r.thread);
  g_sink = g_sink + s;
}

// A 'G' block decodes, and what it decodes to survives encode/decode.
void CheckRegisterBlock(const std::string& bytes) {
  user_regs_struct regs;
  user_fpregs_struct fp;
  std::memset(&regs, 0, sizeof(regs));
  std::memset(&fp, 0, sizeof(fp));
  Check(gdbstub::DecodeAmd64(bytes, &regs, &fp));
  user_regs_struct regs2 = regs;
  user_fpregs_struct fp2 = fp;
  Check(gdbstub::DecodeAmd64(gdbstub::EncodeAmd64(regs, fp), &regs2, &fp2));
  Check(std::memcmp(&regs, &regs2, sizeof(regs)) == 0);
  Check(std::memcmp(&fp, &fp2, sizeof(fp)) == 0);
}

// A qXfer read served the way the stub serves btrace documents.
void ServeXfer(const Request& r) {
  gdbstub::BtraceRead read = gdbstub::BtraceRead::kAll;
  std::string doc;
  if (r.object == "btrace" && gdbstub::ParseBtraceRead(r.annex, &read)) {
    doc = gdbstub::BtsXml({{r.offset, r.length}, {r.length, r.offset}}, r.offset, read);
  } else if (r.object == "btrace-conf") {
    doc = gdbstub::BtraceConfXml(r.length);
  } else {
    return;
  }
  std::string reply;
  const uint64_t length = r.length < 4096 ? r.length : 4096;
  if (!gdbstub::XferSlice(doc, r.offset, length, &reply)) {
    Check(length == 0);
    return;
  }
  Check(!reply.empty() && (reply[0] == 'm' || reply[0] == 'l'));
  Check(reply.size() - 1 <= length);
  if (reply[0] == 'm') Check(reply.size() - 1 == length);
}

void HandlePacket(const std::string& payload) {
  Check(payload.size() <= kMaxPayload);
  const Request r = gdbstub::ParseRequest(payload);
  TouchRequest(r);
  switch (r.kind) {
    case Request::kMalformed:
      Check(!r.error.empty());
      break;
    case Request::kWriteMem:
    case Request::kWriteMemBinary:
      Check(r.bytes.size() == r.length && r.length <= gdbstub::kMaxMemoryLength);
      break;
    case Request::kReadMem:
      Check(r.length <= gdbstub::kMaxMemoryLength);
      break;
    case Request::kWriteRegs:
      if (r.bytes.size() == gdbstub::kAmd64RegsBytes) CheckRegisterBlock(r.bytes);
      break;
    case Request::kReadReg:
    case Request::kWriteReg: {
      size_t offset = 0, size = 0;
      if (gdbstub::RegisterSlice(r.regno, &offset, &size))
        Check(offset + size <= gdbstub::kAmd64RegsBytes);
      break;
    }
    case Request::kXferRead:
      ServeXfer(r);
      break;
    default:
      break;
  }

  // Whatever the payload unescapes to goes back out as one packet that a
  // reader delivers as the same bytes.
  std::string plain;
  if (!gdbstub::Unescape(payload, &plain)) return;
  const std::string framed = gdbstub::EncodePacket(plain);
  gdbstub::PacketReader again(2 * plain.size());
  std::vector<RspEvent> events;
  again.Feed(framed.data(), framed.size(), &events);
  Check(events.size() == 1 && events[0].kind == RspEvent::kPacket);
  std::string back;
  Check(gdbstub::Unescape(events[0].payload, &back) && back == plain);
}

}  // namespace

int FuzzRsp(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks where the stream is cut, so packets arrive split
  // the ways a socket may split them.
  const size_t cut = data[0] % size;
  const char* bytes = reinterpret_cast<const char*>(data);
  gdbstub::PacketReader reader(kMaxPayload);
  std::vector<RspEvent> events;
  reader.Feed(bytes, cut, &events);
  Check(reader.buffered() <= kMaxPayload);
  reader.Feed(bytes + cut, size - cut, &events);
  Check(reader.buffered() <= kMaxPayload);
  for (const RspEvent& e : events) {
    if (e.kind == RspEvent::kPacket) HandlePacket(e.payload);
  }
  return 0;
}

}  // namespace pfm::fuzz

#ifdef PFM_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pfm::fuzz::FuzzRsp(data, size);
}
#endif
