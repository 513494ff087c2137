// A process's executable mappings: the one struct, the one /proc/PID/maps
// parser and the one binary encoding, for everyone who handles them — the
// soft-BTS tracer (which reads them and ships them to pfmd over its socket),
// pfmd (which reports them to clients), the trace file's MAPS blocks
// (libpfm-bts/trace_file.h) and the symbolizer (libpfm-bts/symbolizer.h).
//
// Binary encoding of a list of mappings (little-endian, no padding):
//
//   u32 count                         at most kMaxMappings
//   count x {
//     u64 start, u64 end, u64 offset  start <= end
//     u32 flags                       bit 0 writable, bit 1 shared, bit 2
//                                     build-id follows; the other bits are 0
//     u32 path_len                    at most kMaxMappingPath
//     u8  path[path_len]              no terminator
//     if flags bit 2:
//       u8 id_len                     1 to kMaxBuildIdBytes
//       u8 build_id[id_len]
//   }
//
// and nothing after the last entry. An entry is kMappingFixedBytes plus its
// path, plus 1 + id_len with a build-id. Bit 2 came with build-ids (issue
// 17): an encoding without it reads as before, and an entry without a
// build-id is encoded exactly as before, so the tracer's messages (which carry
// none) and older MAPS blocks are unchanged. The decoder trusts nothing:
// every length is checked against what is left before it is used, a count
// that the remaining bytes cannot hold is refused before anything is
// allocated, and a decoder refusing input never reads outside it.
//
// Errors follow kernel/: a negative errno, with one sentence in an optional
// ErrorDetail (userspace/ turns it into an absl::Status). Pure functions, no
// globals; they allocate only the vectors and strings they fill.
// Thread-compatible.
#ifndef PFM_KERNEL_UAPI_PROC_MAPS_H_
#define PFM_KERNEL_UAPI_PROC_MAPS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernel/uapi/pfm_error.h"

namespace pfm {

// Bounds of what the parser yields and the decoder accepts. 65536 is above
// the kernel's default vm.max_map_count (65530), so only a process that
// raised that limit can have more executable mappings than are kept.
// 4096 is PATH_MAX: the kernel prints no longer path in /proc/PID/maps.
inline constexpr uint32_t kMaxMappings = 65536;
inline constexpr uint32_t kMaxMappingPath = 4096;
// The encoding's sizes: the count, and one entry without its path.
inline constexpr size_t kMappingsHeaderBytes = 4;
inline constexpr size_t kMappingFixedBytes = 32;
// Flag bits of an encoded entry.
inline constexpr uint32_t kMappingWritable = 1u << 0;
inline constexpr uint32_t kMappingShared = 1u << 1;
inline constexpr uint32_t kMappingHasBuildId = 1u << 2;
// The longest build-id an entry carries. GNU ld writes 20 bytes (sha1) or
// 16 (md5, uuid), lld 8 (xxhash) to 20; 64 leaves room without letting a
// note of arbitrary size into a MAPS block.
inline constexpr size_t kMaxBuildIdBytes = 64;

// One executable mapping: [start, end) maps the file at `path` from file
// offset `offset`. `path` is as the kernel prints it: empty for anonymous
// memory (JIT code), "[vdso]" and the like for pseudo-mappings, with a
// " (deleted)" suffix for a file removed since.
struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;
  std::string path;
  bool writable = false;  // 'w' in the permissions
  bool shared = false;    // 's' (MAP_SHARED) rather than 'p'
  // The file's GNU build-id (the NT_GNU_BUILD_ID note's bytes, not hex),
  // read when the trace was recorded; empty when unknown (/proc/PID/maps
  // does not give it) or the file has none.
  std::string build_id;

  bool operator==(const Mapping& o) const {
    return start == o.start && end == o.end && offset == o.offset &&
           path == o.path && writable == o.writable && shared == o.shared &&
           build_id == o.build_id;
  }
  bool operator!=(const Mapping& o) const { return !(*this == o); }
};

// What the encoding can carry (and what the parser yields): start <= end,
// a path of at most kMaxMappingPath bytes and a build-id of at most
// kMaxBuildIdBytes.
inline bool IsEncodableMapping(const Mapping& m) {
  return m.start <= m.end && m.path.size() <= kMaxMappingPath &&
         m.build_id.size() <= kMaxBuildIdBytes;
}

// A process's mappings at one moment, as pfmd reports them and a trace
// file's MAPS block holds them. `time_ns` is when pfmd received them, on the
// clock the host drivers stamp records with (CLOCK_MONOTONIC); records from
// then on were taken with these mappings in place. 0 = not known.
struct ProcessMaps {
  uint64_t time_ns = 0;
  int32_t pid = 0;
  std::vector<Mapping> mappings;
  // The process had more executable mappings than one list carries (over
  // kMaxMappings, or over the tracer's 16 MiB of encoding:
  // tracer_protocol.h kMaxMapsListBytes): `mappings` are its lowest ones,
  // in address order, and addresses above the last are not named.
  bool cut = false;
};

// What ParseProcMaps does with a line that does not have the shape
// "start-end perms offset dev inode [path]" (hex start, end and offset,
// start <= end, perms four characters from [r-][w-][x-][ps], a path of at
// most kMaxMappingPath bytes).
enum class MalformedLine {
  kSkip,    // leave it out (the tracer: a moving target, best effort)
  kRefuse,  // fail, naming it (the symbolizer: a file handed to it)
};

// Replaces *out with the executable mappings of `text` (the contents of
// /proc/PID/maps), in the order of the text (address order), paths with the
// kernel's padding removed but otherwise as printed. Empty lines are
// ignored. At most kMaxMappings are kept: with kSkip the first ones, and
// *cut (when given) says whether any was left out for that; with kRefuse
// more is an error. Returns 0; with kRefuse, -EINVAL "maps line N is
// malformed: '...'" for the first malformed line, and -E2BIG when there
// are more than kMaxMappings executable mappings, *out then empty. Every
// mapping it yields is IsEncodableMapping.
int ParseProcMaps(std::string_view text, MalformedLine malformed,
                  std::vector<Mapping>* out, ErrorDetail* d,
                  bool* cut = nullptr);

// Keeps the mappings of files only, for a symbolizer that opens them:
// drops anonymous and pseudo-mappings (paths not starting with '/') and
// strips a " (deleted)" suffix (the file may still be there under that
// name: a package upgrade replaces it). Order is kept.
void KeepFileBacked(std::vector<Mapping>* maps);

// Replaces *out with the encoding of the longest prefix of `maps` that is
// at most kMaxMappings long, whose entries are all IsEncodableMapping, and
// whose encoding fits in `max_bytes` (the count is always written, so a
// `max_bytes` under kMappingsHeaderBytes still gives those 4 bytes).
// Returns the length of that prefix: callers that need every mapping
// compare it with maps.size().
size_t EncodeMappings(const std::vector<Mapping>& maps, size_t max_bytes,
                      std::string* out);
// The same for the mappings from maps[first] on (none when first is past
// the end): a long list in parts, each with its own count.
size_t EncodeMappings(const std::vector<Mapping>& maps, size_t first,
                      size_t max_bytes, std::string* out);

// Replaces *out with the mappings encoded in exactly `bytes`. Returns 0, or
// -EINVAL with the reason (and the byte offset) in *d for anything that is
// not an encoding as above: short input, a count over kMaxMappings or more
// than the bytes can hold, an entry with start > end, unknown flag bits, an
// over-long path, a build-id of 0 or over kMaxBuildIdBytes bytes or cut
// short, trailing bytes. *out is empty on failure.
int DecodeMappings(std::string_view bytes, std::vector<Mapping>* out,
                   ErrorDetail* d);

}  // namespace pfm

#endif  // PFM_KERNEL_UAPI_PROC_MAPS_H_
