// The trace file written by `pfmctl stream -o` and `pfmctl record -o`, and
// read by `pfmctl report`.
//
// Layout (little-endian):
//   "PFMTRACE" (8 bytes) | u32 version (3; 2 for a file of fixed records only)
//   then blocks, each: u32 kind | u32 length | payload[length]
//     kind 1 HEADER  : JSON (session, kind, ring; record: command, pid, spec)
//     kind 2 RECORDS : n * 64-byte pfm_record (fixed encoding)
//     kind 6 RECORDS : compact: u32 n | u32 flags (0; anything else is
//                      damage) | n records in the compact encoding of
//                      rings (kernel/uapi/compact_codec.h), the codec state
//                      reset at the block's start; no PAD, no bytes after
//                      the n-th record (version 3, 2026-11-27)
//     kind 3 TRAILER : JSON (counters, exit status, totals); last block
//     kind 4 MAPS    : the target's executable mappings, for symbols:
//                      u64 time_ns | i32 pid | u32 reserved (0: a reader
//                      takes anything else for damage) |
//                      mappings in kernel/uapi/proc_maps.h's encoding
//                      (u32 count, then per mapping u64 start, u64 end,
//                      u64 offset, u32 flags, u32 path_len, path bytes)
//     kind 5 MAPS    : a MAPS block whose u32 is flags, bit 0 set: the
//                      list is cut (ProcessMaps::cut); any other bit is
//                      damage. Written only for a cut list (2026-11-27), so
//                      that a reader from before skips it as a kind it
//                      does not know (that list's names, not the rest of
//                      the file, are lost to it); a whole list stays kind 4.
// A block of any other kind (a later version's) is skipped by its length,
// unread; so is a second HEADER. No block is longer than kMaxTraceBlock: a
// longer length is damage.
// MAPS blocks may come anywhere after the header, each a whole list as of
// time_ns (ProcessMaps); `report` and `script` name a record with the maps
// in effect in its process: of the blocks with mappings of its pid, the
// last taken at or before its time, else the pid's first; a pid without
// blocks gets the first block taken at or after its time, else the last
// (userspace/pfmctl/report.h, TraceSymbols::MapsAt).
// Version 1 carried the mappings as hex strings in the trailer's JSON; this
// version refuses it (re-record).
// Every block is written with one write() and flushed to the file as it
// comes, so a writer killed mid-run leaves a file readable up to its last
// complete block; a file without TRAILER is reported as cut short. A
// RECORDS block cut by the end of the file gives up its whole records: a
// cut loses at most the one partial record, not the block (up to 64 Ki
// records), in either encoding.
//
// Records are written compact by default (TraceEncoding): about 3 bytes a
// branch of a real trace against 64, so a program's trace is a twentieth of
// the fixed file. The encoding is lossless for what rings deliver (ring
// readers zero the union bytes a type does not use, NormalizeRecord); a
// record it would not give back exactly (another type, non-zero unused
// bytes) is written in a fixed block, so every file reads back exactly the
// records appended, in order. A reader of version 2 refuses version 3 by
// its number rather than skipping compact blocks as unknown kinds.
//
// TraceWriter and TraceReader are not thread-safe; ReadTrace is (it shares
// nothing).
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_TRACE_FILE_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_TRACE_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernel/uapi/compact_codec.h"
#include "kernel/uapi/pfm_uapi.h"
#include "kernel/uapi/proc_maps.h"
#include "pfm/unique_fd.h"

namespace pfm {

inline constexpr char kTraceMagic[8] = {'P', 'F', 'M', 'T', 'R', 'A', 'C', 'E'};
// The version written with compact blocks, and the newest read.
inline constexpr uint32_t kTraceVersion = 3;
// The version written by a fixed-only writer (TraceEncoding::kFixed): what
// pfmctl wrote until 2026-11-27, still read.
inline constexpr uint32_t kTraceVersionFixed = 2;
inline constexpr uint32_t kMaxTraceBlock = 64 << 20;

// What perf record does with an existing perf.data: a regular file at
// `path` that is not empty is renamed to `path` + ".old" (replacing one
// there), so a new recording never overwrites the last one in place; a
// missing or empty file, or anything that is not a regular file (a FIFO,
// /dev/null, a symlink: unlike perf, which follows it, so that `-o
// /dev/stdout` never renames /dev/stdout), is left alone. INVALID_ARGUMENT "cannot keep PATH as
// PATH.old: <strerror>" when the rename fails (nothing was moved).
// *moved (if given): whether it was moved.
absl::Status KeepAsOld(const std::string& path, bool* moved = nullptr);

// How TraceWriter writes records: compact blocks (version 3), or 64-byte
// fixed records only (version 2, readable by pfmctl from before compact
// blocks; tests that lay files out by hand).
enum class TraceEncoding { kCompact, kFixed };

// Compact bytes a block holds at most (the codec state resets per block; a
// bigger Append is several blocks).
inline constexpr size_t kCompactTraceBlockBytes = 1 << 20;

// Records a TraceReader hands out: a vector whose resize leaves new records
// unset instead of zeroing them (the reader writes every record it hands
// out), so that each piece is written once, not zeroed first (8% of a
// compact file's reading before, 2026-11-27).
template <typename T>
struct NoInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() = default;
  template <typename U>
  NoInitAllocator(const NoInitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using TraceRecords = std::vector<pfm_record, NoInitAllocator<pfm_record>>;

class TraceWriter {
 public:
  // Creates (truncates) `path` and writes the magic and the header.
  static absl::StatusOr<TraceWriter> Create(const std::string& path,
                                            const boost::json::object& header,
                                            TraceEncoding encoding = TraceEncoding::kCompact);
  // Writes records[0, n) as one block (more for a big n, or where a record
  // must go fixed in a compact file), each block with one writev.
  absl::Status Append(const pfm_record* records, size_t n);
  // Writes a MAPS block. INVALID_ARGUMENT, writing nothing, when the list
  // cannot be carried whole: more than kMaxMappings, a mapping that is not
  // IsEncodableMapping, or a block over kMaxTraceBlock.
  absl::Status AppendMaps(const ProcessMaps& maps);
  absl::Status Finish(const boost::json::object& trailer);
  uint64_t records() const { return records_; }
  // Bytes written to the file so far (magic and block headers included).
  uint64_t bytes() const { return bytes_; }

 private:
  TraceWriter(UniqueFd fd, std::string path, TraceEncoding encoding)
      : fd_(std::move(fd)), path_(std::move(path)), encoding_(encoding) {}
  absl::Status WriteBlock(uint32_t kind, const void* data, size_t len);
  absl::Status AppendFixed(const pfm_record* records, size_t n);
  absl::Status AppendCompact(const pfm_record* records, size_t n);
  UniqueFd fd_;
  std::string path_;  // for errors: "cannot write PATH: ..."
  TraceEncoding encoding_;
  std::vector<uint8_t> encoded_;  // a compact block being put together
  uint64_t records_ = 0;
  uint64_t bytes_ = 0;
};

// Reads a trace file block by block, holding at most one piece at a time:
// up to kTraceReaderChunk records of a RECORDS block (a block is handed out
// in pieces, whatever its size), or one MAPS or JSON block. For readers that
// must not hold the whole file (`pfmctl report`, `pfmctl script`).
//
// Open's errors are ReadTrace's: INVALID_ARGUMENT for a file that is not a
// trace, of another version, or not a regular file (a directory, a device,
// a FIFO: never read), NOT_FOUND, PERMISSION_DENIED. The HEADER must be the
// file's first block (TraceWriter writes it so); without it, or cut inside
// it, INVALID_ARGUMENT "trace has no header". Like every block it is held
// only as its bytes are read: a length the file does not have allocates
// nothing for the missing part.
//
// Next() then walks the file. A truncated or damaged tail is not an error:
// Next() returns kEnd with complete() false and cut_reason() saying where
// the reading stopped, after handing out what was readable (the whole
// records of a RECORDS block cut by the end of the file included). Only a
// failing read() is an error (INVALID_ARGUMENT "cannot read ..."). The file
// is read to its end as it is at the time: a file still being written is
// read as far as it goes.
class TraceReader {
 public:
  enum class Event {
    kRecords,  // records() holds the next piece of a RECORDS block
    kMaps,     // maps() holds a MAPS block
    kTrailer,  // trailer() holds the TRAILER: the trace is complete
    kEnd,      // nothing more (after kTrailer, or cut: see cut_reason())
  };

  struct Options {
    // RECORDS blocks are not handed out (records() stays empty, kRecords is
    // not returned): a pass over a big file for its MAPS blocks, trailer and
    // record count. Fixed blocks are skipped with lseek; compact ones are
    // decoded (about 65 M records/s), since only decoding finds where damaged
    // bytes would stop a reading. The cut is the one a reading finds, so the
    // same blocks are handed out.
    bool skip_records = false;
    // With skip_records: compact blocks are skipped unread as well, their
    // records counted by the count they declare. Bytes that would not
    // decode then go unnoticed (records_read() and the cut may differ from
    // a reading's): for a pass that wants only the MAPS blocks (report's
    // first pass), not a count to rely on (export's).
    bool unchecked_compact = false;
  };

  static absl::StatusOr<TraceReader> Open(const std::string& path, Options options);
  static absl::StatusOr<TraceReader> Open(const std::string& path) {
    return Open(path, Options());
  }

  absl::StatusOr<Event> Next();

  const boost::json::object& header() const { return header_; }
  // Valid until the next Next().
  const TraceRecords& records() const { return records_; }
  const ProcessMaps& maps() const { return maps_; }
  const boost::json::object& trailer() const { return trailer_; }
  bool complete() const { return complete_; }
  // Why the reading stopped short, once Next() returned kEnd without a
  // trailer ("truncated block at byte N", "no trailer: ..."), without a "cut
  // short" of its own (the caller says that).
  const std::string& cut_reason() const { return cut_reason_; }
  // Records handed out (or skipped) so far.
  uint64_t records_read() const { return records_read_; }
  // The file's size when it was opened (for a reserve).
  uint64_t file_size() const { return file_size_; }

 private:
  TraceReader(UniqueFd fd, std::string path, Options options)
      : fd_(std::move(fd)), path_(std::move(path)), options_(options) {}
  // Reads up to n bytes at the current offset; fewer only at the end of
  // the file.
  absl::StatusOr<size_t> ReadUpTo(char* dst, size_t n);
  // Reads a block's `len` bytes into *out; false when the file ends first.
  absl::StatusOr<bool> ReadPayload(uint32_t len, std::string* out);
  // The bytes after the current offset in the file as it is now.
  uint64_t BytesLeftNow() const;
  // Moves the offset `len` bytes on, reading nothing.
  absl::Status SkipBytes(uint64_t len);
  // Ends the reading with `why` as the cut reason.
  Event Cut(std::string why);
  absl::StatusOr<Event> NextRecords();
  // A compact block: its prefix read, then pieces decoded as bytes come.
  absl::StatusOr<Event> StartCompact(uint64_t at, uint32_t len);
  absl::StatusOr<Event> NextCompact();
  // Reads up to `want` more of the block's bytes into compact_buf_
  // (dropping what was decoded); false when the file ended first.
  absl::StatusOr<bool> RefillCompact(size_t want);

  UniqueFd fd_;
  std::string path_;
  Options options_;
  uint64_t off_ = 0;        // bytes consumed
  uint64_t file_size_ = 0;
  bool done_ = false;
  boost::json::object header_;
  TraceRecords records_;
  ProcessMaps maps_;
  boost::json::object trailer_;
  bool complete_ = false;
  std::string cut_reason_;
  uint64_t records_read_ = 0;
  // The RECORDS block being handed out: where it starts, its records, and
  // how many are left.
  uint64_t block_off_ = 0;
  uint64_t block_records_ = 0;
  uint64_t block_left_ = 0;
  // A compact block's state: its bytes not yet read from the file, those
  // read and not yet decoded (compact_buf_ from compact_pos_), the codec
  // state, and whether the file ended inside the block.
  bool compact_ = false;
  uint64_t compact_unread_ = 0;
  std::vector<uint8_t> compact_buf_;
  size_t compact_pos_ = 0;
  CodecState compact_state_;
  bool compact_file_cut_ = false;
};

// Records per kRecords piece of TraceReader: 256 KiB.
inline constexpr size_t kTraceReaderChunk = 4096;

// A later pass over a trace file: `fn(const pfm_record&)` (returning
// absl::Status) on its first `n` records in file order, or as many as it
// has; stops at fn's first error and returns it. `n` is what an earlier
// pass counted, since a file still being written may have more by now.
template <typename Fn>
absl::Status ForFirstRecords(const std::string& path, uint64_t n, Fn&& fn) {
  absl::StatusOr<TraceReader> reader = TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  while (n > 0) {
    absl::StatusOr<TraceReader::Event> e = reader->Next();
    if (!e.ok()) return e.status();
    if (*e == TraceReader::Event::kEnd) break;
    if (*e != TraceReader::Event::kRecords) continue;
    for (const pfm_record& r : reader->records()) {
      if (n == 0) break;
      if (absl::Status s = fn(r); !s.ok()) return s;
      --n;
    }
  }
  return absl::OkStatus();
}

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
  // The records the file holds (as far as it reads): records.size(), or
  // their count alone when read with skip_records.
  uint64_t records_in_file = 0;
};

// Reads a whole trace (through TraceReader: the same errors and cuts). A
// truncated or damaged tail is not an error: what was
// readable is returned with complete=false and the reason; a damaged block
// (a length over kMaxTraceBlock, a RECORDS length that is not whole
// records, JSON that is not an object, a MAPS block that does not decode)
// ends the reading the same way ("damaged ... at byte N"). A file
// that is not a trace, or of another version, is INVALID_ARGUMENT, and so
// is a directory or anything else that is not a regular file (a device or
// FIFO is never read); a missing one NOT_FOUND, an unreadable one
// PERMISSION_DENIED. With options.skip_records, one cheap pass for all but
// the records (records stays empty; records_in_file counts them).
absl::StatusOr<Trace> ReadTrace(const std::string& path, TraceReader::Options options);
inline absl::StatusOr<Trace> ReadTrace(const std::string& path) {
  return ReadTrace(path, TraceReader::Options());
}

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_TRACE_FILE_H_
