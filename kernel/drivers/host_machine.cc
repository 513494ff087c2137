#include "kernel/drivers/host_machine.h"

#include <perfmon/pfmlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kernel/drivers/machine.h"

namespace pfm {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

int CountCpuList(const std::string& list) {
  int count = 0;
  std::stringstream ss(list);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    char* end = nullptr;
    long lo = std::strtol(part.c_str(), &end, 10);
    long hi = lo;
    if (end == part.c_str()) return -EINVAL;
    if (*end == '-') {
      const char* p = end + 1;
      hi = std::strtol(p, &end, 10);
      if (end == p) return -EINVAL;
    }
    if (*end != '\0' || hi < lo || lo < 0) return -EINVAL;
    count += static_cast<int>(hi - lo + 1);
  }
  return count > 0 ? count : -EINVAL;
}

int DescribeHostMachine(MachineInfo* out, ErrorDetail* detail) {
  MachineInfo m;
  const std::string online = ReadFirstLine("/sys/devices/system/cpu/online");
  int cpus = CountCpuList(online);
  if (cpus < 0) cpus = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  if (cpus <= 0)
    return SetError(detail, -ENODEV, "cannot count online CPUs");
  m.cpus = cpus;

  const std::string devices = "/sys/bus/event_source/devices/";
  const bool cpu_pmu = Exists(devices + "cpu") || Exists(devices + "cpu_core");
  m.pmu = "none";
  m.pmu_desc = "no CPU PMU in " + devices + " (a VM without a virtual PMU?)";
  if (cpu_pmu && pfm_initialize() == PFM_SUCCESS) {
    for (const pfm_pmu_info_t& info : LibpfmPmus()) {
      if (!info.is_present || info.type != PFM_PMU_TYPE_CORE) continue;
      m.pmu = info.name;
      m.pmu_desc = info.desc;
      m.gp_counters = info.num_cntrs;
      m.fixed_counters = info.num_fixed_cntrs;
      break;
    }
  }
  // Intel exposes BTS through the cpu PMU (branch-instructions, period 1)
  // and as the intel_bts PMU; PEBS when caps/max_precise > 0.
  m.bts = Exists(devices + "intel_bts");
  const std::string max_precise =
      ReadFirstLine(devices + "cpu/caps/max_precise");
  m.pebs = cpu_pmu && !max_precise.empty() && std::atoi(max_precise.c_str()) > 0;
  m.pt = Exists(devices + "intel_pt");
  m.lbr = cpu_pmu && !ReadFirstLine(devices + "cpu/caps/branches").empty();
  m.software_events = Exists(devices + "software");
#if defined(__x86_64__) || defined(__i386__)
  m.debug_registers = Exists(devices + "breakpoint") ? 4 : 0;
#endif
  m.soft_bts = true;  // ptrace single-step works wherever ptrace does
  m.source = "host: " + devices + ", libpfm4";
  *out = m;
  return 0;
}

}  // namespace pfm
