// The documents a stub serves GDB for "record btrace bts": the branch trace
// (qXfer:btrace:read, gdb/features/btrace.dtd) and its configuration
// (qXfer:btrace-conf:read, btrace-conf.dtd), spelled byte for byte as
// gdbserver writes them (gdbserver/linux-low.cc read_btrace and
// read_btrace_conf), plus the qXfer reply framing. Pure functions.
#ifndef PFM_USERSPACE_GDBSTUB_BTRACE_XML_H_
#define PFM_USERSPACE_GDBSTUB_BTRACE_XML_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pfm::gdbstub {

struct Branch {
  uint64_t from;
  uint64_t to;
};

// The annex of qXfer:btrace:read.
//   all:   the whole trace (GDB's first read).
//   delta: what happened since the last read, stitched by GDB onto the
//          trace it has (what GDB asks for once it has a trace).
//   new:   the whole trace, or nothing if nothing happened since the last
//          read (GDB's fallback when delta fails).
enum class BtraceRead { kAll, kNew, kDelta };

// "all", "new" or "delta"; false for anything else.
bool ParseBtraceRead(std::string_view annex, BtraceRead* read);

// The BTS trace as blocks of sequential execution, newest first, built as
// gdb/nat/linux-btrace.c perf_event_read_bts builds them: the newest block
// ends at pc; walking the branches newest to oldest, each closes a block
// {begin = branch.to, end} and the next block ends at branch.from; a last
// block {begin = 0, end} stands for the execution before the oldest branch,
// whose start is unknown. So n branches give n + 1 blocks.
//
// For kDelta that last block is kept: GDB fills its begin in from the end of
// the trace it already has (btrace.c btrace_stitch_bts asserts begin == 0),
// and with no branches the one block {0, pc} tells it nothing ran. For kAll
// and kNew it is dropped, as linux_read_bts does ("There is no way of
// filling in its zeroed BEGIN element"); GDB would otherwise decode from
// address 0 and report a gap. For kNew with nothing new since the last read
// send EmptyBtraceXml instead.
//
// A "new" or "delta" read consumes the trace: build the document once, when
// the offset is 0, and serve later chunks of the same read (XferSlice) from
// that copy, as gdbserver's handle_qxfer_btrace caches it.
std::string BtsXml(const std::vector<Branch>& oldest_first, uint64_t pc, BtraceRead read);

// A trace document with no blocks. GDB parses it as no data: the answer to
// "new" when nothing happened (gdbserver's read_btrace with no blocks).
std::string EmptyBtraceXml();

// The btrace-conf document: a <bts size="0x..."/> element when bts_size is
// non-zero (recording in BTS format with that ring size in bytes), none when
// it is 0 (not recording; GDB then leaves the thread alone).
std::string BtraceConfXml(uint64_t bts_size);

// One qXfer read reply for `whole`, unescaped (EncodePacket escapes it):
// "m" and whole[offset, offset + length) when more data follows that, else
// "l" and the rest ("l" alone when offset is at or past the end). The caller
// clamps length to what it will send in one packet. False for length 0,
// which could never make progress.
bool XferSlice(std::string_view whole, uint64_t offset, uint64_t length, std::string* reply);

}  // namespace pfm::gdbstub

#endif  // PFM_USERSPACE_GDBSTUB_BTRACE_XML_H_
