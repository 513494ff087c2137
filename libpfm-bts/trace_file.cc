#include "pfm/trace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace pfm {
namespace {

enum BlockKind : uint32_t { kHeader = 1, kRecords = 2, kTrailer = 3, kMaps = 4 };

// A MAPS block's fixed part: u64 time_ns, i32 pid, u32 reserved.
constexpr size_t kMapsPrefix = 16;

void PutLe(char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

// A MAPS block's payload into *out; false with *why for anything else.
bool DecodeMapsBlock(const char* p, size_t len, ProcessMaps* out, std::string* why) {
  if (len < kMapsPrefix) {
    *why = absl::StrCat(len, " bytes, shorter than its fixed part");
    return false;
  }
  if (GetLe(p + 12, 4) != 0) {
    *why = "reserved field is not 0";
    return false;
  }
  ErrorDetail d;
  if (DecodeMappings(std::string_view(p + kMapsPrefix, len - kMapsPrefix),
                     &out->mappings, &d) != 0) {
    *why = d.message;
    return false;
  }
  out->time_ns = GetLe(p, 8);
  out->pid = static_cast<int32_t>(static_cast<uint32_t>(GetLe(p + 8, 4)));
  return true;
}

absl::Status WriteAll(int fd, const iovec* iov, int n, size_t total) {
  // Blocks are written with one writev; loop only for partial writes.
  std::vector<iovec> v(iov, iov + n);
  size_t done = 0;
  while (done < total) {
    ssize_t w = ::writev(fd, v.data(), static_cast<int>(v.size()));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return absl::UnavailableError(absl::StrCat("write: ", strerror(errno)));
    done += w;
    size_t skip = w;
    while (!v.empty() && skip >= v.front().iov_len) {
      skip -= v.front().iov_len;
      v.erase(v.begin());
    }
    if (!v.empty()) {
      v.front().iov_base = static_cast<char*>(v.front().iov_base) + skip;
      v.front().iov_len -= skip;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TraceWriter> TraceWriter::Create(const std::string& path,
                                                const boost::json::object& header) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid())
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  TraceWriter w(std::move(fd));
  char head[12];
  std::memcpy(head, kTraceMagic, 8);
  std::memcpy(head + 8, &kTraceVersion, 4);
  iovec iov{head, sizeof(head)};
  if (absl::Status s = WriteAll(w.fd_.get(), &iov, 1, sizeof(head)); !s.ok()) return s;
  const std::string h = boost::json::serialize(header);
  if (absl::Status s = w.WriteBlock(kHeader, h.data(), h.size()); !s.ok()) return s;
  return w;
}

absl::Status TraceWriter::WriteBlock(uint32_t kind, const void* data, size_t len) {
  if (len > kMaxTraceBlock) return absl::InvalidArgumentError("trace block too large");
  uint32_t hdr[2] = {kind, static_cast<uint32_t>(len)};
  iovec iov[2] = {{hdr, sizeof(hdr)}, {const_cast<void*>(data), len}};
  return WriteAll(fd_.get(), iov, 2, sizeof(hdr) + len);
}

absl::Status TraceWriter::Append(const pfm_record* records, size_t n) {
  const size_t per_block = kMaxTraceBlock / sizeof(pfm_record);
  while (n > 0) {
    const size_t k = std::min(n, per_block);
    if (absl::Status s = WriteBlock(kRecords, records, k * sizeof(pfm_record)); !s.ok())
      return s;
    records_ += k;
    records += k;
    n -= k;
  }
  return absl::OkStatus();
}

absl::Status TraceWriter::AppendMaps(const ProcessMaps& maps) {
  std::string block(kMapsPrefix, '\0');
  PutLe(block.data(), maps.time_ns, 8);
  PutLe(block.data() + 8, static_cast<uint32_t>(maps.pid), 4);
  std::string encoded;
  const size_t n = EncodeMappings(maps.mappings, kMaxTraceBlock - kMapsPrefix, &encoded);
  if (n != maps.mappings.size()) {
    const std::string why =
        n == kMaxMappings ? absl::StrCat("more than ", kMaxMappings, " mappings")
        : !IsEncodableMapping(maps.mappings[n])
            ? absl::StrCat("mapping ", n, " ends before it starts or has a path over ",
                           kMaxMappingPath, " bytes")
            : absl::StrCat("over ", kMaxTraceBlock, " bytes");
    return absl::InvalidArgumentError(absl::StrCat("cannot write a MAPS block: ", why));
  }
  block += encoded;
  return WriteBlock(kMaps, block.data(), block.size());
}

absl::Status TraceWriter::Finish(const boost::json::object& trailer) {
  const std::string t = boost::json::serialize(trailer);
  absl::Status s = WriteBlock(kTrailer, t.data(), t.size());
  if (s.ok() && ::fsync(fd_.get()) != 0 && errno != EINVAL)
    s = absl::UnavailableError(absl::StrCat("fsync: ", strerror(errno)));
  fd_.reset();
  return s;
}

absl::StatusOr<Trace> ReadTrace(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) {
    const int e = errno;
    const std::string why = absl::StrCat("cannot open ", path, ": ", strerror(e));
    if (e == ENOENT || e == ENOTDIR) return absl::NotFoundError(why);
    if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(why);
    return absl::InvalidArgumentError(why);
  }
  // Only a regular file: a directory reads as nothing, and a device or a
  // FIFO may never end.
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat(path, S_ISDIR(st.st_mode) ? " is a directory" : " is not a regular file",
                     ", not a pfm trace file"));
  std::string data;
  for (char buf[1 << 16];;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read ", path, ": ", strerror(errno)));
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  if (data.size() < 12 || std::memcmp(data.data(), kTraceMagic, 8) != 0)
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a pfm trace file"));
  uint32_t version;
  std::memcpy(&version, data.data() + 8, 4);
  if (version == 1)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": trace version 1 (mappings in JSON) is no longer read; re-record with "
              "this pfmctl, which writes version ", kTraceVersion));
  if (version != kTraceVersion)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": trace version ", version, " (this pfmctl reads ", kTraceVersion, ")"));
  Trace t;
  size_t off = 12;
  bool have_header = false;
  for (;;) {
    if (off == data.size()) {
      t.cut_reason = "no trailer: the writer stopped before finishing";
      break;
    }
    if (data.size() - off < 8) {
      t.cut_reason = absl::StrCat("truncated block header at byte ", off);
      break;
    }
    uint32_t kind, len;
    std::memcpy(&kind, data.data() + off, 4);
    std::memcpy(&len, data.data() + off + 4, 4);
    if (len > kMaxTraceBlock || data.size() - off - 8 < len) {
      // A RECORDS block cut by the end of the file (a writer killed
      // mid-write, a copy cut short): its whole records are good, and
      // only the last partial one is lost, not the block.
      const size_t avail = data.size() - off - 8;
      if (kind == kRecords && len <= kMaxTraceBlock && len % sizeof(pfm_record) == 0) {
        const size_t n = avail / sizeof(pfm_record);
        const size_t at = t.records.size();
        t.records.resize(at + n);
        std::memcpy(t.records.data() + at, data.data() + off + 8, n * sizeof(pfm_record));
        t.cut_reason = absl::StrCat("truncated record block at byte ", off, ": ", n, " of ",
                                    len / sizeof(pfm_record), " records read");
        break;
      }
      t.cut_reason = absl::StrCat("truncated block at byte ", off);
      break;
    }
    const char* p = data.data() + off + 8;
    off += 8 + len;
    if (kind == kRecords) {
      if (len % sizeof(pfm_record) != 0) {
        t.cut_reason = absl::StrCat("damaged record block at byte ", off - 8 - len);
        break;
      }
      const size_t n = len / sizeof(pfm_record);
      const size_t at = t.records.size();
      t.records.resize(at + n);
      std::memcpy(t.records.data() + at, p, len);
      continue;
    }
    if (kind == kMaps) {
      ProcessMaps m;
      std::string why;
      if (!DecodeMapsBlock(p, len, &m, &why)) {
        t.cut_reason = absl::StrCat("damaged MAPS block at byte ", off - 8 - len, ": ", why);
        break;
      }
      t.maps.push_back(std::move(m));
      continue;
    }
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(boost::json::string_view(p, len), ec);
    if (ec || !v.is_object()) {
      t.cut_reason = absl::StrCat("damaged JSON block at byte ", off - 8 - len);
      break;
    }
    if (kind == kHeader && !have_header) {
      t.header = v.as_object();
      have_header = true;
    } else if (kind == kTrailer) {
      t.trailer = v.as_object();
      t.complete = true;
      break;
    }
  }
  if (!have_header)
    return absl::InvalidArgumentError(absl::StrCat(path, ": trace has no header"));
  return t;
}

}  // namespace pfm
