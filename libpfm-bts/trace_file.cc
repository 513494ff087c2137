#include "pfm/trace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace pfm {
namespace {

enum BlockKind : uint32_t {
  kHeader = 1,
  kRecords = 2,
  kTrailer = 3,
  kMaps = 4,
  kMapsFlagged = 5,  // a MAPS block with flags (a cut list): one older readers skip
  kCompactRecords = 6,
};

// A compact RECORDS block's fixed part: u32 records, u32 flags (0).
constexpr size_t kCompactPrefix = 8;
// Bytes a reader reads of a compact block at a time.
constexpr size_t kCompactReadPiece = 256 << 10;

// Whether the compact encoding gives `r` back exactly: a ring record type
// whose union bytes the type does not use are zero (what every ring reader
// delivers). Anything else goes into a fixed block.
bool CompactCarries(const pfm_record& r) {
  if (!IsRecordType(r.type)) return false;
  if (r.type == PFM_REC_BRANCH) {
    // from, to, flags: the union's other 16 bytes are zero.
    uint64_t rest[2];
    std::memcpy(rest, r.u.raw + 24, sizeof(rest));
    return (rest[0] | rest[1]) == 0;
  }
  pfm_record copy = r;
  NormalizeRecord(&copy);
  return std::memcmp(&copy, &r, sizeof(r)) == 0;
}

// A MAPS block's fixed part: u64 time_ns, i32 pid, u32 flags (0 in kind
// 4; in kind 5, kMapsBlockCut).
constexpr size_t kMapsPrefix = 16;
// The list is cut (ProcessMaps::cut). No other bit is defined.
constexpr uint32_t kMapsBlockCut = 1;

void PutLe(char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

// A MAPS block's payload (of `kind`) into *out; false with *why for
// anything else.
bool DecodeMapsBlock(uint32_t kind, const char* p, size_t len, ProcessMaps* out,
                     std::string* why) {
  if (len < kMapsPrefix) {
    *why = absl::StrCat(len, " bytes, shorter than its fixed part");
    return false;
  }
  const uint64_t flags = GetLe(p + 12, 4);
  if (kind == kMaps && flags != 0) {
    *why = "reserved field is not 0";
    return false;
  }
  if (kind == kMapsFlagged && (flags & ~uint64_t{kMapsBlockCut}) != 0) {
    *why = absl::StrCat("unknown flags 0x", absl::Hex(flags));
    return false;
  }
  out->cut = (flags & kMapsBlockCut) != 0;
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

absl::Status WriteAll(int fd, const std::string& path, const iovec* iov, int n,
                      size_t total) {
  // Blocks are written with one writev; loop only for partial writes.
  std::vector<iovec> v(iov, iov + n);
  size_t done = 0;
  while (done < total) {
    ssize_t w = ::writev(fd, v.data(), static_cast<int>(v.size()));
    if (w < 0 && errno == EINTR) continue;
    // The file named: a full disk or a size limit is the user's to fix.
    if (w <= 0)
      return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ",
                                                 w == 0 ? "no progress" : strerror(errno)));
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

absl::Status KeepAsOld(const std::string& path, bool* moved) {
  if (moved != nullptr) *moved = false;
  // lstat: a symlink is left alone (written through, as before), never
  // renamed; `-o /dev/stdout` into a file must not move /dev/stdout.
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
    return absl::OkStatus();
  const std::string old = path + ".old";
  if (::rename(path.c_str(), old.c_str()) != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot keep ", path, " as ", old, ": ", strerror(errno)));
  if (moved != nullptr) *moved = true;
  return absl::OkStatus();
}

absl::StatusOr<TraceWriter> TraceWriter::Create(const std::string& path,
                                                const boost::json::object& header,
                                                TraceEncoding encoding) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid())
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  TraceWriter w(std::move(fd), path, encoding);
  char head[12];
  std::memcpy(head, kTraceMagic, 8);
  const uint32_t version =
      encoding == TraceEncoding::kCompact ? kTraceVersion : kTraceVersionFixed;
  std::memcpy(head + 8, &version, 4);
  iovec iov{head, sizeof(head)};
  if (absl::Status s = WriteAll(w.fd_.get(), w.path_, &iov, 1, sizeof(head)); !s.ok()) return s;
  w.bytes_ = sizeof(head);
  const std::string h = boost::json::serialize(header);
  if (absl::Status s = w.WriteBlock(kHeader, h.data(), h.size()); !s.ok()) return s;
  return w;
}

absl::Status TraceWriter::WriteBlock(uint32_t kind, const void* data, size_t len) {
  if (len > kMaxTraceBlock) return absl::InvalidArgumentError("trace block too large");
  uint32_t hdr[2] = {kind, static_cast<uint32_t>(len)};
  iovec iov[2] = {{hdr, sizeof(hdr)}, {const_cast<void*>(data), len}};
  absl::Status s = WriteAll(fd_.get(), path_, iov, 2, sizeof(hdr) + len);
  if (s.ok()) bytes_ += sizeof(hdr) + len;
  return s;
}

absl::Status TraceWriter::Append(const pfm_record* records, size_t n) {
  if (encoding_ == TraceEncoding::kFixed) return AppendFixed(records, n);
  // Runs of records the codec carries go compact, the others fixed, in
  // order.
  while (n > 0) {
    size_t k = 0;
    const bool compact = CompactCarries(records[0]);
    while (k < n && CompactCarries(records[k]) == compact) ++k;
    absl::Status s = compact ? AppendCompact(records, k) : AppendFixed(records, k);
    if (!s.ok()) return s;
    records += k;
    n -= k;
  }
  return absl::OkStatus();
}

absl::Status TraceWriter::AppendCompact(const pfm_record* records, size_t n) {
  // Room for a block's bytes, plus what EncodeRun may write past the last
  // record that fits.
  encoded_.resize(kCompactPrefix + kCompactTraceBlockBytes + kMaxCompactRecordBytes + 8);
  while (n > 0) {
    CodecState st;
    size_t used = 0;
    const size_t k = EncodeRun(records, std::min<size_t>(n, UINT32_MAX), &st,
                               encoded_.data() + kCompactPrefix, kCompactTraceBlockBytes, &used);
    PutLe(reinterpret_cast<char*>(encoded_.data()), k, 4);
    PutLe(reinterpret_cast<char*>(encoded_.data()) + 4, 0, 4);
    if (absl::Status s = WriteBlock(kCompactRecords, encoded_.data(), kCompactPrefix + used);
        !s.ok())
      return s;
    records_ += k;
    records += k;
    n -= k;
  }
  return absl::OkStatus();
}

absl::Status TraceWriter::AppendFixed(const pfm_record* records, size_t n) {
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
  PutLe(block.data() + 12, maps.cut ? kMapsBlockCut : 0, 4);
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
  return WriteBlock(maps.cut ? kMapsFlagged : kMaps, block.data(), block.size());
}

absl::Status TraceWriter::Finish(const boost::json::object& trailer) {
  const std::string t = boost::json::serialize(trailer);
  absl::Status s = WriteBlock(kTrailer, t.data(), t.size());
  if (s.ok() && ::fsync(fd_.get()) != 0 && errno != EINVAL)
    s = absl::UnavailableError(absl::StrCat("fsync: ", strerror(errno)));
  fd_.reset();
  return s;
}

absl::StatusOr<TraceReader> TraceReader::Open(const std::string& path, Options options) {
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
  TraceReader r(std::move(fd), path, options);
  r.file_size_ = static_cast<uint64_t>(st.st_size);
  char head[12];
  absl::StatusOr<size_t> n = r.ReadUpTo(head, sizeof(head));
  if (!n.ok()) return n.status();
  if (*n < sizeof(head) || std::memcmp(head, kTraceMagic, 8) != 0)
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a pfm trace file"));
  uint32_t version;
  std::memcpy(&version, head + 8, 4);
  if (version == 1)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": trace version 1 (mappings in JSON) is no longer read; re-record with "
              "this pfmctl, which writes version ", kTraceVersion));
  if (version != kTraceVersion && version != kTraceVersionFixed)
    return absl::InvalidArgumentError(absl::StrCat(path, ": trace version ", version,
                                                   " (this pfmctl reads versions ",
                                                   kTraceVersionFixed, " and ", kTraceVersion,
                                                   ")"));
  // The header: the first block, a JSON object.
  const absl::Status no_header =
      absl::InvalidArgumentError(absl::StrCat(path, ": trace has no header"));
  uint32_t hdr[2];
  n = r.ReadUpTo(reinterpret_cast<char*>(hdr), sizeof(hdr));
  if (!n.ok()) return n.status();
  if (*n < sizeof(hdr) || hdr[0] != kHeader || hdr[1] > kMaxTraceBlock) return no_header;
  std::string text;
  absl::StatusOr<bool> whole = r.ReadPayload(hdr[1], &text);
  if (!whole.ok()) return whole.status();
  if (!*whole) return no_header;
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  if (ec || !v.is_object()) return no_header;
  r.header_ = std::move(v.get_object());
  return r;
}

absl::StatusOr<size_t> TraceReader::ReadUpTo(char* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t k = ::read(fd_.get(), dst + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read ", path_, ": ", strerror(errno)));
    if (k == 0) break;
    got += static_cast<size_t>(k);
  }
  off_ += got;
  return got;
}

absl::StatusOr<bool> TraceReader::ReadPayload(uint32_t len, std::string* out) {
  // Grown only as bytes come, 1 MiB at a time: a damaged length cannot make
  // a short file allocate 64 MiB.
  out->clear();
  for (size_t got = 0; got < len;) {
    const size_t step = std::min<size_t>(len - got, 1 << 20);
    out->resize(got + step);
    absl::StatusOr<size_t> n = ReadUpTo(out->data() + got, step);
    if (!n.ok()) return n.status();
    got += *n;
    if (*n < step) {
      out->resize(got);
      return false;
    }
  }
  return true;
}

uint64_t TraceReader::BytesLeftNow() const {
  // The file's size now: it may have grown since Open.
  struct stat st {};
  const uint64_t size =
      ::fstat(fd_.get(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : file_size_;
  return size > off_ ? size - off_ : 0;
}

absl::Status TraceReader::SkipBytes(uint64_t len) {
  if (::lseek(fd_.get(), static_cast<off_t>(len), SEEK_CUR) < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path_, ": ", strerror(errno)));
  off_ += len;
  return absl::OkStatus();
}

TraceReader::Event TraceReader::Cut(std::string why) {
  cut_reason_ = std::move(why);
  done_ = true;
  records_.clear();
  return Event::kEnd;
}

absl::StatusOr<TraceReader::Event> TraceReader::NextRecords() {
  const size_t want = static_cast<size_t>(std::min<uint64_t>(block_left_, kTraceReaderChunk));
  records_.resize(want);
  absl::StatusOr<size_t> n =
      ReadUpTo(reinterpret_cast<char*>(records_.data()), want * sizeof(pfm_record));
  if (!n.ok()) return n.status();
  const size_t whole = *n / sizeof(pfm_record);
  records_.resize(whole);
  records_read_ += whole;
  block_left_ -= whole;
  if (whole == want) return Event::kRecords;
  // A RECORDS block cut by the end of the file (a writer killed mid-write, a
  // copy cut short): its whole records are good, and only the last partial
  // one is lost, not the block. They are handed out now, the cut next.
  cut_reason_ = absl::StrCat("truncated record block at byte ", block_off_, ": ",
                             block_records_ - block_left_, " of ", block_records_,
                             " records read");
  done_ = true;
  block_left_ = 0;
  if (whole > 0) return Event::kRecords;
  records_.clear();
  return Event::kEnd;
}

absl::StatusOr<bool> TraceReader::RefillCompact(size_t want) {
  compact_buf_.erase(compact_buf_.begin(), compact_buf_.begin() + compact_pos_);
  compact_pos_ = 0;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(want, compact_unread_));
  const size_t had = compact_buf_.size();
  compact_buf_.resize(had + n);
  absl::StatusOr<size_t> got = ReadUpTo(reinterpret_cast<char*>(compact_buf_.data() + had), n);
  if (!got.ok()) return got.status();
  compact_buf_.resize(had + *got);
  compact_unread_ -= *got;
  if (*got < n) {
    compact_unread_ = 0;
    compact_file_cut_ = true;
    return false;
  }
  return true;
}

absl::StatusOr<TraceReader::Event> TraceReader::StartCompact(uint64_t at, uint32_t len) {
  char prefix[kCompactPrefix];
  if (len < kCompactPrefix)
    return Cut(absl::StrCat("damaged record block at byte ", at, ": ", len,
                            " bytes, shorter than its fixed part"));
  absl::StatusOr<size_t> n = ReadUpTo(prefix, sizeof(prefix));
  if (!n.ok()) return n.status();
  if (*n < sizeof(prefix)) return Cut(absl::StrCat("truncated block at byte ", at));
  const uint64_t records = GetLe(prefix, 4), flags = GetLe(prefix + 4, 4);
  const uint64_t bytes = len - kCompactPrefix;
  // Every record takes a byte at least.
  if (flags != 0 || records > bytes || (records == 0) != (bytes == 0))
    return Cut(absl::StrCat("damaged record block at byte ", at, ": ",
                            flags != 0 ? absl::StrCat("unknown flags 0x", absl::Hex(flags))
                                       : absl::StrCat(records, " records in ", bytes, " bytes")));
  block_off_ = at;
  block_records_ = block_left_ = records;
  if (records == 0) return Event::kRecords;  // Next() goes on to the next block
  compact_ = true;
  compact_unread_ = bytes;
  compact_buf_.clear();
  compact_pos_ = 0;
  compact_state_.Reset();
  compact_file_cut_ = false;
  if (!options_.skip_records) return NextCompact();
  if (options_.unchecked_compact && BytesLeftNow() >= bytes) {
    // Whole in the file: counted by its prefix, skipped unread.
    if (absl::Status s = SkipBytes(bytes); !s.ok()) return s;
    records_read_ += records;
    block_left_ = 0;
    compact_ = false;
    return Event::kRecords;
  }
  // Skipped, but decoded all the same, its records handed out as nothing:
  // whether its bytes decode (and so where a reading would stop) is known
  // only so, and the skipping pass must find the cut a reading finds
  // (export counts the records first, then reads them). The price: a
  // skipping pass over a compact file decodes it (docs/pfmd.md).
  while (block_left_ > 0 && !done_) {
    absl::StatusOr<Event> e = NextCompact();
    if (!e.ok()) return e.status();
    records_.clear();
  }
  return done_ ? Event::kEnd : Event::kRecords;
}

absl::StatusOr<TraceReader::Event> TraceReader::NextCompact() {
  // Skipping, pieces that stay in the L1 cache: no one reads them.
  const size_t piece = options_.skip_records ? 256 : kTraceReaderChunk;
  const size_t want = static_cast<size_t>(std::min<uint64_t>(block_left_, piece));
  records_.resize(want);
  size_t got = 0;
  bool malformed = false;
  while (got < want) {
    const size_t avail = compact_buf_.size() - compact_pos_;
    size_t used = 0;
    malformed = false;
    got += DecodeRecords(compact_buf_.data() + compact_pos_, avail, &compact_state_,
                         records_.data() + got, want - got, &used, &malformed);
    compact_pos_ += used;
    if (got == want) break;
    // Stopped short: the end of the bytes read so far (a record may be cut
    // by it), or bytes that do not decode. Read on while the stop may be
    // the buffer's end: fewer bytes left than a record can take.
    if (compact_buf_.size() - compact_pos_ >= kMaxCompactUnitBytes || compact_unread_ == 0) break;
    absl::StatusOr<bool> more = RefillCompact(kCompactReadPiece);
    if (!more.ok()) return more.status();
  }
  records_.resize(got);
  records_read_ += got;
  block_left_ -= got;
  const uint64_t done_records = block_records_ - block_left_;
  if (got < want || (block_left_ == 0 && (compact_pos_ != compact_buf_.size() ||
                                          compact_unread_ != 0))) {
    // The block ends here: cut by the end of the file (the stop within the
    // last record's length of where the file ends), or damaged (bytes that
    // do not decode, a PAD, too few records, bytes after its last record).
    // Its records so far are handed out now, the cut next.
    const size_t left = compact_buf_.size() - compact_pos_;
    if (compact_file_cut_ && got < want && left < kMaxCompactUnitBytes &&
        (malformed || left == 0))
      cut_reason_ = absl::StrCat("truncated record block at byte ", block_off_, ": ",
                                 done_records, " of ", block_records_, " records read");
    else
      cut_reason_ = absl::StrCat(
          "damaged record block at byte ", block_off_, ": ",
          got >= want ? absl::StrCat("bytes after its last record (", block_records_, ")")
          : malformed ? absl::StrCat("record ", done_records + 1, " of ", block_records_,
                                     " does not decode")
          : left > 0  ? absl::StrCat("record ", done_records + 1, " of ", block_records_,
                                     " is padding")
                      : absl::StrCat("its bytes end after record ", done_records, " of ",
                                     block_records_));
    done_ = true;
    block_left_ = 0;
    compact_ = false;
    compact_buf_.clear();
    compact_buf_.shrink_to_fit();
    compact_pos_ = 0;
    if (got > 0) return Event::kRecords;
    records_.clear();
    return Event::kEnd;
  }
  if (block_left_ == 0) {
    compact_ = false;
    compact_buf_.clear();
    compact_pos_ = 0;
  }
  return Event::kRecords;
}

absl::StatusOr<TraceReader::Event> TraceReader::Next() {
  if (done_) {
    records_.clear();
    return Event::kEnd;
  }
  // The pieces of a block reuse records_ as it is (resized, never zeroed).
  if (block_left_ > 0) return compact_ ? NextCompact() : NextRecords();
  records_.clear();
  // A loop, not recursion, over the blocks handed out as nothing (empty or
  // skipped RECORDS, extra headers): a file of millions of them must not
  // exhaust the stack.
  for (;;) {
    const uint64_t at = off_;
    uint32_t hdr[2];
    absl::StatusOr<size_t> n = ReadUpTo(reinterpret_cast<char*>(hdr), sizeof(hdr));
    if (!n.ok()) return n.status();
    if (*n == 0) return Cut("no trailer: the writer stopped before finishing");
    if (*n < sizeof(hdr)) return Cut(absl::StrCat("truncated block header at byte ", at));
    const uint32_t kind = hdr[0], len = hdr[1];
    // No writer makes a block this long: the length itself is damaged (the
    // file may well go on past it), not cut short.
    if (len > kMaxTraceBlock)
      return Cut(absl::StrCat("damaged block at byte ", at, ": length ", len,
                              " is over the limit of ", kMaxTraceBlock, " bytes"));
    if (kind == kRecords) {
      if (len % sizeof(pfm_record) != 0)
        return Cut(absl::StrCat("damaged record block at byte ", at));
      block_off_ = at;
      block_records_ = block_left_ = len / sizeof(pfm_record);
      if (block_left_ == 0) continue;
      if (!options_.skip_records) return NextRecords();
      // Skipped: whether the block is whole comes from the file's size now.
      const uint64_t avail = BytesLeftNow();
      if (avail < len) {
        const uint64_t whole = avail / sizeof(pfm_record);
        records_read_ += whole;
        block_left_ = 0;
        return Cut(absl::StrCat("truncated record block at byte ", at, ": ", whole, " of ",
                                block_records_, " records read"));
      }
      if (absl::Status s = SkipBytes(len); !s.ok()) return s;
      records_read_ += block_left_;
      block_left_ = 0;
      continue;
    }
    if (kind == kCompactRecords) {
      absl::StatusOr<Event> e = StartCompact(at, len);
      if (!e.ok() || *e != Event::kRecords || !records_.empty()) return e;
      continue;  // an empty block, or one skipped whole
    }
    if (kind != kMaps && kind != kMapsFlagged && kind != kHeader && kind != kTrailer) {
      // A kind this version does not know (a later version's): skipped by
      // its length, unread, whatever it holds. Cut by the end of the file,
      // it is cut as a read would find it.
      if (BytesLeftNow() < len) return Cut(absl::StrCat("truncated block at byte ", at));
      if (absl::Status s = SkipBytes(len); !s.ok()) return s;
      continue;
    }
    // MAPS and JSON blocks are read whole.
    std::string payload;
    absl::StatusOr<bool> whole = ReadPayload(len, &payload);
    if (!whole.ok()) return whole.status();
    if (!*whole) return Cut(absl::StrCat("truncated block at byte ", at));
    if (kind == kMaps || kind == kMapsFlagged) {
      ProcessMaps m;
      std::string why;
      if (!DecodeMapsBlock(kind, payload.data(), payload.size(), &m, &why))
        return Cut(absl::StrCat("damaged MAPS block at byte ", at, ": ", why));
      maps_ = std::move(m);
      return Event::kMaps;
    }
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(payload, ec);
    if (ec || !v.is_object()) return Cut(absl::StrCat("damaged JSON block at byte ", at));
    if (kind == kTrailer) {
      trailer_ = std::move(v.get_object());
      complete_ = true;
      done_ = true;
      return Event::kTrailer;
    }
    // A second HEADER: skipped.
  }
}

absl::StatusOr<Trace> ReadTrace(const std::string& path, TraceReader::Options options) {
  absl::StatusOr<TraceReader> r = TraceReader::Open(path, options);
  if (!r.ok()) return r.status();
  Trace t;
  t.header = r->header();
  if (!options.skip_records) t.records.reserve(r->file_size() / sizeof(pfm_record));
  for (;;) {
    absl::StatusOr<TraceReader::Event> e = r->Next();
    if (!e.ok()) return e.status();
    switch (*e) {
      case TraceReader::Event::kRecords:
        t.records.insert(t.records.end(), r->records().begin(), r->records().end());
        continue;
      case TraceReader::Event::kMaps:
        t.maps.push_back(r->maps());
        continue;
      case TraceReader::Event::kTrailer:
        t.trailer = r->trailer();
        t.complete = true;
        continue;
      case TraceReader::Event::kEnd:
        t.cut_reason = r->cut_reason();
        break;
    }
    break;
  }
  t.records_in_file = r->records_read();
  return t;
}

}  // namespace pfm
