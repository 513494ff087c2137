// compact: bytes per branch record in compact vs fixed rings, on
//   (a) the sim workload: SimMachine driving a Kernel, consumers on one task;
//   (b) a real soft-BTS trace of a real program (/bin/true by default) run
//       under SoftBtsTracer, drained into a DsAllocator.
// Each has a fixed and a compact lossless consumer on the same task, so both
// see the same records. The fixed ring is the baseline (64 bytes a record).
//
// Per-field cost: the fixed ring's records are re-encoded with the real
// codec as the writer places them (PlaceCompactRecord: chunk resets and
// padding included) while the varint length of each field is counted from
// the codec state before the record:
// lead byte, time delta, cpu/pid/tid, misc+flags, from delta, to delta.
// The target is <= 4 bytes per branch.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/soft_bts_run.h"
#include "kernel/drivers/sim/sim_machine.h"
#include "kernel/ds/ds_allocator.h"
#include "kernel/pfm_kernel.h"
#include "kernel/uapi/compact_codec.h"
#include "kernel/uapi/ring_format.h"

namespace pfm::bench {
namespace {

constexpr uint64_t kRingBytes = 64ull << 20;

struct FieldCost {
  uint64_t records = 0, branches = 0;
  uint64_t lead = 0, time = 0, ids = 0, misc_flags = 0, from = 0, to = 0;
  uint64_t other_payload = 0, escapes = 0, pad = 0, total = 0;
  uint64_t short_form = 0, time_predicted = 0, to_predicted = 0;
  boost::json::object ToJson() const {
    auto per = [this](uint64_t v) { return branches ? double(v) / branches : 0.0; };
    return boost::json::object{
        {"records", records},       {"branches", branches},
        {"lead_per_branch", per(lead)},
        {"time_delta_per_branch", per(time)},
        {"cpu_pid_tid_per_branch", per(ids)},
        {"misc_flags_per_branch", per(misc_flags)},
        {"from_delta_per_branch", per(from)},
        {"to_delta_per_branch", per(to)},
        {"other_records_per_branch", per(other_payload)},
        {"chunk_padding_per_branch", per(pad)},
        {"escapes", escapes},
        {"short_form_fraction", per(short_form)},
        {"time_predicted_fraction", per(time_predicted)},
        {"to_predicted_fraction", per(to_predicted)},
        {"total_per_branch", per(total)}};
  }
};

// Re-encodes `recs` chunk by chunk as the ring writer does (the writer's
// own placement, PlaceCompactRecord) and attributes each branch's bytes to
// its fields.
FieldCost Attribute(const std::vector<pfm_record>& recs) {
  namespace lead = compact_lead;
  auto zz = [](uint64_t delta) { return VarintBytes(ZigZag(delta)); };
  FieldCost f;
  CodecState st;
  uint8_t buf[kMaxCompactUnitBytes];  // PlaceCompactRecord's bound
  uint64_t head = 0;
  for (const pfm_record& r : recs) {
    const CodecState prev = st;
    uint64_t start = 0;
    const size_t n = PlaceCompactRecord(head, r, &st, buf, &start);
    // PAD to the end of a chunk the record did not fit.
    f.pad += start - head;
    f.total += start - head;
    head = start + n;
    // The state the record was encoded against: reset at a chunk start.
    const CodecState before =
        start % PFM_RING_CHUNK == 0 ? CodecState() : prev;
    f.total += n;
    ++f.records;
    if (r.type != PFM_REC_BRANCH) {
      f.other_payload += n;
      continue;
    }
    ++f.branches;
    if ((buf[0] & lead::kTypeMask) == lead::kEscape) {
      ++f.escapes;
      f.other_payload += n;
      continue;
    }
    f.lead += 1;
    if ((buf[0] & lead::kTypeMask) == lead::kShortBranch) {
      // The short form: lead bits say which of time and `to` were
      // predicted; cpu/pid/tid/misc/flags cost nothing.
      ++f.short_form;
      const uint64_t delta = r.time - before.time;
      if (buf[0] & (lead::kTimeSameBit | lead::kTimeAdjBit)) {
        ++f.time_predicted;
      } else {
        f.time += zz(delta - before.time_delta);
      }
      f.from += zz(r.u.branch.from - before.branch_to);
      if (buf[0] & lead::kToCachedBit) {
        ++f.to_predicted;
      } else {
        f.to += zz(r.u.branch.to - r.u.branch.from);
      }
      continue;
    }
    f.time += zz(r.time - before.time);
    if (r.cpu != before.cpu) f.ids += VarintBytes(r.cpu);
    if (r.pid != before.pid) f.ids += VarintBytes(r.pid);
    if (r.tid != before.tid) f.ids += VarintBytes(r.tid);
    if (r.misc != before.branch_misc || r.u.branch.flags != before.branch_flags)
      f.misc_flags += VarintBytes(r.misc) + VarintBytes(r.u.branch.flags);
    f.from += zz(r.u.branch.from - before.branch_to);
    f.to += zz(r.u.branch.to - r.u.branch.from);
  }
  return f;
}

ConsumerParams Lossless(int32_t pid, pfm_format format, pfm_filter filter) {
  ConsumerParams p;
  p.req.ctx_kind = PFM_CTX_TASK;
  p.req.pid = pid;
  p.req.bts = PFM_BTS_LOSSLESS;
  p.req.filter = filter;
  p.req.format = format;
  p.req.ring_bytes = kRingBytes;
  p.session = 1;
  return p;
}

struct Pair {
  ConsumerId fixed = 0, compact = 0;
};

int AttachPair(DsAllocator& ds, int32_t pid, pfm_filter filter, Pair* out) {
  ErrorDetail d;
  int f = ds.Attach(Lossless(pid, PFM_FORMAT_FIXED, filter), 0, &d);
  int c = f > 0 ? ds.Attach(Lossless(pid, PFM_FORMAT_COMPACT, filter), 0, &d) : f;
  if (c <= 0) {
    std::fprintf(stderr, "compact: attach: %s\n", d.message);
    return c;
  }
  out->fixed = f;
  out->compact = c;
  return 0;
}

uint64_t Head(DsAllocator& ds, ConsumerId id) {
  // Bytes written so far (header.head): the rings are lossless, large enough
  // for the whole run and never read, so everything written is still used.
  Ring* r = ds.ring(id);
  return r->config().data_bytes - r->FreeBytes();
}

// One pair's measurement: bytes per branch of each ring and the breakdown.
boost::json::object Report(DsAllocator& ds, const Pair& p, const char* what,
                           double* compact_per_branch) {
  ConsumerStats fs, cs;
  ds.Stats(p.fixed, &fs);
  ds.Stats(p.compact, &cs);
  std::vector<pfm_record> recs;
  ds.ring(p.fixed)->Snapshot(&recs);
  uint64_t branches = 0;
  for (const pfm_record& r : recs) branches += r.type == PFM_REC_BRANCH;
  const uint64_t fixed_bytes = Head(ds, p.fixed);
  const uint64_t compact_bytes = Head(ds, p.compact);
  const double per = branches ? double(compact_bytes) / branches : 0;
  *compact_per_branch = per;
  std::fprintf(stderr, "%-28s branches %8llu  fixed %.2f B/branch  compact %.2f B/branch\n",
               what, static_cast<unsigned long long>(branches),
               branches ? double(fixed_bytes) / branches : 0.0, per);
  return boost::json::object{
      {"workload", what},
      {"branches", branches},
      {"records", fs.records},
      {"lost", fs.lost + cs.lost},
      {"fixed_bytes", fixed_bytes},
      {"compact_bytes", compact_bytes},
      {"fixed_bytes_per_branch", branches ? double(fixed_bytes) / branches : 0.0},
      {"compact_bytes_per_branch", per},
      {"compact_vs_fixed", fixed_bytes ? double(compact_bytes) / fixed_bytes : 0.0},
      {"compact_breakdown", Attribute(recs).ToJson()}};
}

int RunSim(uint64_t virtual_ns, pfm_filter filter, boost::json::array* rows,
           double* per) {
  MachineInfo m;
  m.cpus = 2;
  m.pmu = "skl";
  m.gp_counters = 8;
  m.fixed_counters = 3;
  m.pebs_counter_mask = 0xf;
  m.debug_registers = 4;
  m.bts = m.pebs = true;
  Kernel k(m, KernelOptions{});
  KernelLockGuard held(&k.lock());  // the sim calls the core's hooks
  SimConfig cfg;
  cfg.machine = m;
  cfg.tasks = 4;
  std::unique_ptr<SimMachine> sim;
  ErrorDetail d;
  if (SimMachine::Create(cfg, &k, &sim, &d) != 0) {
    std::fprintf(stderr, "compact: sim: %s\n", d.message);
    return 1;
  }
  Pair p;
  if (AttachPair(k.ds_for_benchmarks(), kFirstSimPid, filter, &p) != 0) return 1;
  sim->Run(virtual_ns);
  sim->ExitTask(kFirstSimPid, 0);
  rows->push_back(Report(k.ds_for_benchmarks(), p,
                         filter == PFM_FILTER_USER ? "sim, user branches"
                                                   : "sim, user+kernel branches",
                         per));
  return 0;
}

int RunSoftBts(const std::vector<std::string>& argv, boost::json::array* rows,
               double* per) {
  DsAllocator ds(static_cast<int>(sysconf(_SC_NPROCESSORS_CONF)), DsLimits{});
  Pair p;
  SoftBtsRunResult res;
  int rc = TraceProgram(
      argv, &ds,
      [&](pid_t pid) { return AttachPair(ds, pid, PFM_FILTER_USER, &p); }, &res);
  if (rc != 0) return 1;
  boost::json::object row = Report(ds, p, ("soft-BTS " + argv[0]).c_str(), per);
  row["tracer_steps"] = res.stats.steps;
  row["tracer_branches"] = res.stats.branches;
  row["exit_status"] = res.exit_status;
  rows->push_back(row);
  return 0;
}

}  // namespace
}  // namespace pfm::bench

int main(int argc, char** argv) {
  using namespace pfm;
  using namespace pfm::bench;
  const Options opt = ParseOptions(
      argc, argv, "bytes per branch, compact vs fixed (sim and soft-BTS of /bin/true)");
  boost::json::object doc = Envelope("compact", opt);
  boost::json::array rows;
  const uint64_t virtual_ns = opt.quick ? 100'000'000 : 1'000'000'000;
  double sim_user = 0, sim_all = 0, soft = 0;
  if (RunSim(virtual_ns, PFM_FILTER_USER, &rows, &sim_user) != 0) return 1;
  if (RunSim(virtual_ns, PFM_FILTER_ALL, &rows, &sim_all) != 0) return 1;
  if (RunSoftBts({"/bin/true"}, &rows, &soft) != 0) return 1;
  doc["sim_virtual_ns"] = virtual_ns;
  doc["results"] = rows;
  doc["target"] = boost::json::object{
      {"what", "compact <= 4 bytes per branch"},
      {"sim_user_met", sim_user <= 4},
      {"sim_all_met", sim_all <= 4},
      {"soft_bts_met", soft <= 4},
      {"met", sim_user <= 4 && sim_all <= 4 && soft <= 4}};
  PrintJson(doc);
  return 0;
}
