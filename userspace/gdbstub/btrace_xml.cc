#include "userspace/gdbstub/btrace_xml.h"

#include <cinttypes>
#include <cstdio>

namespace pfm::gdbstub {

namespace {

// gdbserver's header lines (linux-low.cc read_btrace / read_btrace_conf).
constexpr char kBtraceHead[] =
    "<!DOCTYPE btrace SYSTEM \"btrace.dtd\">\n"
    "<btrace version=\"1.0\">\n";
constexpr char kBtraceTail[] = "</btrace>\n";

// paddress() prints lower-case hex without leading zeros, "0x0" for zero.
void AppendBlock(std::string* out, uint64_t begin, uint64_t end) {
  char buf[80];
  std::snprintf(buf, sizeof(buf), "<block begin=\"0x%" PRIx64 "\" end=\"0x%" PRIx64 "\"/>\n",
                begin, end);
  *out += buf;
}

}  // namespace

bool ParseBtraceRead(std::string_view annex, BtraceRead* read) {
  if (annex == "all") {
    *read = BtraceRead::kAll;
  } else if (annex == "new") {
    *read = BtraceRead::kNew;
  } else if (annex == "delta") {
    *read = BtraceRead::kDelta;
  } else {
    return false;
  }
  return true;
}

std::string BtsXml(const std::vector<Branch>& oldest_first, uint64_t pc, BtraceRead read) {
  std::string out = kBtraceHead;
  uint64_t end = pc;
  for (auto it = oldest_first.rbegin(); it != oldest_first.rend(); ++it) {
    AppendBlock(&out, it->to, end);
    end = it->from;
  }
  if (read == BtraceRead::kDelta) AppendBlock(&out, 0, end);
  out += kBtraceTail;
  return out;
}

std::string EmptyBtraceXml() { return std::string(kBtraceHead) + kBtraceTail; }

std::string BtraceConfXml(uint64_t bts_size) {
  std::string out =
      "<!DOCTYPE btrace-conf SYSTEM \"btrace-conf.dtd\">\n"
      "<btrace-conf version=\"1.0\">\n";
  if (bts_size != 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "<bts size=\"0x%" PRIx64 "\" />\n", bts_size);
    out += buf;
  }
  out += "</btrace-conf>\n";
  return out;
}

bool XferSlice(std::string_view whole, uint64_t offset, uint64_t length, std::string* reply) {
  if (length == 0) return false;
  if (offset >= whole.size()) {
    *reply = "l";
    return true;
  }
  const std::string_view rest = whole.substr(offset);
  const bool more = length < rest.size();
  *reply = more ? "m" : "l";
  reply->append(rest.substr(0, more ? length : rest.size()));
  return true;
}

}  // namespace pfm::gdbstub
