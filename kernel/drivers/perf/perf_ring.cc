#include "kernel/drivers/perf/perf_ring.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pfm {
namespace {

constexpr size_t kMaxRecord = 1u << 16;  // perf_event_header.size is a u16

// Bounds-checked cursor over one record.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t size, size_t at) : p_(p), size_(size), at_(at) {}
  bool U64(uint64_t* v) {
    if (at_ + 8 > size_) return false;
    std::memcpy(v, p_ + at_, 8);
    at_ += 8;
    return true;
  }
  bool U32Pair(uint32_t* a, uint32_t* b) {
    if (at_ + 8 > size_) return false;
    std::memcpy(a, p_ + at_, 4);
    std::memcpy(b, p_ + at_ + 4, 4);
    at_ += 8;
    return true;
  }
  bool Skip(uint64_t n) {
    if (n > size_ - at_) return false;
    at_ += n;
    return true;
  }

 private:
  const uint8_t* p_;
  size_t size_;
  size_t at_;
};

// Sample layout: include/uapi/linux/perf_event.h, PERF_RECORD_SAMPLE.
bool ParseSample(Cursor* c, uint64_t t, PerfSample* s) {
  uint64_t v = 0;
  uint32_t res = 0;
  if ((t & PERF_SAMPLE_IDENTIFIER) && !c->U64(&s->id)) return false;
  if ((t & PERF_SAMPLE_IP) && !c->U64(&s->ip)) return false;
  if ((t & PERF_SAMPLE_TID) && !c->U32Pair(&s->pid, &s->tid)) return false;
  if ((t & PERF_SAMPLE_TIME) && !c->U64(&s->time)) return false;
  if ((t & PERF_SAMPLE_ADDR) && !c->U64(&s->addr)) return false;
  if ((t & PERF_SAMPLE_ID) && !c->U64(&s->id)) return false;
  if ((t & PERF_SAMPLE_STREAM_ID) && !c->U64(&s->stream_id)) return false;
  if ((t & PERF_SAMPLE_CPU) && !c->U32Pair(&s->cpu, &res)) return false;
  if ((t & PERF_SAMPLE_PERIOD) && !c->U64(&s->period)) return false;
  if (t & PERF_SAMPLE_CALLCHAIN) {  // u64 nr, u64 ips[nr]
    if (!c->U64(&v) || v > kMaxRecord / 8 || !c->Skip(v * 8)) return false;
  }
  if (t & PERF_SAMPLE_RAW) {  // u32 size, data[size]; size pads to u64
    uint32_t size = 0, first = 0;
    if (!c->U32Pair(&size, &first)) return false;
    if (size < 4 || !c->Skip(size - 4)) return false;
  }
  if (t & (PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT)) {
    if (!c->U64(&v)) return false;
    // WEIGHT_STRUCT: {u32 var1_dw (latency); u16 var2_w; u16 var3_w}.
    s->weight = (t & PERF_SAMPLE_WEIGHT_STRUCT) ? (v & 0xffffffffu) : v;
  }
  if ((t & PERF_SAMPLE_DATA_SRC) && !c->U64(&s->data_src)) return false;
  if ((t & PERF_SAMPLE_TRANSACTION) && !c->U64(&s->transaction)) return false;
  if ((t & PERF_SAMPLE_PHYS_ADDR) && !c->U64(&s->phys_addr)) return false;
  return true;
}

// sample_id trailer (attr.sample_id_all): at the record's end.
size_t SampleIdSize(uint64_t t) {
  size_t n = 0;
  if (t & PERF_SAMPLE_TID) n += 8;
  if (t & PERF_SAMPLE_TIME) n += 8;
  if (t & PERF_SAMPLE_ID) n += 8;
  if (t & PERF_SAMPLE_STREAM_ID) n += 8;
  if (t & PERF_SAMPLE_CPU) n += 8;
  if (t & PERF_SAMPLE_IDENTIFIER) n += 8;
  return n;
}

bool ParseSampleId(const uint8_t* rec, size_t size, uint64_t t,
                   PerfSampleId* id) {
  const size_t n = SampleIdSize(t);
  if (n + sizeof(perf_event_header) > size) return false;
  Cursor c(rec, size, size - n);
  uint64_t skip = 0;
  uint32_t res = 0;
  if ((t & PERF_SAMPLE_TID) && !c.U32Pair(&id->pid, &id->tid)) return false;
  if ((t & PERF_SAMPLE_TIME) && !c.U64(&id->time)) return false;
  if ((t & PERF_SAMPLE_ID) && !c.U64(&id->id)) return false;
  if ((t & PERF_SAMPLE_STREAM_ID) && !c.U64(&skip)) return false;
  if ((t & PERF_SAMPLE_CPU) && !c.U32Pair(&id->cpu, &res)) return false;
  if ((t & PERF_SAMPLE_IDENTIFIER) && !c.U64(&id->id)) return false;
  return true;
}

}  // namespace

int ParsePerfRecord(const uint8_t* rec, size_t size, uint64_t sample_type,
                    bool sample_id_all, PerfRecord* out) {
  if (size < sizeof(perf_event_header)) return -EINVAL;
  perf_event_header h;
  std::memcpy(&h, rec, sizeof(h));
  *out = PerfRecord();
  out->type = h.type;
  out->misc = h.misc;
  out->size = h.size;
  out->raw = rec;
  Cursor c(rec, size, sizeof(h));
  switch (h.type) {
    case PERF_RECORD_SAMPLE:
      return ParseSample(&c, sample_type, &out->sample) ? 0 : -EINVAL;
    case PERF_RECORD_SWITCH:
    case PERF_RECORD_SWITCH_CPU_WIDE:
      out->switch_out = (h.misc & PERF_RECORD_MISC_SWITCH_OUT) != 0;
      out->switch_preempt = (h.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) != 0;
      if (h.type == PERF_RECORD_SWITCH_CPU_WIDE &&
          !c.U32Pair(&out->next_prev_pid, &out->next_prev_tid))
        return -EINVAL;
      break;
    case PERF_RECORD_LOST:
      if (!c.U64(&out->lost_id) || !c.U64(&out->lost)) return -EINVAL;
      break;
    default:
      return 0;  // not parsed; the caller has type, misc and raw bytes
  }
  if (sample_id_all && !ParseSampleId(rec, size, sample_type, &out->sample_id))
    return -EINVAL;
  return 0;
}

int PerfRingReader::Init(void* base, size_t len, uint64_t sample_type,
                         bool sample_id_all, ErrorDetail* d) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (base == nullptr || len < 2 * page || len % page != 0)
    return SetError(d, -EINVAL,
                    "perf ring needs a metadata page and data pages, got %zu bytes",
                    len);
  const size_t data_pages = len / page - 1;
  if ((data_pages & (data_pages - 1)) != 0)
    return SetError(d, -EINVAL,
                    "perf ring data area must be 2^n pages, got %zu", data_pages);
  if ((sample_type & ~kPerfSupportedSampleType) != 0)
    return SetError(d, -EINVAL,
                    "perf ring parser cannot walk sample_type bits 0x%llx",
                    (unsigned long long)(sample_type & ~kPerfSupportedSampleType));
  page_ = static_cast<perf_event_mmap_page*>(base);
  uint64_t offset = page_->data_offset, size = page_->data_size;
  if (offset == 0 || size == 0) {  // kernels before 4.1 leave them 0
    offset = page;
    size = len - page;
  }
  if (offset + size > len || (size & (size - 1)) != 0)
    return SetError(d, -EINVAL, "perf ring metadata page is inconsistent");
  data_ = static_cast<const uint8_t*>(base) + offset;
  data_size_ = size;
  sample_type_ = sample_type;
  sample_id_all_ = sample_id_all;
  wrap_buf_.reset(new uint8_t[kMaxRecord]);
  return 0;
}

uint64_t PerfRingReader::pending() const {
  if (page_ == nullptr) return 0;
  return __atomic_load_n(&page_->data_head, __ATOMIC_ACQUIRE) -
         page_->data_tail;
}

int PerfRingReader::Read(const std::function<void(const PerfRecord&)>& fn,
                         ErrorDetail* d) {
  if (page_ == nullptr) return SetError(d, -EINVAL, "perf ring not initialised");
  const uint64_t head = __atomic_load_n(&page_->data_head, __ATOMIC_ACQUIRE);
  uint64_t tail = page_->data_tail;  // only we write it
  const uint64_t mask = data_size_ - 1;
  int n = 0;
  int rc = 0;
  PerfRecord rec;
  while (tail != head) {
    const uint64_t avail = head - tail;
    if (avail < sizeof(perf_event_header) || avail > data_size_) {
      rc = SetError(d, -EIO, "perf ring head/tail inconsistent (%llu bytes published)",
                    (unsigned long long)avail);
      break;
    }
    perf_event_header h;
    const uint64_t off = tail & mask;
    // The header itself may straddle the end (it is 8 bytes, records are
    // 8-aligned, so only with a corrupt ring; copy it byte-safely anyway).
    for (size_t i = 0; i < sizeof(h); ++i)
      reinterpret_cast<uint8_t*>(&h)[i] = data_[(off + i) & mask];
    if (h.size < sizeof(h) || (h.size & 7) != 0 || h.size > avail) {
      rc = SetError(d, -EIO,
                    "corrupt perf record (type %u, size %u, %llu bytes left)",
                    h.type, h.size, (unsigned long long)avail);
      break;
    }
    const uint8_t* p = data_ + off;
    if (off + h.size > data_size_) {  // wraps: copy out
      const size_t first = data_size_ - off;
      std::memcpy(wrap_buf_.get(), data_ + off, first);
      std::memcpy(wrap_buf_.get() + first, data_, h.size - first);
      p = wrap_buf_.get();
    }
    if (ParsePerfRecord(p, h.size, sample_type_, sample_id_all_, &rec) == 0) {
      fn(rec);
      ++n;
    } else {
      rc = SetError(d, -EIO,
                    "perf record type %u of %u bytes is too short for its fields",
                    h.type, h.size);
      tail += h.size;
      break;
    }
    tail += h.size;
  }
  if (rc < 0) {
    discarded_ += head - tail;
    tail = head;
  }
  __atomic_store_n(&page_->data_tail, tail, __ATOMIC_RELEASE);
  return rc < 0 ? rc : n;
}

pfm_bts_raw BtsFromSample(const PerfSample& s) {
  pfm_bts_raw r{};
  r.from = s.ip;
  r.to = s.addr;
  r.flags = 0;  // perf does not report the predicted bit for BTS samples
  return r;
}

pfm_pebs_raw PebsFromSample(const PerfSample& s, int counter) {
  pfm_pebs_raw r{};
  r.ip = s.ip;
  r.eventing_ip = s.ip;
  r.data_linear_address = s.addr;
  r.data_source = s.data_src;
  r.latency = s.weight;
  r.tsc = s.time;
  if (counter >= 0 && counter < 64) r.applicable_counters = 1ull << counter;
  return r;
}

}  // namespace pfm
