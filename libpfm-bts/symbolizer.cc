#include "pfm/symbolizer.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernel/uapi/pfm_uapi.h"
#include "pfm/unique_fd.h"

namespace pfm {
namespace {

const Dwfl_Callbacks* Callbacks() {
  static char* debuginfo_path = nullptr;  // libdwfl's default search path
  static const Dwfl_Callbacks* callbacks = [] {
    auto* c = new Dwfl_Callbacks;
    std::memset(c, 0, sizeof(*c));
    c->find_elf = dwfl_build_id_find_elf;
    c->find_debuginfo = dwfl_standard_find_debuginfo;
    c->section_address = dwfl_offline_section_address;
    c->debuginfo_path = &debuginfo_path;
    return c;
  }();
  return callbacks;
}

// The load bias of `path` mapped as `m`: runtime address = bias + ELF vaddr.
// The mapping puts file offset m.offset at m.start; the PT_LOAD segment that
// holds that offset gives its vaddr (vaddr - p_vaddr == offset - p_offset).
// nullopt if the file cannot be read as ELF or no segment holds the offset.
std::optional<uint64_t> LoadBias(const Mapping& m) {
  UniqueFd fd(::open(m.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  if (elf_version(EV_CURRENT) == EV_NONE) return std::nullopt;
  Elf* elf = elf_begin(fd.get(), ELF_C_READ_MMAP, nullptr);
  if (elf == nullptr) return std::nullopt;
  std::optional<uint64_t> bias;
  size_t phnum = 0;
  if (elf_kind(elf) == ELF_K_ELF && elf_getphdrnum(elf, &phnum) == 0) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    for (size_t i = 0; i < phnum && !bias; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr ||
          ph.p_type != PT_LOAD)
        continue;
      const uint64_t seg_start = ph.p_offset & ~(page - 1);
      if (m.offset >= seg_start && m.offset < ph.p_offset + ph.p_filesz)
        bias = m.start - m.offset + ph.p_offset - ph.p_vaddr;  // mod 2^64
    }
  }
  elf_end(elf);
  return bias;
}

std::string Demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return name;
  std::string out(d);
  std::free(d);
  return out;
}

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

absl::StatusOr<std::vector<Mapping>> ReadProcMaps(pid_t pid) {
  const std::string path =
      pid == 0 ? "/proc/self/maps" : absl::StrCat("/proc/", pid, "/maps");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    const int e = errno;
    const std::string why = absl::StrCat("cannot read ", path, ": ", strerror(e));
    if (e == ENOENT || e == ESRCH) return absl::NotFoundError(why);
    if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(why);
    return absl::InternalError(why);
  }
  std::string text;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      // A process that exits while we read leaves ESRCH behind.
      const std::string why = absl::StrCat("reading ", path, ": ", strerror(e));
      return e == ESRCH ? absl::NotFoundError(why) : absl::InternalError(why);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  std::vector<Mapping> maps;
  ErrorDetail d;
  if (ParseProcMaps(text, MalformedLine::kRefuse, &maps, &d) != 0)
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", d.message));
  KeepFileBacked(&maps);
  return maps;
}

void Symbolizer::DwflDeleter::operator()(Dwfl* d) const { dwfl_end(d); }

Symbolizer::Symbolizer(std::vector<Mapping> maps)
    : maps_(std::move(maps)), dwfl_(dwfl_begin(Callbacks())) {
  maps_.erase(std::remove_if(maps_.begin(), maps_.end(),
                             [](const Mapping& m) { return m.path.empty() || m.end <= m.start; }),
              maps_.end());
  std::sort(maps_.begin(), maps_.end(),
            [](const Mapping& a, const Mapping& b) { return a.start < b.start; });
}

Symbolizer::~Symbolizer() = default;

const Mapping* Symbolizer::Find(uint64_t addr) const {
  auto it = std::upper_bound(maps_.begin(), maps_.end(), addr,
                             [](uint64_t a, const Mapping& m) { return a < m.start; });
  if (it == maps_.begin()) return nullptr;
  --it;
  return addr < it->end ? &*it : nullptr;
}

Dwfl_Module* Symbolizer::ModuleFor(const Mapping& m) {
  auto [it, inserted] = modules_.emplace(m.path, nullptr);
  if (!inserted || dwfl_ == nullptr) return it->second;
  const std::optional<uint64_t> bias = LoadBias(m);
  if (!bias) return nullptr;
  dwfl_report_begin_add(dwfl_.get());
  // add_p_vaddr=true: the module is placed at bias + its own vaddrs, which
  // is right for ET_EXEC (bias 0) and ET_DYN alike.
  it->second = dwfl_report_elf(dwfl_.get(), m.path.c_str(), m.path.c_str(), -1,
                               *bias, /*add_p_vaddr=*/true);
  dwfl_report_end(dwfl_.get(), nullptr, nullptr);
  return it->second;
}

std::string Symbolizer::Symbolize(uint64_t addr) {
  if (PFM_ADDR_IS_KERNEL(addr)) return "[kernel]";
  const Mapping* m = Find(addr);
  if (m == nullptr) return "";
  if (Dwfl_Module* mod = ModuleFor(*m)) {
    GElf_Off off = 0;
    GElf_Sym sym;
    const char* name =
        dwfl_module_addrinfo(mod, addr, &off, &sym, nullptr, nullptr, nullptr);
    if (name != nullptr && *name != '\0') {
      std::string out = Demangle(name);
      if (off != 0) absl::StrAppendFormat(&out, "+0x%x", off);
      return out;
    }
  }
  return absl::StrFormat("[%s+0x%x]", m->path, addr - m->start + m->offset);
}

std::string Symbolizer::ModuleOf(uint64_t addr) const {
  if (PFM_ADDR_IS_KERNEL(addr)) return "[kernel]";
  const Mapping* m = Find(addr);
  return m == nullptr ? "" : Basename(m->path);
}

}  // namespace pfm
