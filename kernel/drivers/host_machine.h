// The host's machine description, read from the machine: online CPUs from
// sysfs, the core PMU libpfm4 detects, and the capabilities the perf driver
// finds in /sys/bus/event_source/devices (and by probing).
#ifndef PFM_KERNEL_DRIVERS_HOST_MACHINE_H_
#define PFM_KERNEL_DRIVERS_HOST_MACHINE_H_

#include <string>

#include "kernel/drivers/driver.h"
#include "kernel/uapi/pfm_error.h"

namespace pfm {

int DescribeHostMachine(MachineInfo* out, ErrorDetail* detail);

// Counts CPUs in a sysfs cpulist ("0-3,8,10-11"); -EINVAL when malformed.
int CountCpuList(const std::string& list);

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_HOST_MACHINE_H_
