// The trace file reader (libpfm-bts/include/pfm/trace_file.h) over hostile
// files: see fuzz_targets.h, FuzzTraceFile.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_targets.h"
#include "pfm/trace_file.h"

namespace pfm::fuzz {

namespace {

// The line of a broken contract is printed before the abort.
void CheckAt(bool ok, int line) {
  if (ok) return;
  std::fprintf(stderr, "trace_fuzz.cc:%d: check failed\n", line);
  std::abort();
}
#define Check(ok) CheckAt((ok), __LINE__)

// A memfd holding `bytes`, closed on destruction; path() opens it again.
class MemFile {
 public:
  explicit MemFile(const std::string& bytes) : fd_(::memfd_create("pfm-trace-fuzz", MFD_CLOEXEC)) {
    Check(fd_ >= 0);
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t w = ::write(fd_, bytes.data() + done, bytes.size() - done);
      Check(w > 0);
      done += static_cast<size_t>(w);
    }
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

bool SameRecords(const std::vector<pfm_record>& a, const std::vector<pfm_record>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(pfm_record)) == 0);
}

struct Pass {
  std::vector<pfm_record> records;
  size_t maps = 0;
  bool complete = false;
  std::string cut;
  uint64_t records_read = 0;
};

Pass ReadAll(const std::string& path, bool skip) {
  Pass p;
  TraceReader::Options o;
  o.skip_records = skip;
  absl::StatusOr<TraceReader> r = TraceReader::Open(path, o);
  Check(r.ok());
  for (;;) {
    absl::StatusOr<TraceReader::Event> e = r->Next();
    Check(e.ok());
    if (*e == TraceReader::Event::kEnd) break;
    if (*e == TraceReader::Event::kRecords) {
      Check(!skip && !r->records().empty() && r->records().size() <= kTraceReaderChunk);
      p.records.insert(p.records.end(), r->records().begin(), r->records().end());
    }
    if (*e == TraceReader::Event::kMaps) ++p.maps;
    if (*e == TraceReader::Event::kTrailer) p.complete = true;
  }
  Check(r->complete() == p.complete);
  Check(p.complete == r->cut_reason().empty());
  p.cut = r->cut_reason();
  p.records_read = r->records_read();
  // The end stays the end.
  absl::StatusOr<TraceReader::Event> again = r->Next();
  Check(again.ok() && *again == TraceReader::Event::kEnd && r->records().empty());
  return p;
}

}  // namespace

int FuzzTraceFile(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The magic is given, and the version by the first byte (2 or 3, or
  // the byte itself now and then): the rest is blocks.
  std::string bytes(kTraceMagic, sizeof(kTraceMagic));
  const uint32_t version = data[0] < 0x70   ? kTraceVersion
                           : data[0] < 0xe0 ? kTraceVersionFixed
                                            : data[0];
  bytes.append(reinterpret_cast<const char*>(&version), 4);
  bytes.append(reinterpret_cast<const char*>(data + 1), size - 1);
  const MemFile file(bytes);
  const std::string path = file.path();

  absl::StatusOr<Trace> whole = ReadTrace(path);
  absl::StatusOr<TraceReader> opened = TraceReader::Open(path);
  Check(whole.ok() == opened.ok());
  if (!whole.ok()) {
    Check(whole.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  // The reader, the skipping reader and ReadTrace agree; no record is made
  // of nothing (every record takes a byte of the file at least).
  const Pass read = ReadAll(path, false);
  const Pass skipped = ReadAll(path, true);
  Check(read.records.size() == whole->records.size());
  Check(SameRecords(read.records, whole->records));
  Check(read.records.size() <= bytes.size());
  Check(read.records_read == read.records.size());
  Check(skipped.records_read == read.records.size());
  Check(read.cut == whole->cut_reason && skipped.cut == whole->cut_reason);
  Check(read.complete == whole->complete && skipped.complete == whole->complete);
  Check(read.maps == whole->maps.size() && skipped.maps == whole->maps.size());

  // What was read writes (compact, and fixed) and reads back exactly.
  for (TraceEncoding enc : {TraceEncoding::kCompact, TraceEncoding::kFixed}) {
    const MemFile out("");
    absl::StatusOr<TraceWriter> w = TraceWriter::Create(out.path(), whole->header, enc);
    Check(w.ok());
    Check(w->Append(whole->records.data(), whole->records.size()).ok());
    for (const ProcessMaps& m : whole->maps) Check(w->AppendMaps(m).ok());
    Check(w->Finish(whole->trailer).ok());
    absl::StatusOr<Trace> back = ReadTrace(out.path());
    Check(back.ok() && back->complete && back->maps.size() == whole->maps.size());
    Check(SameRecords(back->records, whole->records));
  }
  return 0;
}

}  // namespace pfm::fuzz

#ifdef PFM_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pfm::fuzz::FuzzTraceFile(data, size);
}
#endif
