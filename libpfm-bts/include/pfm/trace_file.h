// The trace file written by `pfmctl stream -o` and `pfmctl record -o`, and
// read by `pfmctl report`.
//
// Layout (little-endian):
//   "PFMTRACE" (8 bytes) | u32 version (1)
//   then blocks, each: u32 kind | u32 length | payload[length]
//     kind 1 HEADER  : JSON (session, target, machine, maps for symbols)
//     kind 2 RECORDS : n * 64-byte pfm_record (fixed encoding)
//     kind 3 TRAILER : JSON (counters, exit status, totals); last block
// Every block is written with one write() and flushed to the file as it
// comes, so a writer killed mid-run leaves a file readable up to its last
// complete block; a file without TRAILER is reported as cut short.
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_TRACE_FILE_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_TRACE_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernel/uapi/pfm_uapi.h"
#include "pfm/unique_fd.h"

namespace pfm {

inline constexpr char kTraceMagic[8] = {'P', 'F', 'M', 'T', 'R', 'A', 'C', 'E'};
inline constexpr uint32_t kTraceVersion = 1;
inline constexpr uint32_t kMaxTraceBlock = 64 << 20;

class TraceWriter {
 public:
  // Creates (truncates) `path` and writes the magic and the header.
  static absl::StatusOr<TraceWriter> Create(const std::string& path,
                                            const boost::json::object& header);
  absl::Status Append(const pfm_record* records, size_t n);
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
  boost::json::object trailer;
  bool complete = false;    // a TRAILER was found
  std::string cut_reason;   // why not, when !complete
};

// Reads a whole trace. A truncated or damaged tail is not an error: what was
// readable is returned with complete=false and the reason. A file that is not
// a trace is INVALID_ARGUMENT; a missing one NOT_FOUND.
absl::StatusOr<Trace> ReadTrace(const std::string& path);

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_TRACE_FILE_H_
