#include "libpfm-bts/perf_data.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string_view>
#include <utility>

#include <boost/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernel/drivers/perf/perf_event_names.h"
#include "kernel/uapi/pfm_uapi.h"
#include "pfm/record_json.h"
#include "pfm/symbolizer.h"
#include "pfm/unique_fd.h"

namespace pfm {
namespace {

namespace json = boost::json;

// perf's build-id record in the HEADER_BUILD_ID feature
// (tools/perf/util/header.c, write_buildid; struct perf_record_header_build_id):
// a perf_event_header, pid (-1: the host), the id in a 24-byte field (20
// bytes of SHA-1, then its size), the file name NUL-terminated and padded to
// 64. PERF_RECORD_MISC_BUILD_ID_SIZE says the size byte is valid.
constexpr uint32_t kPerfRecordHeaderBuildId = 67;
constexpr uint16_t kPerfMiscBuildIdSize = 1u << 15;
constexpr size_t kBuildIdField = 24;
constexpr size_t kMaxBuildId = 20;

static_assert(sizeof(perf_event_attr) >= kPerfAttrBytes,
              "<linux/perf_event.h> predates PERF_ATTR_SIZE_VER7");
static_assert(PERF_ATTR_SIZE_VER7 == kPerfAttrBytes);

// perf's string alignment in header features (header.c, NAME_ALIGN).
constexpr size_t kStringAlign = 64;
// The kernel's task name length with its NUL (TASK_COMM_LEN).
constexpr size_t kCommBytes = 16;
// Buffered output: written to the file in pieces of about this size.
constexpr size_t kFlushBytes = 1 << 20;
// A record's size is a u16 (perf_event_header.size).
[[maybe_unused]] constexpr size_t kMaxRecordBytes = 0xfff8;  // asserted
// Events per file. A session has at most a few dozen counters; a damaged
// trace could name a new request in every record, so requests past this
// get no event, and their records are counted as skipped.
constexpr size_t kMaxEvents = 256;

// Every event's sample fields; a PEBS event adds the weight, and with more
// than one event, all add PERF_SAMPLE_IDENTIFIER.
constexpr uint64_t kBaseSampleType = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                                     PERF_SAMPLE_ADDR | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD;
// The sample fields this writer knows how to fill, in the kernel's order.
[[maybe_unused]] constexpr uint64_t kKnownSampleType =
    kBaseSampleType | PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_WEIGHT;  // asserted
constexpr uint64_t kReadFormat =
    PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;

// ---- The trace's JSON is input: read without throwing accessors. --------

std::optional<uint64_t> UintField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_uint64()) return v->get_uint64();
  if (v->is_int64() && v->get_int64() >= 0) return static_cast<uint64_t>(v->get_int64());
  return std::nullopt;
}

std::optional<int64_t> IntField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64() && v->get_uint64() <= INT64_MAX)
    return static_cast<int64_t>(v->get_uint64());
  return std::nullopt;
}

std::string StringField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

bool BoolField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_bool() && v->get_bool();
}

const json::object* ObjectField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_object() ? &v->get_object() : nullptr;
}

// What the export takes from the trace's header.
struct HeaderInfo {
  int64_t pid = -1;      // the traced process, or -1 (a CPU's trace)
  std::string command;   // `record`'s command line, or ""
  std::string filter;    // "user", "kernel", "all", or "" when unknown
  bool cpu_context = false;  // a CPU's trace (every task on it), not a task's
  std::optional<uint32_t> cpu;  // a CPU trace's cpu, when the header names it
  std::string bts;       // "off", "history", "lossless", or ""
  std::string pebs_event;
  uint64_t pebs_period = 0;
};

HeaderInfo ReadHeaderInfo(const json::object& h) {
  HeaderInfo info;
  if (std::optional<int64_t> pid = IntField(h, "pid"); pid && *pid > 0) info.pid = *pid;
  info.command = StringField(h, "command");
  if (const json::object* spec = ObjectField(h, "spec")) {
    info.filter = StringField(*spec, "filter");
    info.bts = StringField(*spec, "bts");
    std::optional<int64_t> cpu = IntField(*spec, "cpu");
    info.cpu_context = cpu.has_value() && *cpu >= 0;
    if (info.cpu_context && *cpu <= INT32_MAX) info.cpu = static_cast<uint32_t>(*cpu);
    info.pebs_event = StringField(*spec, "pebs_event");
    info.pebs_period = UintField(*spec, "pebs_period").value_or(0);
    if (info.pid < 0) {
      std::optional<int64_t> pid = IntField(*spec, "pid");
      if (pid && *pid > 0) info.pid = *pid;
    }
  }
  // `snapshot` and `stream` headers carry the ring's description instead of
  // the spec: "target": "cpu N" or "pid N".
  if (const json::object* ring = ObjectField(h, "ring")) {
    const std::string target = StringField(*ring, "target");
    int64_t n = 0;
    if (target.rfind("cpu ", 0) == 0) {
      info.cpu_context = true;
      if (!info.cpu && absl::SimpleAtoi(target.substr(4), &n) && n >= 0 && n <= INT32_MAX)
        info.cpu = static_cast<uint32_t>(n);
    }
    int64_t pid = 0;
    if (info.pid < 0 && target.rfind("pid ", 0) == 0 &&
        absl::SimpleAtoi(target.substr(4), &pid) && pid > 0)
      info.pid = pid;
  }
  return info;
}

// One of the trailer's counters (pfmctl copies session_show's).
struct TrailerCounter {
  std::string name;
  std::optional<uint32_t> request;
  bool pebs = false;
  uint64_t period = 0;
  bool has_reading = false;  // value, time_enabled and time_running present
  uint64_t value = 0, time_enabled = 0, time_running = 0;
};

// The trailer's counters that have a name; the others are left out, as
// `pfmctl report` leaves them out.
std::vector<TrailerCounter> ReadTrailerCounters(const json::object& trailer) {
  std::vector<TrailerCounter> out;
  const json::value* cs = trailer.if_contains("counters");
  if (cs == nullptr || !cs->is_array()) return out;
  for (const json::value& v : cs->get_array()) {
    if (!v.is_object()) continue;
    const json::object& o = v.get_object();
    TrailerCounter c;
    c.name = StringField(o, "event");
    if (c.name.empty()) continue;
    if (std::optional<uint64_t> r = UintField(o, "request"); r && *r <= UINT32_MAX)
      c.request = static_cast<uint32_t>(*r);
    c.pebs = BoolField(o, "pebs");
    c.period = UintField(o, "period").value_or(0);
    std::optional<uint64_t> value = UintField(o, "value");
    std::optional<uint64_t> enabled = UintField(o, "time_enabled");
    std::optional<uint64_t> running = UintField(o, "time_running");
    if (value && enabled && running) {
      c.has_reading = true;
      c.value = *value;
      c.time_enabled = *enabled;
      c.time_running = *running;
    }
    out.push_back(std::move(c));
  }
  return out;
}

// The kernel's comm for an exec of `command`'s first word: its last path
// component, at most 15 bytes.
std::string CommOf(const std::string& command) {
  std::string first = command.substr(0, command.find(' '));
  if (size_t slash = first.rfind('/'); slash != std::string::npos) first.erase(0, slash + 1);
  if (first.size() > kCommBytes - 1) first.resize(kCommBytes - 1);
  return first;
}

// ---- Bytes --------------------------------------------------------------

class Bytes {
 public:
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Raw(const void* p, size_t n) { s_.append(static_cast<const char*>(p), n); }
  void Zeros(size_t n) { s_.append(n, '\0'); }
  // `v` NUL-terminated and zero-padded to a multiple of `align`.
  void Padded(std::string_view v, size_t align) {
    const size_t n = (v.size() + 1 + align - 1) / align * align;
    s_.append(v.data(), v.size());
    Zeros(n - v.size());
  }
  // perf's header string: u32 length (with NUL and padding), the bytes.
  void HeaderString(std::string_view v) {
    U32(static_cast<uint32_t>((v.size() + kStringAlign) / kStringAlign * kStringAlign));
    Padded(v, kStringAlign);
  }
  void PatchU16(size_t at, uint16_t v) {
    s_[at] = static_cast<char>(v);
    s_[at + 1] = static_cast<char>(v >> 8);
  }
  size_t size() const { return s_.size(); }
  const std::string& str() const { return s_; }
  void clear() { s_.clear(); }

 private:
  // Little-endian is the host's order (the file is native; see the header).
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);
  void Le(uint64_t v, int bytes) { s_.append(reinterpret_cast<const char*>(&v), bytes); }
  std::string s_;
};

// ---- Events ---------------------------------------------------------------

struct Event {
  perf_event_attr attr{};
  uint64_t id = 0;
  std::string name;
};

perf_event_attr BaseAttr(uint32_t type, uint64_t config) {
  perf_event_attr a{};
  a.type = type;
  a.size = kPerfAttrBytes;
  a.config = config;
  a.sample_type = kBaseSampleType;
  a.read_format = kReadFormat;
  a.sample_id_all = 1;
  return a;
}

// perf's type and config for a generic event name ("cycles", "task-clock");
// other names (PMU events like MEM_LOAD_RETIRED.L3_MISS) are PERF_TYPE_RAW
// with config 0: the trace does not carry their encoding. perf shows the
// name from EVENT_DESC either way.
perf_event_attr AttrForName(const std::string& name) {
  if (const PerfGenericEvent* g = FindPerfGenericEvent(name.c_str()))
    return BaseAttr(g->type, g->config);
  return BaseAttr(PERF_TYPE_RAW, 0);
}

// The sample_id_all trailer of a non-sample record of `e`: the fields of
// sample_type among TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER, in that order.
void AppendSampleId(Bytes& b, const Event& e, uint32_t pid, uint32_t tid, uint64_t time,
                    uint32_t cpu) {
  const uint64_t st = e.attr.sample_type;
  if (st & PERF_SAMPLE_TID) {
    b.U32(pid);
    b.U32(tid);
  }
  if (st & PERF_SAMPLE_TIME) b.U64(time);
  if (st & PERF_SAMPLE_ID) b.U64(e.id);
  if (st & PERF_SAMPLE_STREAM_ID) b.U64(e.id);
  if (st & PERF_SAMPLE_CPU) {
    b.U32(cpu);
    b.U32(0);
  }
  if (st & PERF_SAMPLE_IDENTIFIER) b.U64(e.id);
}

struct SampleValues {
  uint64_t ip = 0, addr = 0, time = 0, period = 1, weight = 0;
  uint32_t pid = 0, tid = 0, cpu = 0;
};

// A PERF_RECORD_SAMPLE's body for `e`'s sample_type, fields in the order
// of enum perf_event_sample_format's layout comment (linux/perf_event.h).
void AppendSample(Bytes& b, const Event& e, const SampleValues& s) {
  const uint64_t st = e.attr.sample_type;
  assert((st & ~kKnownSampleType) == 0);
  if (st & PERF_SAMPLE_IDENTIFIER) b.U64(e.id);
  if (st & PERF_SAMPLE_IP) b.U64(s.ip);
  if (st & PERF_SAMPLE_TID) {
    b.U32(s.pid);
    b.U32(s.tid);
  }
  if (st & PERF_SAMPLE_TIME) b.U64(s.time);
  if (st & PERF_SAMPLE_ADDR) b.U64(s.addr);
  if (st & PERF_SAMPLE_CPU) {
    b.U32(s.cpu);
    b.U32(0);
  }
  if (st & PERF_SAMPLE_PERIOD) b.U64(s.period);
  if (st & PERF_SAMPLE_WEIGHT) b.U64(s.weight);
}

uint16_t CpuMode(uint64_t addr, bool kernel_hint) {
  return kernel_hint || PFM_ADDR_IS_KERNEL(addr) ? PERF_RECORD_MISC_KERNEL
                                                 : PERF_RECORD_MISC_USER;
}

// ---- The records: a first pass, then time order ---------------------------

// Distinct requests and threads the first pass keeps track of. A trace names
// a few; a damaged one could name a new one in every record: past these,
// requests get no event (as past kMaxEvents) and threads no COMM.
constexpr size_t kMaxRequestsSeen = 4096;
constexpr size_t kMaxThreadsSeen = 1 << 16;

// The record types that become perf records (the others are counted in
// PerfDataSummary::skipped): only these say when the trace starts and ends,
// which cpus and threads it has.
bool IsExportedType(uint16_t type) {
  switch (type) {
    case PFM_REC_BRANCH:
    case PFM_REC_PEBS:
    case PFM_REC_SWITCH_OUT:
    case PFM_REC_SWITCH_IN:
    case PFM_REC_LOST:
    case PFM_REC_COUNTER:
    case PFM_REC_THROTTLE:
    case PFM_REC_EXIT:
      return true;
    default:
      return false;
  }
}

// What the writer learns of the records in one pass in file order, before
// writing any.
struct RecordScan {
  explicit RecordScan(size_t chunk) : chunk(chunk) {}
  uint64_t count = 0;     // every record
  uint64_t exported = 0;  // those of IsExportedType
  bool branches = false;
  std::vector<uint32_t> pebs_requests, counter_requests;  // first-seen order
  std::set<uint32_t> seen_pebs, seen_counter;
  // Of the exported records: the earliest and latest times; the pid and cpu
  // of the earliest record (the first in file order of equal times).
  uint64_t t_first = 0, t_last = 0;
  uint32_t first_pid = 0, first_cpu = 0;
  // Per (pid, tid) of the exported records: where its first record is in
  // time order, {time, index}.
  std::map<std::pair<uint32_t, uint32_t>, std::pair<uint64_t, uint64_t>> first_of_thread;
  // The least time of each `chunk` records (TimeOrder's chunks).
  size_t chunk;
  std::vector<uint64_t> chunk_min;

  void Add(const pfm_record& r) {
    if (count % chunk == 0) chunk_min.push_back(r.time);
    else chunk_min.back() = std::min<uint64_t>(chunk_min.back(), r.time);
    ++count;
    if (!IsExportedType(r.type)) return;
    if (r.type == PFM_REC_BRANCH) branches = true;
    if (r.type == PFM_REC_PEBS && seen_pebs.size() < kMaxRequestsSeen &&
        seen_pebs.insert(r.u.pebs.event).second)
      pebs_requests.push_back(r.u.pebs.event);
    if (r.type == PFM_REC_COUNTER && seen_counter.size() < kMaxRequestsSeen &&
        seen_counter.insert(r.u.counter.request).second)
      counter_requests.push_back(r.u.counter.request);
    if (exported == 0 || r.time < t_first) {
      t_first = r.time;
      first_pid = r.pid;
      first_cpu = r.cpu;
    }
    if (exported == 0 || r.time > t_last) t_last = r.time;
    const std::pair<uint64_t, uint64_t> at{r.time, count - 1};
    const auto key = std::make_pair(r.pid, r.tid);
    if (auto it = first_of_thread.find(key); it != first_of_thread.end()) {
      if (at < it->second) it->second = at;
    } else if (first_of_thread.size() < kMaxThreadsSeen) {
      first_of_thread.emplace(key, at);
    }
    ++exported;
  }
};

absl::Status WriteAll(int fd, const void* p, size_t n, uint64_t at, const char* what) {
  const char* b = static_cast<const char*>(p);
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::pwrite(fd, b + done, n - done, static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return absl::UnavailableError(
          absl::StrCat("cannot write ", what, ": ", strerror(w < 0 ? errno : ENOSPC)));
    done += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// An unlinked file for sorted runs, in `dir` (empty: $TMPDIR, else /tmp).
absl::StatusOr<UniqueFd> OpenRunsFile(std::string dir) {
  if (dir.empty()) {
    const char* t = std::getenv("TMPDIR");
    dir = t != nullptr && *t != '\0' ? t : "/tmp";
  }
  UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid() && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    std::string name = dir + "/pfm-export-XXXXXX";  // no O_TMPFILE there
    fd = UniqueFd(::mkostemp(name.data(), O_CLOEXEC));
    if (fd.valid()) ::unlink(name.c_str());
  }
  if (!fd.valid())
    return absl::UnavailableError(absl::StrCat(
        "cannot create a temporary file in ", dir, " to sort the records: ", strerror(errno)));
  return fd;
}

bool TimeLess(const pfm_record& a, const pfm_record& b) { return a.time < b.time; }

// The records of one pass in file order, handed on in time order (equal
// times in file order), in bounded memory. The first pass's least time of
// each chunk says which of the records held can go when a chunk ends: those
// no later than every record of the chunks still to come (which come after
// them in file order). The others are held; past `held_cap`, what is held
// and every later chunk become sorted runs in a temporary file, merged by
// Finish. Records handed on before the spill are the sorted order's start,
// so the merge goes on from there.
class TimeOrder {
 public:
  using Emit = std::function<absl::Status(const pfm_record&)>;

  TimeOrder(const std::vector<uint64_t>& chunk_min, size_t chunk, size_t held_cap,
            std::string temp_dir, Emit emit)
      : later_min_(chunk_min.size() + 1, UINT64_MAX), chunk_size_(chunk),
        held_cap_(held_cap), temp_dir_(std::move(temp_dir)), emit_(std::move(emit)) {
    for (size_t i = chunk_min.size(); i-- > 0;)
      later_min_[i] = std::min(later_min_[i + 1], chunk_min[i]);
    chunk_.reserve(chunk);
  }

  absl::Status Add(const pfm_record& r) {
    chunk_.push_back(r);
    return chunk_.size() == chunk_size_ ? EndChunk(false) : absl::OkStatus();
  }

  absl::Status Finish() {
    if (absl::Status s = EndChunk(true); !s.ok()) return s;
    return runs_.empty() ? absl::OkStatus() : Merge();
  }

  uint64_t peak_held() const { return peak_held_; }
  uint64_t runs() const { return runs_.size(); }

 private:
  struct Run {
    uint64_t first, n;  // records, in the runs file
  };

  absl::Status EndChunk(bool last) {
    if (!std::is_sorted(chunk_.begin(), chunk_.end(), TimeLess))
      std::stable_sort(chunk_.begin(), chunk_.end(), TimeLess);
    ++chunks_;
    if (!runs_.empty()) {  // spilling: the chunk is a run
      if (!chunk_.empty())
        if (absl::Status s = Spill(chunk_); !s.ok()) return s;
      chunk_.clear();
      return absl::OkStatus();
    }
    // What is held comes first in file order: it goes first among equals.
    // Nothing held (a trace in time order): the chunk is what is held.
    if (held_.empty()) {
      held_.swap(chunk_);
    } else {
      merged_.clear();
      merged_.reserve(held_.size() + chunk_.size());
      std::merge(held_.begin(), held_.end(), chunk_.begin(), chunk_.end(),
                 std::back_inserter(merged_), TimeLess);
      held_.swap(merged_);
      // merged_ now has the records held before: its buffer goes, so that
      // between chunks only what is held and the chunk's buffer are kept.
      std::vector<pfm_record>().swap(merged_);
    }
    chunk_.clear();
    chunk_.reserve(chunk_size_);
    const uint64_t limit = last || chunks_ >= later_min_.size() ? UINT64_MAX
                                                                 : later_min_[chunks_];
    size_t go = 0;
    while (go < held_.size() && held_[go].time <= limit) {
      if (absl::Status s = emit_(held_[go]); !s.ok()) return s;
      ++go;
    }
    held_.erase(held_.begin(), held_.begin() + static_cast<ptrdiff_t>(go));
    peak_held_ = std::max<uint64_t>(peak_held_, held_.size());
    if (held_.size() > held_cap_) {  // from here on, sorted runs
      absl::StatusOr<UniqueFd> fd = OpenRunsFile(temp_dir_);
      if (!fd.ok()) return fd.status();
      runs_fd_ = std::move(*fd);
      if (absl::Status s = Spill(held_); !s.ok()) return s;
      std::vector<pfm_record>().swap(held_);
      std::vector<pfm_record>().swap(merged_);
    }
    return absl::OkStatus();
  }

  absl::Status Spill(const std::vector<pfm_record>& sorted) {
    const Run run{spilled_, sorted.size()};
    if (absl::Status s = WriteAll(runs_fd_.get(), sorted.data(),
                                  sorted.size() * sizeof(pfm_record),
                                  run.first * sizeof(pfm_record), "the sort's temporary file");
        !s.ok())
      return s;
    spilled_ += run.n;
    runs_.push_back(run);
    return absl::OkStatus();
  }

  // A k-way merge of the runs, each read through a buffer; ties go to the
  // earlier run (earlier in file order).
  absl::Status Merge() {
    struct Cursor {
      uint64_t next = 0, left = 0;  // in the file
      std::vector<pfm_record> buf;
      size_t at = 0;
    };
    const size_t per_run = std::max<size_t>(
        64, std::min<size_t>(4096, (size_t{16} << 20) / sizeof(pfm_record) / runs_.size()));
    std::vector<Cursor> cur(runs_.size());
    auto fill = [&](Cursor& c) -> absl::Status {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(per_run, c.left));
      c.buf.resize(n);
      size_t done = 0;
      while (done < n * sizeof(pfm_record)) {
        const ssize_t r = ::pread(runs_fd_.get(), reinterpret_cast<char*>(c.buf.data()) + done,
                                  n * sizeof(pfm_record) - done,
                                  static_cast<off_t>(c.next * sizeof(pfm_record) + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
          return absl::UnavailableError(absl::StrCat(
              "cannot read the sort's temporary file: ", r < 0 ? strerror(errno) : "short"));
        done += static_cast<size_t>(r);
      }
      c.next += n;
      c.left -= n;
      c.at = 0;
      return absl::OkStatus();
    };
    using Head = std::pair<uint64_t, size_t>;  // time, run
    std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
    for (size_t i = 0; i < runs_.size(); ++i) {
      cur[i].next = runs_[i].first;
      cur[i].left = runs_[i].n;
      if (absl::Status s = fill(cur[i]); !s.ok()) return s;
      heads.emplace(cur[i].buf[0].time, i);
    }
    while (!heads.empty()) {
      const size_t i = heads.top().second;
      heads.pop();
      Cursor& c = cur[i];
      if (absl::Status s = emit_(c.buf[c.at]); !s.ok()) return s;
      if (++c.at == c.buf.size()) {
        if (c.left == 0) continue;
        if (absl::Status s = fill(c); !s.ok()) return s;
      }
      heads.emplace(c.buf[c.at].time, i);
    }
    return absl::OkStatus();
  }

  std::vector<uint64_t> later_min_;  // [k]: least time of chunks k and after
  size_t chunk_size_, held_cap_;
  std::string temp_dir_;
  Emit emit_;
  std::vector<pfm_record> chunk_, held_, merged_;
  size_t chunks_ = 0;  // chunks ended
  uint64_t peak_held_ = 0;
  UniqueFd runs_fd_;
  uint64_t spilled_ = 0;
  std::vector<Run> runs_;
};

// The events a trace needs, and which event each record goes to.
struct EventPlan {
  std::vector<Event> events;
  int bts = -1;                           // index of the branches event
  std::map<uint32_t, int> pebs;           // PEBS request id -> event index
  std::map<uint32_t, int> counter;        // counter request id -> event index
  std::map<uint32_t, uint64_t> period;    // PEBS request id -> sample period
  // Trailer counters with a reading, and the event each belongs to.
  std::vector<std::pair<TrailerCounter, int>> readings;
};

std::string BranchesName(const std::string& filter) {
  if (filter == "user") return "branches:u";
  if (filter == "kernel") return "branches:k";
  return "branches";
}

EventPlan PlanEvents(const RecordScan& scan, const HeaderInfo& info,
                     const std::vector<TrailerCounter>& counters) {
  EventPlan plan;
  const bool branches = scan.branches || info.bts == "history" || info.bts == "lossless";
  const std::vector<uint32_t>& pebs_requests = scan.pebs_requests;
  const std::vector<uint32_t>& counter_requests = scan.counter_requests;
  std::vector<Event>& ev = plan.events;
  // The new event's index, or -1 when kMaxEvents are there.
  auto add = [&](perf_event_attr attr, std::string name) {
    if (ev.size() >= kMaxEvents) return -1;
    Event e;
    e.attr = attr;
    e.id = ev.size() + 1;
    e.name = std::move(name);
    ev.push_back(std::move(e));
    return static_cast<int>(ev.size() - 1);
  };
  const bool any_pebs = !pebs_requests.empty() ||
                        std::any_of(counters.begin(), counters.end(),
                                    [](const TrailerCounter& c) { return c.pebs; });
  const bool any_counter =
      !counter_requests.empty() ||
      std::any_of(counters.begin(), counters.end(),
                  [](const TrailerCounter& c) { return !c.pebs; });
  if (branches || (!any_pebs && !any_counter)) {
    perf_event_attr a = BaseAttr(PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS);
    a.sample_period = 1;
    a.exclude_kernel = a.exclude_hv = info.filter == "user";
    a.exclude_user = info.filter == "kernel";
    plan.bts = add(a, BranchesName(info.filter));
  }
  // PEBS: the trailer's PEBS counters, then requests only the records name.
  auto add_pebs = [&](const std::string& name, uint64_t period) {
    perf_event_attr a = AttrForName(name);
    a.sample_type |= PERF_SAMPLE_WEIGHT;
    a.sample_period = period;
    a.precise_ip = 2;
    return add(a, name);
  };
  for (const TrailerCounter& c : counters) {
    if (!c.pebs) continue;
    const uint64_t period = c.period ? c.period : info.pebs_period ? info.pebs_period : 1;
    const int i = add_pebs(c.name, period);
    if (i < 0) break;
    if (c.request) {
      plan.pebs.emplace(*c.request, i);
      plan.period.emplace(*c.request, period);
    }
    if (c.has_reading) plan.readings.emplace_back(c, i);
  }
  bool spec_name_used = false;
  for (uint32_t req : pebs_requests) {
    if (plan.pebs.count(req)) continue;
    std::string name = absl::StrCat("pebs-request-", req);
    if (!info.pebs_event.empty() && !spec_name_used) {
      name = info.pebs_event;
      spec_name_used = true;
    }
    const uint64_t period = info.pebs_period ? info.pebs_period : 1;
    const int i = add_pebs(name, period);
    if (i < 0) break;
    plan.pebs.emplace(req, i);
    plan.period.emplace(req, period);
  }
  for (const TrailerCounter& c : counters) {
    if (c.pebs) continue;
    const int i = add(AttrForName(c.name), c.name);
    if (i < 0) break;
    if (c.request) plan.counter.emplace(*c.request, i);
    if (c.has_reading) plan.readings.emplace_back(c, i);
  }
  for (uint32_t req : counter_requests) {
    if (plan.counter.count(req)) continue;
    const int i = add(BaseAttr(PERF_TYPE_RAW, 0), absl::StrCat("counter-request-", req));
    if (i < 0) break;
    plan.counter.emplace(req, i);
  }
  // The first event carries the side records, as perf record's first
  // (tracking) event does; with several, each sample names its event.
  perf_event_attr& first = ev.front().attr;
  first.mmap = first.comm = first.task = first.mmap2 = first.comm_exec = 1;
  first.context_switch = 1;
  if (ev.size() > 1)
    for (Event& e : ev) e.attr.sample_type |= PERF_SAMPLE_IDENTIFIER;
  return plan;
}

// ---- The file -------------------------------------------------------------

absl::Status WriteError(const std::string& path, int e) {
  return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", strerror(e)));
}

// Buffered appends to a file, and the header written in place at the end.
class Sink {
 public:
  Sink(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  uint64_t offset() const { return written_ + buf_.size(); }
  absl::Status Append(const std::string& bytes) {
    buf_ += bytes;
    return buf_.size() >= kFlushBytes ? Flush() : absl::OkStatus();
  }
  absl::Status Flush() {
    size_t done = 0;
    while (done < buf_.size()) {
      const ssize_t w = ::write(fd_.get(), buf_.data() + done, buf_.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return WriteError(path_, w < 0 ? errno : ENOSPC);
      done += static_cast<size_t>(w);
    }
    written_ += done;
    buf_.clear();
    return absl::OkStatus();
  }
  absl::Status WriteAt(uint64_t at, const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t w =
          ::pwrite(fd_.get(), bytes.data() + done, bytes.size() - done, at + done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return WriteError(path_, w < 0 ? errno : ENOSPC);
      done += static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }
  absl::Status Close() {
    if (::close(fd_.release()) != 0 && errno != EINTR) return WriteError(path_, errno);
    return absl::OkStatus();
  }

 private:
  UniqueFd fd_;
  std::string path_;
  std::string buf_;
  uint64_t written_ = 0;
};

// One record at a time: the header's size is filled in by Finish.
class RecordBuilder {
 public:
  Bytes& Begin(uint32_t type, uint16_t misc) {
    b_.clear();
    b_.U32(type);
    b_.U16(misc);
    b_.U16(0);
    return b_;
  }
  const std::string& Finish() {
    assert(b_.size() % 8 == 0 && b_.size() <= kMaxRecordBytes);
    b_.PatchU16(6, static_cast<uint16_t>(b_.size()));
    return b_.str();
  }

 private:
  Bytes b_;
};

// ---- Side records: who runs what, and where it is mapped ----------------

// Side records of one time `at`: a COMM naming process `pid`'s program
// (misc COMM_EXEC) and the same name for its other threads, then an MMAP2
// per mapping of a MAPS block.
struct SideBlock {
  uint64_t at = 0;
  uint32_t pid = 0;
  std::string comm;                   // empty: no COMM
  std::vector<uint32_t> threads;      // the other threads named with it
  const ProcessMaps* maps = nullptr;  // null: no MMAP2
};

// The side blocks in time order (equal times in the order below): the
// traced command's COMM (`record` traces) at `t_first`, then the MAPS
// blocks in the trace's order. A process's first block is at `t_first`, so
// its mappings govern all its records; a later one (an exec, a dlopen) at
// its own time. A process other than the traced command, or one whose
// program changed (an exec), gets a COMM naming its program (its first
// file mapping) with the block. Each other thread of a process that has a
// COMM gets one too, with the last COMM of its process at or before its
// first record (else the first).
std::vector<SideBlock> PlanSideBlocks(const HeaderInfo& info, uint32_t task, uint64_t t_first,
                                      const RecordScan& scan,
                                      const std::vector<const ProcessMaps*>& blocks) {
  std::vector<SideBlock> side;
  std::map<uint32_t, std::string> exe_of;   // per pid: the program it runs
  std::map<uint32_t, std::string> comm_of;  // per pid: the last COMM planned
  if (task != 0 && !info.command.empty()) {
    SideBlock sb;
    sb.at = t_first;
    sb.pid = task;
    sb.comm = comm_of[task] = CommOf(info.command);
    side.push_back(std::move(sb));
  }
  for (const ProcessMaps* pm : blocks) {
    if (pm == nullptr || pm->mappings.empty()) continue;
    SideBlock sb;
    sb.pid = pm->pid > 0 ? static_cast<uint32_t>(pm->pid) : task;
    sb.maps = pm;
    const bool first_of_pid = exe_of.count(sb.pid) == 0;
    sb.at = first_of_pid ? t_first : std::max(pm->time_ns, t_first);
    std::string exe;  // the program: its first file mapping (the lowest address)
    for (const Mapping& m : pm->mappings)
      if (!m.path.empty() && m.path[0] == '/') {
        exe = m.path;
        break;
      }
    const bool renamed = first_of_pid ? sb.pid != task : exe_of[sb.pid] != exe;
    exe_of[sb.pid] = exe;
    if (renamed && !exe.empty() && comm_of[sb.pid] != CommOf(exe))
      sb.comm = comm_of[sb.pid] = CommOf(exe);
    side.push_back(std::move(sb));
  }
  std::stable_sort(side.begin(), side.end(),
                   [](const SideBlock& a, const SideBlock& b) { return a.at < b.at; });
  // Per pid, its blocks with a COMM, in time order.
  std::map<uint32_t, std::vector<size_t>> comms;
  for (size_t i = 0; i < side.size(); ++i)
    if (!side[i].comm.empty()) comms[side[i].pid].push_back(i);
  // Per block, its threads in the order of their first records.
  std::vector<std::vector<std::pair<std::pair<uint64_t, uint64_t>, uint32_t>>> named(
      side.size());
  for (const auto& [key, first] : scan.first_of_thread) {
    const auto& [pid, tid] = key;
    const auto it = comms.find(pid);
    if (tid == pid || it == comms.end()) continue;
    size_t pick = it->second.front();
    for (size_t i : it->second)
      if (side[i].at <= first.first) pick = i;
    named[pick].emplace_back(first, tid);
  }
  for (size_t i = 0; i < side.size(); ++i) {
    std::sort(named[i].begin(), named[i].end());
    for (const auto& n : named[i]) side[i].threads.push_back(n.second);
  }
  return side;
}

}  // namespace

absl::StatusOr<PerfDataSummary> WritePerfData(const Trace& trace,
                                              const PerfDataOptions& options,
                                              const std::string& path) {
  return WritePerfData(
      trace.header, trace.trailer,
      [&](const PerfRecordVisitor& visit) -> absl::Status {
        for (const pfm_record& r : trace.records)
          if (absl::Status s = visit(r); !s.ok()) return s;
        return absl::OkStatus();
      },
      options, path);
}

absl::StatusOr<PerfDataSummary> WritePerfData(const json::object& header,
                                              const json::object& trailer,
                                              const PerfRecordPass& records,
                                              const PerfDataOptions& options,
                                              const std::string& path) {
  const HeaderInfo info = ReadHeaderInfo(header);
  const std::vector<TrailerCounter> counters = ReadTrailerCounters(trailer);
  const size_t chunk = std::max<size_t>(1, options.reorder_chunk);
  RecordScan scan(chunk);
  if (absl::Status s = records([&](const pfm_record& r) {
        scan.Add(r);
        return absl::OkStatus();
      });
      !s.ok())
    return s;
  const EventPlan plan = PlanEvents(scan, info, counters);
  const std::vector<Event>& events = plan.events;
  const Event& first = events.front();

  // Times, cpus and threads are the exported records' (a RESIZED or an
  // unknown record says nothing perf shows).
  const bool no_records = scan.exported == 0;
  const uint64_t t_first = no_records ? (options.maps ? options.maps->time_ns : 0)
                                      : scan.t_first;
  const uint64_t t_last = no_records ? t_first : scan.t_last;

  // The task the side records describe: the traced command, else the
  // mappings' process, else the first record's.
  uint32_t task = 0;
  if (info.pid > 0) task = static_cast<uint32_t>(info.pid);
  else if (options.maps != nullptr && options.maps->pid > 0)
    task = static_cast<uint32_t>(options.maps->pid);
  else if (!no_records) task = scan.first_pid;

  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid())
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  Sink out(std::move(fd), path);
  PerfDataSummary sum;
  for (const Event& e : events) sum.events.push_back(e.name);

  // Header (written last), the attrs with their ids sections, the ids.
  const uint64_t n = events.size();
  const uint64_t attrs_offset = kPerfHeaderBytes;
  const uint64_t ids_offset = attrs_offset + n * kPerfFileAttrBytes;
  const uint64_t data_offset = ids_offset + n * 8;
  Bytes b;
  b.Zeros(kPerfHeaderBytes);
  for (uint64_t i = 0; i < n; ++i) {
    b.Raw(&events[i].attr, kPerfAttrBytes);
    b.U64(ids_offset + 8 * i);
    b.U64(8);
  }
  for (const Event& e : events) b.U64(e.id);
  if (absl::Status s = out.Append(b.str()); !s.ok()) return s;

  RecordBuilder rb;
  uint64_t in_round = 0;
  uint32_t max_cpu = 0;
  auto emit = [&](uint64_t* count) -> absl::Status {
    ++*count;
    ++in_round;
    return out.Append(rb.Finish());
  };
  auto finish_round = [&]() -> absl::Status {
    in_round = 0;
    rb.Begin(kPerfRecordFinishedRound, 0);
    return out.Append(rb.Finish());
  };

  // The side records (COMM, MMAP2), each block at its time among the
  // records: those before every record first, an exec's or a dlopen's where
  // it happened, so the file stays in time order.
  std::vector<const ProcessMaps*> blocks = options.all_maps;
  if (blocks.empty() && options.maps != nullptr) blocks.push_back(options.maps);
  const std::vector<SideBlock> side = PlanSideBlocks(info, task, t_first, scan, blocks);
  size_t next_side = 0;
  // Writes the blocks not written yet that are no later than `upto`.
  auto write_side = [&](uint64_t upto) -> absl::Status {
    for (; next_side < side.size() && side[next_side].at <= upto; ++next_side) {
      const SideBlock& sb = side[next_side];
      if (!sb.comm.empty()) {
        // The process (an exec), then its other threads (plain COMMs).
        for (size_t i = 0; i <= sb.threads.size(); ++i) {
          const uint32_t tid = i == 0 ? sb.pid : sb.threads[i - 1];
          Bytes& c = rb.Begin(PERF_RECORD_COMM, i == 0 ? PERF_RECORD_MISC_COMM_EXEC : 0);
          c.U32(sb.pid);
          c.U32(tid);
          c.Padded(sb.comm, 8);
          AppendSampleId(c, first, sb.pid, tid, sb.at, 0);
          if (absl::Status s = emit(&sum.side_records); !s.ok()) return s;
        }
      }
      if (sb.maps == nullptr) continue;
      for (const Mapping& m : sb.maps->mappings) {
        Bytes& r = rb.Begin(PERF_RECORD_MMAP2, PERF_RECORD_MISC_USER);
        r.U32(sb.pid);
        r.U32(sb.pid);
        r.U64(m.start);
        r.U64(m.end - m.start);
        r.U64(m.offset);
        r.U32(0);  // maj
        r.U32(0);  // min
        r.U64(0);  // ino
        r.U64(0);  // ino_generation
        r.U32(PROT_READ | PROT_EXEC | (m.writable ? PROT_WRITE : 0));
        r.U32(m.shared ? MAP_SHARED : MAP_PRIVATE);
        r.Padded(m.path.empty() ? "//anon" : m.path, 8);  // perf's name for anonymous
        AppendSampleId(r, first, sb.pid, sb.pid, sb.at, 0);
        if (absl::Status s = emit(&sum.side_records); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  };

  auto read_record = [&](const Event& e, uint32_t pid, uint32_t tid, uint64_t time,
                         uint32_t cpu, uint64_t value, uint64_t enabled,
                         uint64_t running) {
    Bytes& r = rb.Begin(PERF_RECORD_READ, 0);
    r.U32(pid);
    r.U32(tid);
    r.U64(value);  // read_format: value, time_enabled, time_running
    r.U64(enabled);
    r.U64(running);
    AppendSampleId(r, e, pid, tid, time, cpu);
    return emit(&sum.reads);
  };

  // The records in time order (perf's ordered delivery would yield that
  // order anyway; written so, perf shows records of equal time in the
  // trace's order and no round is out of order).
  uint64_t written = 0;
  auto write_record = [&](const pfm_record& rec) -> absl::Status {
    ++written;
    // The side blocks whose time has come, before the exported records of
    // their time. Only an exported record's time counts: t_last (the
    // trailer's READs' time) is the last of those, and no block goes past it.
    if (IsExportedType(rec.type))
      if (absl::Status s = write_side(rec.time); !s.ok()) return s;
    bool skipped = false;
    absl::Status s;
    switch (rec.type) {
      case PFM_REC_BRANCH: {
        if (plan.bts < 0)  // planned from a first pass without branches
          return absl::DataLossError(
              "the trace changed while it was exported: a branch record in the second "
              "pass, none in the first");
        const Event& e = events[plan.bts];
        SampleValues v;
        v.ip = rec.u.branch.from;
        v.addr = rec.u.branch.to;
        v.time = rec.time;
        v.pid = rec.pid;
        v.tid = rec.tid;
        v.cpu = rec.cpu;
        Bytes& r = rb.Begin(PERF_RECORD_SAMPLE,
                            CpuMode(v.ip, rec.misc & PFM_MISC_BRANCH_KERNEL_FROM));
        AppendSample(r, e, v);
        s = emit(&sum.samples);
        break;
      }
      case PFM_REC_PEBS: {
        const uint32_t req = rec.u.pebs.event;
        const auto it = plan.pebs.find(req);
        if (it == plan.pebs.end()) {  // past kMaxEvents
          skipped = true;
          break;
        }
        const Event& e = events[it->second];
        SampleValues v;
        v.ip = rec.u.pebs.ip;
        v.addr = rec.u.pebs.addr;
        v.time = rec.time;
        v.pid = rec.pid;
        v.tid = rec.tid;
        v.cpu = rec.cpu;
        v.period = plan.period.find(req)->second;  // set with plan.pebs
        v.weight = rec.u.pebs.latency;
        Bytes& r = rb.Begin(PERF_RECORD_SAMPLE,
                            CpuMode(v.ip, false) | PERF_RECORD_MISC_EXACT_IP);
        AppendSample(r, e, v);
        s = emit(&sum.samples);
        break;
      }
      case PFM_REC_SWITCH_OUT:
      case PFM_REC_SWITCH_IN: {
        uint16_t misc = 0;
        if (rec.type == PFM_REC_SWITCH_OUT) {
          misc = PERF_RECORD_MISC_SWITCH_OUT;
          if (rec.misc & PFM_MISC_SWITCH_PREEMPT) misc |= PERF_RECORD_MISC_SWITCH_OUT_PREEMPT;
        }
        // A CPU's trace names the other task (perf's CPU-wide form); a
        // task's trace is about that task alone, as perf's per-task form.
        Bytes& r = rb.Begin(info.cpu_context ? PERF_RECORD_SWITCH_CPU_WIDE
                                             : PERF_RECORD_SWITCH,
                            misc);
        if (info.cpu_context) {
          r.U32(rec.u.sw.other_pid);
          r.U32(rec.u.sw.other_tid);
        }
        AppendSampleId(r, first, rec.pid, rec.tid, rec.time, rec.cpu);
        s = emit(&sum.side_records);
        break;
      }
      case PFM_REC_LOST: {
        Bytes& r = rb.Begin(PERF_RECORD_LOST, 0);
        r.U64(first.id);
        r.U64(rec.u.lost.count);
        AppendSampleId(r, first, rec.pid, rec.tid, rec.time, rec.cpu);
        s = emit(&sum.side_records);
        break;
      }
      case PFM_REC_THROTTLE: {
        Bytes& r = rb.Begin(PERF_RECORD_THROTTLE, 0);
        r.U64(rec.time);
        r.U64(first.id);
        r.U64(first.id);  // stream_id
        AppendSampleId(r, first, rec.pid, rec.tid, rec.time, rec.cpu);
        s = emit(&sum.side_records);
        break;
      }
      case PFM_REC_EXIT: {
        // The parent is not in the trace: 0.
        Bytes& r = rb.Begin(PERF_RECORD_EXIT, 0);
        r.U32(rec.pid);
        r.U32(0);
        r.U32(rec.tid);
        r.U32(0);
        r.U64(rec.time);
        AppendSampleId(r, first, rec.pid, rec.tid, rec.time, rec.cpu);
        s = emit(&sum.side_records);
        break;
      }
      case PFM_REC_COUNTER: {
        const auto it = plan.counter.find(rec.u.counter.request);
        if (it == plan.counter.end()) {  // past kMaxEvents
          skipped = true;
          break;
        }
        s = read_record(events[it->second], rec.pid, rec.tid, rec.time, rec.cpu,
                        rec.u.counter.value, rec.u.counter.time_enabled,
                        rec.u.counter.time_running);
        break;
      }
      default:  // RESIZED, SCHEDULE, GAP, EXEC, PAD, unknown: nothing in perf says them
        skipped = true;
        break;
    }
    if (!s.ok()) return s;
    if (skipped) ++sum.skipped[RecordTypeName(rec.type)];
    else max_cpu = std::max<uint32_t>(max_cpu, rec.cpu);
    if (in_round >= kPerfRoundRecords) return finish_round();
    return absl::OkStatus();
  };
  {
    TimeOrder order(scan.chunk_min, chunk, options.reorder_held, options.temp_dir,
                    write_record);
    uint64_t passed = 0;
    if (absl::Status s = records([&](const pfm_record& r) {
          ++passed;
          return passed <= scan.count ? order.Add(r) : absl::OkStatus();
        });
        !s.ok())
      return s;
    if (absl::Status s = order.Finish(); !s.ok()) return s;
    if (passed != scan.count || written != scan.count)
      return absl::DataLossError(absl::StrCat(
          "the trace changed while it was exported: ", scan.count,
          " records in the first pass, ", passed, " in the second"));
    sum.peak_held = order.peak_held();
    sum.sort_runs = order.runs();
  }
  // The side blocks up to the last record, the counters' final values (the
  // trailer's: what `pfmctl report` shows) at its time, then any blocks
  // later than every record. The values are the traced process's in a
  // task's trace; in a CPU's trace the cpu's, of no task (pid/tid -1, as
  // perf's CPU-wide events have no task).
  if (absl::Status s = write_side(t_last); !s.ok()) return s;
  const uint32_t read_task = info.cpu_context ? UINT32_MAX : task;
  const uint32_t read_cpu = info.cpu_context ? info.cpu.value_or(scan.first_cpu) : 0;
  for (const auto& [c, i] : plan.readings) {
    if (absl::Status s = read_record(events[i], read_task, read_task, t_last, read_cpu, c.value,
                                     c.time_enabled, c.time_running);
        !s.ok())
      return s;
    max_cpu = std::max(max_cpu, read_cpu);
  }
  if (absl::Status s = write_side(UINT64_MAX); !s.ok()) return s;
  // The last round; it also keeps the data section from being empty.
  if (absl::Status s = finish_round(); !s.ok()) return s;
  const uint64_t data_size = out.offset() - data_offset;
  sum.data_bytes = data_size;

  // Features: the index, then their contents, in bit order.
  std::vector<std::pair<int, std::string>> features;
  {
    Bytes f;
    f.U32(max_cpu + 1);  // available
    f.U32(max_cpu + 1);  // online
    features.emplace_back(kPerfFeatNrCpus, f.str());
  }
  if (!options.cmdline.empty()) {
    Bytes f;
    f.U32(static_cast<uint32_t>(options.cmdline.size()));
    for (const std::string& w : options.cmdline) f.HeaderString(w);
    features.emplace_back(kPerfFeatCmdline, f.str());
  }
  {
    Bytes f;
    f.U32(static_cast<uint32_t>(n));
    f.U32(kPerfAttrBytes);
    for (const Event& e : events) {
      f.Raw(&e.attr, kPerfAttrBytes);
      f.U32(1);
      f.HeaderString(e.name);
      f.U64(e.id);
    }
    features.emplace_back(kPerfFeatEventDesc, f.str());
  }
  if (!no_records) {
    Bytes f;
    f.U64(t_first);
    f.U64(t_last);
    features.emplace_back(kPerfFeatSampleTime, f.str());
  }
  if (options.build_ids && !blocks.empty()) {
    Bytes f;
    std::set<std::string> seen;
    std::vector<const Mapping*> all_mappings;
    for (const ProcessMaps* pm : blocks)
      if (pm != nullptr)
        for (const Mapping& m : pm->mappings) all_mappings.push_back(&m);
    for (const Mapping* mp : all_mappings) {
      const Mapping& m = *mp;
      if (m.path.empty() || m.path[0] != '/' || !seen.insert(m.path).second) continue;
      // The build-id recorded with the trace names the binary that ran; the
      // file now may be another (rebuilt, upgraded): say so, and keep the
      // recorded one, so perf does not take the new file for the old.
      const std::string now = ReadBuildId(m.path);
      if (!m.build_id.empty() && now != m.build_id)
        sum.warnings.push_back(absl::StrCat(
            m.path, ": build-id ", BuildIdHex(m.build_id), " when recorded, ",
            now.empty() ? "none" : BuildIdHex(now),
            " now (the file changed since the recording)"));
      const std::string id = m.build_id.empty() ? now : m.build_id;
      if (id.empty() || id.size() > kMaxBuildId) continue;  // perf's field holds 20
      const size_t name_bytes = (m.path.size() + 1 + kStringAlign - 1) / kStringAlign * kStringAlign;
      f.U32(kPerfRecordHeaderBuildId);
      f.U16(PERF_RECORD_MISC_USER | kPerfMiscBuildIdSize);
      f.U16(static_cast<uint16_t>(8 + 4 + kBuildIdField + name_bytes));
      f.U32(static_cast<uint32_t>(-1));  // pid: the host
      f.Raw(id.data(), id.size());
      f.Zeros(kMaxBuildId - id.size());
      const uint8_t size = static_cast<uint8_t>(id.size());
      f.Raw(&size, 1);
      f.Zeros(kBuildIdField - kMaxBuildId - 1);
      f.Padded(m.path, kStringAlign);
      ++sum.build_ids;
    }
    if (f.size() > 0) features.emplace_back(kPerfFeatBuildId, f.str());
  }
  // The index lists features in bit order.
  std::sort(features.begin(), features.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  uint64_t feature_bits[4] = {0, 0, 0, 0};
  Bytes index, contents;
  uint64_t at = out.offset() + features.size() * 16;
  for (const auto& [bit, bytes] : features) {
    feature_bits[bit / 64] |= 1ULL << (bit % 64);
    index.U64(at);
    index.U64(bytes.size());
    contents.Raw(bytes.data(), bytes.size());
    at += bytes.size();
  }
  if (absl::Status s = out.Append(index.str()); !s.ok()) return s;
  if (absl::Status s = out.Append(contents.str()); !s.ok()) return s;
  if (absl::Status s = out.Flush(); !s.ok()) return s;

  Bytes h;
  h.Raw(kPerfMagic, sizeof(kPerfMagic));
  h.U64(kPerfHeaderBytes);
  h.U64(kPerfFileAttrBytes);
  h.U64(attrs_offset);
  h.U64(n * kPerfFileAttrBytes);
  h.U64(data_offset);
  h.U64(data_size);
  h.U64(0);  // event_types: unused since perf 3.x
  h.U64(0);
  for (uint64_t w : feature_bits) h.U64(w);
  assert(h.size() == kPerfHeaderBytes);
  if (absl::Status s = out.WriteAt(0, h.str()); !s.ok()) return s;
  if (absl::Status s = out.Close(); !s.ok()) return s;
  return sum;
}

}  // namespace pfm
