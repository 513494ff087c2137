#include "kernel/drivers/perf/perf_events.h"

#include <dirent.h>
#include <linux/hw_breakpoint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "kernel/drivers/perf/perf_event_names.h"

namespace pfm {
namespace {

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

int Paranoid() {
  const std::string s = FirstLine("/proc/sys/kernel/perf_event_paranoid");
  return s.empty() ? -100 : std::atoi(s.c_str());
}

int NoCpuPmu(const PerfCaps& caps, const char* what, ErrorDetail* d) {
  return SetError(d, -EOPNOTSUPP,
                  "%s not supported on this machine (no 'cpu' PMU in %s)", what,
                  caps.devices_dir.c_str());
}

bool PowerOfTwo(uint32_t n) { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace

int ProbePerfCaps(const std::string& devices_dir, PerfCaps* out,
                  ErrorDetail* d) {
  if (out == nullptr) return SetError(d, -EINVAL, "ProbePerfCaps needs an output");
  if (!IsDir(devices_dir))
    return SetError(d, -ENOENT, "%s does not exist: no perf_events on this kernel",
                    devices_dir.c_str());
  PerfCaps c;
  c.devices_dir = devices_dir;
  const std::string base = devices_dir + "/";
  if (IsDir(base + "cpu")) {
    c.cpu_pmu = true;
    c.cpu_pmu_name = "cpu";
  } else if (IsDir(base + "cpu_core")) {
    c.cpu_pmu = true;
    c.cpu_pmu_name = "cpu_core";
  }
  if (c.cpu_pmu) {
    const std::string mp = FirstLine(base + c.cpu_pmu_name + "/caps/max_precise");
    c.max_precise = mp.empty() ? 0 : std::atoi(mp.c_str());
  }
  c.intel_bts = IsDir(base + "intel_bts");
  c.software = IsDir(base + "software");
  c.breakpoint = IsDir(base + "breakpoint");
  *out = c;
  return 0;
}

PerfEvent& PerfEvent::operator=(PerfEvent&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = o.fd_;
    more_ = std::move(o.more_);
    o.fd_ = -1;
    o.more_.clear();
  }
  return *this;
}

void PerfEvent::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  for (int fd : more_) ::close(fd);
  more_.clear();
}

namespace {

int ReadOne(int fd, PerfCount* out, ErrorDetail* d) {
  uint64_t v[3];
  ssize_t n;
  do {
    n = ::read(fd, v, sizeof(v));
  } while (n < 0 && errno == EINTR);
  if (n < 0) return SetError(d, -errno, "reading perf event failed: %s", strerror(errno));
  if (n != static_cast<ssize_t>(sizeof(v)))
    return SetError(d, -EIO, "perf event read returned %zd bytes, expected 24", n);
  out->value = v[0];
  out->time_enabled = v[1];
  out->time_running = v[2];
  return 0;
}

}  // namespace

int PerfEvent::Read(PerfCount* out, ErrorDetail* d) const {
  if (fd_ < 0) return SetError(d, -EBADF, "perf event is not open");
  PerfCount sum;
  if (int err = ReadOne(fd_, &sum, d); err < 0) return err;
  for (int fd : more_) {
    PerfCount c;
    if (int err = ReadOne(fd, &c, d); err < 0) return err;
    sum.value += c.value;
    sum.time_enabled += c.time_enabled;
    sum.time_running += c.time_running;
  }
  *out = sum;
  return 0;
}

int PerfEvent::Ioctl(unsigned long request, const char* what, ErrorDetail* d) {
  if (fd_ < 0) return SetError(d, -EBADF, "%s perf event failed", what);
  if (ioctl(fd_, request, 0) != 0) return SetError(d, -errno, "%s perf event failed", what);
  for (int fd : more_)
    if (ioctl(fd, request, 0) != 0) return SetError(d, -errno, "%s perf event failed", what);
  return 0;
}

int PerfEvent::Enable(ErrorDetail* d) { return Ioctl(PERF_EVENT_IOC_ENABLE, "enabling", d); }

int PerfEvent::Disable(ErrorDetail* d) { return Ioctl(PERF_EVENT_IOC_DISABLE, "disabling", d); }

namespace {

// One perf_event_open; the fd, or the kernel's refusal in words.
int OpenOne(const perf_event_attr& attr, pid_t pid, int cpu, const char* what,
            int* fd_out, ErrorDetail* d) {
  const long fd = syscall(SYS_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd >= 0) {
    *fd_out = static_cast<int>(fd);
    return 0;
  }
  const int e = errno;
  switch (e) {
    case ENOSPC:
      return SetError(d, -ENOSPC,
                      "%s: the kernel has no free slot for it (ENOSPC; "
                      "breakpoints: x86 has 4 debug registers per task)",
                      what);
    case EACCES:
    case EPERM:
      return SetError(d, -e,
                      "%s: not permitted (perf_event_paranoid=%d; needs "
                      "CAP_PERFMON, root, or a lower paranoid level)",
                      what, Paranoid());
    case ESRCH:
      return SetError(d, -ESRCH, "%s: no such task %d", what, pid);
    default:
      return SetError(d, -e, "%s: perf_event_open failed: %s", what, strerror(e));
  }
}

// The thread ids of `pid` (/proc/PID/task), the process's own first.
std::vector<pid_t> ThreadsOf(pid_t pid) {
  std::vector<pid_t> tids;
  DIR* dir = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (dir == nullptr) return tids;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long tid = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && tid > 0) tids.push_back(static_cast<pid_t>(tid));
  }
  ::closedir(dir);
  std::sort(tids.begin(), tids.end(), [pid](pid_t a, pid_t b) {
    return (a == pid) != (b == pid) ? a == pid : a < b;
  });
  return tids;
}

}  // namespace

size_t ProcessThreadCount(pid_t pid) { return ThreadsOf(pid).size(); }

int OpenPerfEvent(const perf_event_attr& in, PerfTarget t, const char* what,
                  PerfEvent* out, ErrorDetail* d) {
  if (out == nullptr) return SetError(d, -EINVAL, "%s: no output event", what);
  if (t.pid < 0 && t.cpu < 0)
    return SetError(d, -EINVAL, "%s: target needs a pid or a cpu", what);
  if (t.pid < -1 || t.cpu < -1)
    return SetError(d, -EINVAL, "%s: bad target pid %d cpu %d", what, t.pid, t.cpu);
  if (t.process && (t.pid <= 0 || t.cpu != -1))
    return SetError(d, -EINVAL, "%s: a process target needs a pid and no cpu", what);
  perf_event_attr attr = in;
  attr.size = sizeof(attr);
  attr.read_format |=
      PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  if (!t.process) {
    int fd = -1;
    if (int err = OpenOne(attr, t.pid, t.cpu, what, &fd, d); err < 0) return err;
    out->Close();
    out->fd_ = fd;
    return 0;
  }
  attr.inherit = 1;
  attr.inherit_thread = t.children ? 0 : 1;
  PerfEvent opened;
  for (pid_t tid : ThreadsOf(t.pid)) {
    if (t.before_thread_open) t.before_thread_open(tid);
    int fd = -1;
    const int err = OpenOne(attr, tid, -1, what, &fd, d);
    if (err == -ESRCH) continue;  // the thread exited meanwhile
    // A thread's id is free for reuse as soon as it exits (no reaping), so
    // the tid named that thread when it was opened only if it is still one
    // of the process's now; else the event may be on another task (closed),
    // and a refusal was another task's (not this request's).
    struct stat st;
    if (::stat(("/proc/" + std::to_string(t.pid) + "/task/" + std::to_string(tid)).c_str(),
               &st) != 0) {
      if (fd >= 0) ::close(fd);
      continue;
    }
    if (err < 0) return err;  // `opened` closes what it holds
    if (opened.fd_ < 0) {
      opened.fd_ = fd;
    } else {
      opened.more_.push_back(fd);
    }
  }
  if (opened.fd_ < 0) return SetError(d, -ESRCH, "%s: no such process %d", what, t.pid);
  *out = std::move(opened);
  return 0;
}

int SoftwareEventByName(const std::string& name, uint64_t* config) {
  const PerfGenericEvent* e = FindPerfGenericEvent(name.c_str());
  if (e == nullptr || e->type != PERF_TYPE_SOFTWARE) return -ENOENT;
  *config = e->config;
  return 0;
}

int OpenSoftwareCounter(PerfTarget target, uint64_t config, PerfEvent* out,
                        ErrorDetail* d, bool user_only) {
  if (config >= PERF_COUNT_SW_MAX)
    return SetError(d, -EINVAL, "unknown software event %llu",
                    (unsigned long long)config);
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = config;
  attr.exclude_kernel = user_only;
  attr.exclude_hv = user_only;
  return OpenPerfEvent(attr, target, "software counter", out, d);
}

int OpenHardwareCounter(const PerfCaps& caps, PerfTarget target, uint32_t type,
                        uint64_t config, PerfEvent* out, ErrorDetail* d,
                        bool user_only) {
  if (type != PERF_TYPE_HARDWARE && type != PERF_TYPE_RAW)
    return SetError(d, -EINVAL, "hardware counter type must be HARDWARE or RAW");
  if (!caps.cpu_pmu) return NoCpuPmu(caps, "hardware counters", d);
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.type = type;
  attr.config = config;
  attr.exclude_kernel = user_only;
  attr.exclude_hv = user_only;
  return OpenPerfEvent(attr, target, "hardware counter", out, d);
}

namespace {

// The attr of a PERF_TYPE_BREAKPOINT event, validated (see OpenBreakpoint).
int BreakpointAttr(const PerfCaps& caps, uint64_t addr, uint32_t len,
                   uint32_t bp_type, perf_event_attr* attr, ErrorDetail* d) {
  if (!caps.breakpoint)
    return SetError(d, -EOPNOTSUPP,
                    "hardware breakpoints not supported on this machine (no "
                    "'breakpoint' PMU in %s)",
                    caps.devices_dir.c_str());
  const uint32_t kinds = HW_BREAKPOINT_R | HW_BREAKPOINT_W | HW_BREAKPOINT_X;
  if (bp_type == 0 || (bp_type & ~kinds) != 0 ||
      ((bp_type & HW_BREAKPOINT_X) && bp_type != HW_BREAKPOINT_X))
    return SetError(d, -EINVAL, "breakpoint type must be r, w, rw or x");
  if (bp_type == HW_BREAKPOINT_R)
    return SetError(d, -EINVAL,
                    "x86 debug registers cannot watch reads only; use rw");
  if (bp_type == HW_BREAKPOINT_X ? len != sizeof(long)
                                 : (len != 1 && len != 2 && len != 4 && len != 8))
    return SetError(d, -EINVAL, "breakpoint length %u is not valid for its type",
                    len);
  // A data breakpoint's address is aligned to its length; an execute one is
  // any instruction's (its bp_len of sizeof(long) is perf's ABI, while DR7
  // holds length 1 for it: arch/x86/kernel/hw_breakpoint.c).
  if (bp_type != HW_BREAKPOINT_X && addr % len != 0)
    return SetError(d, -EINVAL, "breakpoint address 0x%llx is not %u-aligned",
                    (unsigned long long)addr, len);
  std::memset(attr, 0, sizeof(*attr));
  attr->type = PERF_TYPE_BREAKPOINT;
  attr->bp_type = bp_type;
  attr->bp_addr = addr;
  attr->bp_len = len;
  attr->sample_period = 1;
  attr->pinned = 1;
  attr->exclude_kernel = 1;
  attr->exclude_hv = 1;
  return 0;
}

}  // namespace

int OpenBreakpoint(const PerfCaps& caps, PerfTarget target, uint64_t addr,
                   uint32_t len, uint32_t bp_type, PerfEvent* out,
                   ErrorDetail* d) {
  perf_event_attr attr;
  if (const int rc = BreakpointAttr(caps, addr, len, bp_type, &attr, d); rc < 0)
    return rc;
  return OpenPerfEvent(attr, target, "breakpoint", out, d);
}

PerfSampler::~PerfSampler() {
  if (map_ != nullptr) munmap(map_, map_len_);
}

int PerfSampler::Open(const perf_event_attr& attr, PerfTarget target,
                      const char* what, uint32_t data_pages,
                      std::unique_ptr<PerfSampler>* out, ErrorDetail* d) {
  if (out == nullptr) return SetError(d, -EINVAL, "%s: no output", what);
  if (!PowerOfTwo(data_pages) || data_pages > (1u << 16))
    return SetError(d, -EINVAL, "%s: ring must be 2^n data pages (got %u)",
                    what, data_pages);
  std::unique_ptr<PerfSampler> s(new PerfSampler());
  int rc = OpenPerfEvent(attr, target, what, &s->event_, d);
  if (rc < 0) return rc;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  s->map_len_ = page * (1 + size_t{data_pages});
  void* m = mmap(nullptr, s->map_len_, PROT_READ | PROT_WRITE, MAP_SHARED,
                 s->event_.fd(), 0);
  if (m == MAP_FAILED) {
    const int e = errno;
    return SetError(d, -e,
                    "%s: mapping its %zu-byte ring failed: %s%s", what,
                    s->map_len_, strerror(e),
                    e == EPERM ? " (over perf_event_mlock_kb?)" : "");
  }
  s->map_ = m;
  s->sample_type_ = attr.sample_type;
  rc = s->reader_.Init(m, s->map_len_, attr.sample_type, attr.sample_id_all, d);
  if (rc < 0) return rc;
  *out = std::move(s);
  return 0;
}

int PerfSampler::OpenSwitchWatcher(PerfTarget target, uint32_t data_pages,
                                   std::unique_ptr<PerfSampler>* out,
                                   ErrorDetail* d) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_DUMMY;
  attr.context_switch = 1;
  attr.sample_id_all = 1;
  attr.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
  attr.use_clockid = 1;
  attr.clockid = CLOCK_MONOTONIC;
  // A task's switches need no kernel profiling: user-only, as an
  // unprivileged opener must ask at perf_event_paranoid >= 2 (the switch
  // records come all the same). A CPU-wide watcher is privileged anyway.
  if (target.pid >= 0) {
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
  }
  return Open(attr, target, "switch watcher", data_pages, out, d);
}

int PerfSampler::OpenPebs(const PerfCaps& caps, PerfTarget target,
                          uint32_t type, uint64_t config, uint64_t period,
                          int precise_ip, uint32_t data_pages,
                          std::unique_ptr<PerfSampler>* out, ErrorDetail* d) {
  if (!caps.cpu_pmu) return NoCpuPmu(caps, "PEBS", d);
  if (caps.max_precise <= 0)
    return SetError(d, -EOPNOTSUPP,
                    "PEBS not supported on this machine (%s/%s/caps/max_precise "
                    "is 0)",
                    caps.devices_dir.c_str(), caps.cpu_pmu_name.c_str());
  if (precise_ip < 1 || precise_ip > 3 || period == 0)
    return SetError(d, -EINVAL, "PEBS needs precise_ip 1..3 and a period > 0");
  if (precise_ip > caps.max_precise)
    return SetError(d, -EOPNOTSUPP,
                    "precise_ip %d not supported on this machine (max_precise %d)",
                    precise_ip, caps.max_precise);
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.type = type;
  attr.config = config;
  attr.sample_period = period;
  attr.precise_ip = static_cast<uint32_t>(precise_ip);
  attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                     PERF_SAMPLE_ADDR | PERF_SAMPLE_CPU | PERF_SAMPLE_WEIGHT |
                     PERF_SAMPLE_DATA_SRC;
  attr.use_clockid = 1;
  attr.clockid = CLOCK_MONOTONIC;
  attr.exclude_hv = 1;
  return Open(attr, target, "PEBS sampler", data_pages, out, d);
}

int PerfSampler::OpenBts(const PerfCaps& caps, PerfTarget target, bool user,
                         bool kernel, uint32_t data_pages,
                         std::unique_ptr<PerfSampler>* out, ErrorDetail* d) {
  if (!caps.cpu_pmu) return NoCpuPmu(caps, "BTS", d);
  if (!caps.intel_bts)
    return SetError(d, -EOPNOTSUPP,
                    "BTS not supported on this machine (no 'intel_bts' PMU in %s)",
                    caps.devices_dir.c_str());
  if (!user && !kernel)
    return SetError(d, -EINVAL, "BTS must trace user, kernel or both");
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.type = PERF_TYPE_HARDWARE;
  attr.config = PERF_COUNT_HW_BRANCH_INSTRUCTIONS;
  attr.sample_period = 1;
  attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                     PERF_SAMPLE_ADDR | PERF_SAMPLE_CPU;
  attr.exclude_user = user ? 0 : 1;
  attr.exclude_kernel = kernel ? 0 : 1;
  attr.exclude_hv = 1;
  attr.use_clockid = 1;
  attr.clockid = CLOCK_MONOTONIC;
  return Open(attr, target, "BTS sampler", data_pages, out, d);
}

int PerfSampler::OpenBreakpointSampler(const PerfCaps& caps, PerfTarget target,
                                       uint64_t addr, uint32_t len,
                                       uint32_t bp_type, uint32_t data_pages,
                                       std::unique_ptr<PerfSampler>* out,
                                       ErrorDetail* d) {
  perf_event_attr attr;
  if (const int rc = BreakpointAttr(caps, addr, len, bp_type, &attr, d); rc < 0)
    return rc;
  attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_ADDR;
  return Open(attr, target, "breakpoint sampler", data_pages, out, d);
}

}  // namespace pfm
