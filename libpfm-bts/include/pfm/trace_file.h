// The trace file written by `pfmctl stream -o` and `pfmctl record -o`, and
// read by `pfmctl report`.
//
// Layout (little-endian):
//   "PFMTRACE" (8 bytes) | u32 version (2)
//   then blocks, each: u32 kind | u32 length | payload[length]
//     kind 1 HEADER  : JSON (session, kind, ring; record: command, pid, spec)
//     kind 2 RECORDS : n * 64-byte pfm_record (fixed encoding)
//     kind 3 TRAILER : JSON (counters, exit status, totals); last block
//     kind 4 MAPS    : the target's executable mappings, for symbols:
//                      u64 time_ns | i32 pid | u32 reserved (0: a reader
//                      takes anything else for damage) |
//                      mappings in kernel/uapi/proc_maps.h's encoding
//                      (u32 count, then per mapping u64 start, u64 end,
//                      u64 offset, u32 flags, u32 path_len, path bytes)
// MAPS blocks may come anywhere after the header, each a whole list as of
// time_ns (ProcessMaps); `report` symbolizes with the last one that has
// any mappings.
// Version 1 carried the mappings as hex strings in the trailer's JSON; this
// version refuses it (re-record).
// Every block is written with one write() and flushed to the file as it
// comes, so a writer killed mid-run leaves a file readable up to its last
// complete block; a file without TRAILER is reported as cut short. A
// RECORDS block cut by the end of the file gives up its whole records: a
// cut loses at most the one partial record, not the block (up to 64 Ki
// records).
//
// TraceWriter is not thread-safe; ReadTrace is (it shares nothing).
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_TRACE_FILE_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_TRACE_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernel/uapi/pfm_uapi.h"
#include "kernel/uapi/proc_maps.h"
#include "pfm/unique_fd.h"

namespace pfm {

inline constexpr char kTraceMagic[8] = {'P', 'F', 'M', 'T', 'R', 'A', 'C', 'E'};
inline constexpr uint32_t kTraceVersion = 2;
inline constexpr uint32_t kMaxTraceBlock = 64 << 20;

class TraceWriter {
 public:
  // Creates (truncates) `path` and writes the magic and the header.
  static absl::StatusOr<TraceWriter> Create(const std::string& path,
                                            const boost::json::object& header);
  absl::Status Append(const pfm_record* records, size_t n);
  // Writes a MAPS block. INVALID_ARGUMENT, writing nothing, when the list
  // cannot be carried whole: more than kMaxMappings, a mapping that is not
  // IsEncodableMapping, or a block over kMaxTraceBlock.
  absl::Status AppendMaps(const ProcessMaps& maps);
  absl::Status Finish(const boost::json::object& trailer);
  uint64_t records() const { return records_; }

 private:
  explicit TraceWriter(UniqueFd fd) : fd_(std::move(fd)) {}
  absl::Status WriteBlock(uint32_t kind, const void* data, size_t len);
  UniqueFd fd_;
  uint64_t records_ = 0;
};

struct Trace {
  boost::json::object header;
  std::vector<pfm_record> records;
  std::vector<ProcessMaps> maps;  // the MAPS blocks, in file order
  boost::json::object trailer;
  bool complete = false;    // a TRAILER was found
  // Why not, when !complete: where the reading stopped ("truncated block
  // at byte N", "no trailer: ..."), without a "cut short" of its own (the
  // caller says that).
  std::string cut_reason;
};

// Reads a whole trace. A truncated or damaged tail is not an error: what was
// readable is returned with complete=false and the reason; a damaged block
// (a RECORDS length that is not whole records, JSON that is not an object,
// a MAPS block that does not decode) ends the reading the same way. A file
// that is not a trace, or of another version, is INVALID_ARGUMENT, and so
// is a directory or anything else that is not a regular file (a device or
// FIFO is never read); a missing one NOT_FOUND, an unreadable one
// PERMISSION_DENIED.
absl::StatusOr<Trace> ReadTrace(const std::string& path);

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_TRACE_FILE_H_
