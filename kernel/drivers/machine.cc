#include "kernel/drivers/machine.h"

#include <perfmon/pfmlib.h>

#include <cerrno>
#include <cstring>
#include <mutex>

namespace pfm {
namespace {

int InitLibpfm() {
  static int result = [] { return pfm_initialize(); }();
  return result;
}

bool IsIntelCore(const pfm_pmu_info_t& info) {
  return info.type == PFM_PMU_TYPE_CORE &&
         std::strncmp(info.desc, "Intel", 5) == 0;
}

}  // namespace

std::vector<pfm_pmu_info_t> LibpfmPmus() {
  std::vector<pfm_pmu_info_t> out;
  for (int p = PFM_PMU_NONE; p < PFM_PMU_MAX; ++p) {
    pfm_pmu_info_t info;
    std::memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (pfm_get_pmu_info(static_cast<pfm_pmu_t>(p), &info) == PFM_SUCCESS)
      out.push_back(info);
  }
  return out;
}

std::vector<std::string> LibpfmCorePmuNames() {
  std::vector<std::string> names;
  if (InitLibpfm() != PFM_SUCCESS) return names;
  for (const pfm_pmu_info_t& info : LibpfmPmus())
    if (info.type == PFM_PMU_TYPE_CORE) names.push_back(info.name);
  return names;
}

int DescribeSimMachine(const std::string& pmu_name, int cpus,
                       MachineInfo* out, ErrorDetail* detail) {
  if (cpus < 1 || cpus > kMaxSimCpus)
    return SetError(detail, -EINVAL, "--sim-cpus %d: must be 1..%d", cpus,
                    kMaxSimCpus);
  if (InitLibpfm() != PFM_SUCCESS)
    return SetError(detail, -EOPNOTSUPP, "libpfm4 failed to initialise: %s",
                    pfm_strerror(InitLibpfm()));
  for (const pfm_pmu_info_t& info : LibpfmPmus()) {
    if (pmu_name != info.name) continue;
    if (info.type != PFM_PMU_TYPE_CORE)
      return SetError(detail, -EINVAL,
                      "--sim-pmu %s: libpfm4 PMU '%s' is not a core PMU",
                      pmu_name.c_str(), info.desc);
    MachineInfo m;
    m.cpus = cpus;
    m.pmu = info.name;
    m.pmu_desc = info.desc;
    m.gp_counters = info.num_cntrs;
    m.fixed_counters = info.num_fixed_cntrs;
    // The Debug Store (BTS, PEBS) and LBR are Intel core features (Intel SDM
    // Vol. 3B, "Debug Store"); AMD parts have IBS instead. We model PEBS on
    // every general-purpose counter, as on Skylake and later.
    const bool intel = IsIntelCore(info);
    m.bts = intel;
    m.pebs = intel;
    m.lbr = intel;
    m.pt = intel;
    m.pebs_counter_mask =
        intel ? static_cast<uint32_t>((1ull << info.num_cntrs) - 1) : 0;
    m.debug_registers = kX86DebugRegisters;
    m.software_events = false;
    m.soft_bts = false;
    m.source = "libpfm4 table for '" + pmu_name + "' (simulated)";
    *out = m;
    return 0;
  }
  return SetError(detail, -EINVAL,
                  "--sim-pmu %s: libpfm4 knows no such PMU (try skl, icl, "
                  "spr, amd64_fam19h_zen3)",
                  pmu_name.c_str());
}

}  // namespace pfm
