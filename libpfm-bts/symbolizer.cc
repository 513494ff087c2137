#include "pfm/symbolizer.h"

#include <cxxabi.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernel/uapi/pfm_uapi.h"
#include "pfm/unique_fd.h"

namespace pfm {
namespace {

// Whether a path libdwfl's search for a separate debuginfo file would try
// for `file` exists and is not a regular file. The search (the default path
// ":.debug:/usr/lib/debug") opens candidates with a blocking open(): next
// to the file, DIR/LINK, DIR/.debug/LINK and DIR/.dwz/LINK (LINK its
// .gnu_debuglink name, else NAME.debug or NAME), where whoever wrote the
// file (a path from a trace: input) may have put a FIFO that no writer
// opens. The system's /usr/lib/debug is not checked: only root writes it.
bool DebugPathIsNotAFile(const std::string& file, const char* debuglink) {
  const size_t slash = file.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : file.substr(0, slash + 1);
  const std::string name = file.substr(slash == std::string::npos ? 0 : slash + 1);
  std::vector<std::string> links = {name + ".debug", name};
  if (debuglink != nullptr) {
    const std::string link(debuglink);
    const size_t s = link.rfind('/');
    links = {link, link.substr(s == std::string::npos ? 0 : s + 1)};
  }
  for (const char* sub : {"", ".debug/", ".dwz/"}) {
    for (const std::string& link : links) {
      struct stat st {};
      if (::stat(absl::StrCat(dir, sub, link).c_str(), &st) == 0 && !S_ISREG(st.st_mode))
        return true;
    }
  }
  return false;
}

// libdwfl's standard search for a separate debuginfo file, unless a path it
// would open next to the file is a FIFO, a device or a directory
// (DebugPathIsNotAFile): the file then gets no debuginfo (its own symbol
// tables name it), rather than an open() that never returns.
int FindDebuginfo(Dwfl_Module* mod, void** userdata, const char* modname, GElf_Addr base,
                  const char* file_name, const char* debuglink_file, GElf_Word debuglink_crc,
                  char** debuginfo_file_name) {
  if (file_name != nullptr) {
    bool refuse = DebugPathIsNotAFile(file_name, debuglink_file);
    char real[PATH_MAX];
    if (!refuse && ::realpath(file_name, real) != nullptr)
      refuse = DebugPathIsNotAFile(real, debuglink_file);
    if (refuse) {
      errno = 0;  // "nothing found", as the standard search says it
      return -1;
    }
  }
  return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
                                      debuglink_crc, debuginfo_file_name);
}

const Dwfl_Callbacks* Callbacks() {
  static char* debuginfo_path = nullptr;  // libdwfl's default search path
  static const Dwfl_Callbacks* callbacks = [] {
    auto* c = new Dwfl_Callbacks;
    std::memset(c, 0, sizeof(*c));
    c->find_elf = dwfl_build_id_find_elf;
    c->find_debuginfo = FindDebuginfo;
    c->section_address = dwfl_offline_section_address;
    c->debuginfo_path = &debuginfo_path;
    return c;
  }();
  return callbacks;
}

struct DwflDelete {
  void operator()(Dwfl* d) const { dwfl_end(d); }
};

// `path` opened for reading when it is a regular file, else invalid. Paths
// come from trace files (input): a FIFO named there must not be waited on
// (stat first, so that no device or FIFO is opened at all; O_NONBLOCK and
// fstat for one put there in between), nor a terminal become ours
// (O_NOCTTY). O_NONBLOCK changes nothing for a regular file's reads.
UniqueFd OpenRegularFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return UniqueFd();
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return UniqueFd();
  return fd;
}

// A PT_LOAD header: where a segment's bytes are in the file and its vaddr.
struct LoadSegment {
  uint64_t offset = 0, filesz = 0, vaddr = 0;
};

std::vector<LoadSegment> LoadSegments(Elf* elf) {
  std::vector<LoadSegment> out;
  size_t phnum = 0;
  if (elf == nullptr || elf_kind(elf) != ELF_K_ELF || elf_getphdrnum(elf, &phnum) != 0)
    return out;
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_LOAD) continue;
    out.push_back(LoadSegment{ph.p_offset, ph.p_filesz, ph.p_vaddr});
  }
  return out;
}

// The load bias of a file with `segments` mapped as `m`: runtime address =
// bias + ELF vaddr. The mapping puts file offset m.offset at m.start; the
// PT_LOAD segment that holds that offset gives its vaddr (vaddr - p_vaddr ==
// offset - p_offset). nullopt if no segment holds the offset.
std::optional<uint64_t> BiasOf(const std::vector<LoadSegment>& segments, const Mapping& m) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  for (const LoadSegment& s : segments) {
    const uint64_t seg_start = s.offset & ~(page - 1);
    if (m.offset >= seg_start && m.offset < s.offset + s.filesz)
      return m.start - m.offset + s.offset - s.vaddr;  // mod 2^64
  }
  return std::nullopt;
}

// The build-id note's bytes, "" without one (or one over kMaxBuildIdBytes).
std::string BuildIdOf(Elf* elf) {
  const void* id = nullptr;
  const ssize_t n = elf == nullptr ? -1 : dwelf_elf_gnu_build_id(elf, &id);
  if (n <= 0 || static_cast<size_t>(n) > kMaxBuildIdBytes || id == nullptr) return "";
  return std::string(static_cast<const char*>(id), static_cast<size_t>(n));
}

// Reports the ELF file `path`, open as `fd`, to `dwfl` (between
// dwfl_report_begin and _end) at `base` with add_p_vaddr. The fd is opened
// here (OpenRegularFile), not by libdwfl's own blocking open(); once the
// module exists libdwfl owns it (dwfl_end closes it). `fd` must be an ELF
// file (libelf's ELF_K_ELF): libdwfl would close the fd of a compressed
// one itself. Null when libdwfl refuses the file.
Dwfl_Module* ReportElf(Dwfl* dwfl, const std::string& path, UniqueFd fd, uint64_t base) {
  Dwfl_Module* mod = dwfl_report_elf(dwfl, path.c_str(), path.c_str(), fd.get(), base,
                                     /*add_p_vaddr=*/true);
  if (mod != nullptr) fd.release();
  return mod;
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

// An ELF file opened with libelf, closed (and its fd) on destruction.
class ElfFile {
 public:
  explicit ElfFile(const std::string& path) : fd_(OpenRegularFile(path)) {
    if (fd_.valid() && elf_version(EV_CURRENT) != EV_NONE)
      elf_ = elf_begin(fd_.get(), ELF_C_READ_MMAP, nullptr);
    if (elf_ != nullptr && elf_kind(elf_) != ELF_K_ELF) {
      elf_end(elf_);
      elf_ = nullptr;
    }
  }
  ~ElfFile() {
    if (elf_ != nullptr) elf_end(elf_);
  }
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;
  Elf* get() const { return elf_; }
  // The fd, for ReportElf (which needs an ELF file: get() non-null); this
  // object no longer reads through its Elf.
  UniqueFd TakeFd() {
    if (elf_ != nullptr) elf_end(elf_);
    elf_ = nullptr;
    return std::move(fd_);
  }

 private:
  UniqueFd fd_;
  Elf* elf_ = nullptr;
};

// The program's PT_INTERP (its dynamic linker), "" if none or unreadable.
std::string Interpreter(const std::string& exe) {
  ElfFile f(exe);
  size_t phnum = 0;
  if (f.get() == nullptr || elf_getphdrnum(f.get(), &phnum) != 0) return "";
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(f.get(), static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_INTERP)
      continue;
    size_t size = 0;
    const char* raw = elf_rawfile(f.get(), &size);
    if (raw == nullptr || ph.p_offset >= size || ph.p_filesz == 0 ||
        ph.p_filesz > size - ph.p_offset)
      return "";
    return std::string(raw + ph.p_offset, strnlen(raw + ph.p_offset, ph.p_filesz));
  }
  return "";
}

// `path` with symlinks resolved, or as it is when that fails.
std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) != nullptr ? std::string(buf) : path;
}

bool ParseNumber(absl::string_view t, uint64_t* v) {
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) {
    for (char c : t.substr(2))
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
    return absl::SimpleHexAtoi(t.substr(2), v);
  }
  for (char c : t)
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  return !t.empty() && absl::SimpleAtoi(t, v);
}

// Whether symbol `raw` is what the user calls `want`: the name itself, the
// name before a version ("memcpy@GLIBC_2.14"), the demangled name, or the
// demangled name without its parameters ("pfm::Foo" for "pfm::Foo(int)").
bool NameMatches(const char* raw, const std::string& want) {
  const absl::string_view r(raw);
  if (r == want) return true;
  if (const size_t at = r.find('@'); at != absl::string_view::npos && at > 0 &&
                                     r.substr(0, at) == want)
    return true;
  if (!absl::StartsWith(r, "_Z")) return false;
  const std::string d = Demangle(raw);
  if (d == want) return true;
  const size_t paren = d.find('(');
  return paren != std::string::npos && d.compare(0, paren, want) == 0 &&
         paren == want.size();
}

// A source file name from a line table against the user's: the same, or
// ending in "/" + the user's ("prog.c", "testdata/prog.c").
bool FileMatches(absl::string_view src, absl::string_view want) {
  if (src == want) return true;
  return want.front() != '/' && src.size() > want.size() &&
         absl::EndsWith(src, want) && src[src.size() - want.size() - 1] == '/';
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

// The start of every function a file's unwind table covers: the sorted
// initial locations of .eh_frame_hdr's search table (facts from the Linux
// Standard Base's description of .eh_frame_hdr: version 1, three encoding
// bytes, the encoded .eh_frame pointer and FDE count, then the table of
// (initial location, FDE address) pairs; GNU ld writes the table
// DW_EH_PE_datarel | DW_EH_PE_sdata4, relative to the section's start, the
// only table encoding read here). Which FDE covers an address, and so
// whether one does, is libdw's CFI lookup (dwarf_cfi_addrframe); its
// function's start is then the greatest start at or below the address.
class FdeStarts {
 public:
  // `bias`: what libdwfl adds to the file's addresses (the index's).
  FdeStarts(Elf* elf, uint64_t bias) {
    size_t shstrndx = 0;
    if (elf == nullptr || elf_getshdrstrndx(elf, &shstrndx) != 0) return;
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(elf, scn)) != nullptr) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr) continue;
      const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
      if (name == nullptr || std::strcmp(name, ".eh_frame_hdr") != 0) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr || data->d_buf == nullptr) return;
      Read(static_cast<const uint8_t*>(data->d_buf), data->d_size, bias + sh.sh_addr,
           gelf_getclass(elf) == ELFCLASS32 ? 4 : 8);
      return;
    }
  }

  // The greatest start at or below `addr` (a module address); false if none.
  bool StartOf(uint64_t addr, uint64_t* start) const {
    auto it = std::upper_bound(starts_.begin(), starts_.end(), addr);
    if (it == starts_.begin()) return false;
    *start = *(it - 1);
    return true;
  }

 private:
  // An encoded value's size for the formats read here (DW_EH_PE_* low
  // nibble): absptr, udata4/sdata4, udata8/sdata8; 0 for anything else.
  static size_t EncodedSize(uint8_t enc, size_t ptr) {
    switch (enc & 0x0f) {
      case 0x00: return ptr;  // absptr: the file's pointer size
      case 0x03: case 0x0b: return 4;
      case 0x04: case 0x0c: return 8;
      default: return 0;
    }
  }

  // (Little-endian: the x86 files this tool reads.)
  void Read(const uint8_t* p, size_t size, uint64_t section_addr, size_t ptr) {
    if (size < 4 || p[0] != 1) return;
    const uint8_t ptr_enc = p[1], count_enc = p[2], table_enc = p[3];
    const size_t ptr_size = EncodedSize(ptr_enc, ptr), count_size = EncodedSize(count_enc, ptr);
    if (ptr_enc == 0xff || count_enc == 0xff || ptr_size == 0 || count_size == 0 ||
        table_enc != 0x3b || 4 + ptr_size + count_size > size)
      return;
    uint64_t count = 0;
    std::memcpy(&count, p + 4 + ptr_size, count_size);  // little-endian
    const size_t table = 4 + ptr_size + count_size;
    // Each entry is two int32s: as many as the section holds, at most.
    count = std::min<uint64_t>(count, (size - table) / 8);
    starts_.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      int32_t loc;
      std::memcpy(&loc, p + table + 8 * i, 4);
      starts_.push_back(section_addr + static_cast<int64_t>(loc));
    }
    // Sorted by the linker; sorted here all the same (the file is input).
    std::sort(starts_.begin(), starts_.end());
  }

  std::vector<uint64_t> starts_;
};

// The x86-64 PLT entries of a file, named as binutils names them (objdump,
// GDB: `puts@plt`, `*ABS*+0x9d8c0@plt` for an IRELATIVE slot) and as perf
// synthesizes them: symbol tables do not cover the PLT, so without this the
// calls every shared library makes through it stay unnamed (6.9% of a
// Python run's branches). Facts from the x86-64 psABI and binutils' PLT
// layouts (elfxx-x86): entries of .plt (16 bytes, the first the resolver's
// header), .plt.sec (16, with IBT) and .plt.got (8, or 16 with IBT) each
// jump through a GOT slot with `jmp *disp32(%rip)` (ff 25, after an endbr64
// and/or a bnd prefix); the slot's relocation (.rela.plt JUMP_SLOT, or
// .rela.dyn GLOB_DAT for .plt.got) names the symbol. An entry is found by
// decoding that jump, so no section's layout or order is assumed; one
// without it (the header, IBT's lazy stubs) is not named.
class PltTable {
 public:
  // `bias`: what libdwfl adds to the file's addresses (the index's).
  PltTable(Elf* elf, uint64_t bias) {
    GElf_Ehdr eh;
    if (elf == nullptr || gelf_getehdr(elf, &eh) == nullptr || eh.e_machine != EM_X86_64) return;
    size_t shstrndx = 0;
    if (elf_getshdrstrndx(elf, &shstrndx) != 0) return;
    std::map<uint64_t, std::string> slots;  // GOT slot -> name
    struct Plt {
      uint64_t addr, size, entsize;
      Elf_Data* data;
    };
    std::vector<Plt> plts;
    // The file is input: relocations and entries looked at, over every
    // section (a hostile one may have many pointing at the same data),
    // are bounded.
    size_t budget = kMaxWork;
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(elf, scn)) != nullptr && budget > 0) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr) continue;
      const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
      if (name == nullptr) continue;
      if (sh.sh_type == SHT_RELA) {
        AddRelocations(elf, scn, sh, &slots, &budget);
        continue;
      }
      const std::string_view n(name);
      if (sh.sh_type != SHT_PROGBITS ||
          (n != ".plt" && n != ".plt.sec" && n != ".plt.got" && n != ".plt.bnd"))
        continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr || data->d_buf == nullptr || data->d_size < sh.sh_size) continue;
      const uint64_t entsize =
          sh.sh_entsize != 0 ? sh.sh_entsize : n == ".plt.got" || n == ".plt.bnd" ? 8 : 16;
      plts.push_back(Plt{sh.sh_addr, sh.sh_size, entsize, data});
    }
    for (const Plt& p : plts) {
      if (p.entsize < 6 || p.entsize > 64) continue;
      const auto* bytes = static_cast<const uint8_t*>(p.data->d_buf);
      for (uint64_t off = 0; off + p.entsize <= p.size && budget > 0; off += p.entsize) {
        --budget;
        // The jump through the GOT: at the entry's start, after a bnd
        // prefix (f2), an endbr64 (f3 0f 1e fa), or both.
        for (uint64_t at : {uint64_t{0}, uint64_t{1}, uint64_t{4}, uint64_t{5}}) {
          const uint8_t* b = bytes + off + at;
          if (at + 6 > p.entsize || b[0] != 0xff || b[1] != 0x25) continue;
          if (at == 1 && bytes[off] != 0xf2) continue;
          if (at >= 4 && std::memcmp(bytes + off, "\xf3\x0f\x1e\xfa", 4) != 0) continue;
          if (at == 5 && bytes[off + 4] != 0xf2) continue;
          int32_t disp;
          std::memcpy(&disp, b + 2, 4);
          const uint64_t slot = p.addr + off + at + 6 + static_cast<int64_t>(disp);
          if (auto it = slots.find(slot); it != slots.end())
            entries_.push_back(
                Entry{bias + p.addr + off, bias + p.addr + off + p.entsize, &it->second});
          break;
        }
      }
    }
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.start < b.start; });
    // Two sections over the same addresses (a hostile file): the first
    // entry at an address stays, so lookups see no overlap.
    entries_.erase(std::unique(entries_.begin(), entries_.end(),
                               [](const Entry& a, const Entry& b) { return b.start < a.end; }),
                   entries_.end());
    // The names the entries use, and no other.
    for (Entry& e : entries_) names_.push_back(*e.name);
    for (size_t i = 0; i < entries_.size(); ++i) entries_[i].name = &names_[i];
  }

  // The entry containing `addr` (a file address), with *off its offset in
  // it; null when none does.
  const std::string* Lookup(uint64_t addr, uint64_t* off) const {
    auto it = std::upper_bound(entries_.begin(), entries_.end(), addr,
                               [](uint64_t a, const Entry& e) { return a < e.start; });
    if (it == entries_.begin()) return nullptr;
    --it;
    if (addr >= it->end) return nullptr;
    *off = addr - it->start;
    return it->name;
  }

 private:
  // Relocations and PLT entries looked at, at most, per file: a real
  // file has thousands (libc: 1,700 relocations).
  static constexpr size_t kMaxWork = size_t{1} << 20;

  struct Entry {
    uint64_t start, end;
    const std::string* name;  // "puts@plt"
  };

  // The GOT slots that relocations of `scn` name: a symbol's (demangled, as
  // every name here), or *ABS*+ADDEND for an IRELATIVE one (no symbol).
  static void AddRelocations(Elf* elf, Elf_Scn* scn, const GElf_Shdr& sh,
                             std::map<uint64_t, std::string>* slots, size_t* budget) {
    Elf_Data* rel = elf_getdata(scn, nullptr);
    if (rel == nullptr || rel->d_type != ELF_T_RELA) return;
    // Counted from the data, whatever sh_entsize says.
    const size_t size = gelf_fsize(elf, ELF_T_RELA, 1, EV_CURRENT);
    if (size == 0) return;
    const size_t n = rel->d_size / size;
    Elf_Scn* symscn = elf_getscn(elf, sh.sh_link);
    GElf_Shdr symsh;
    Elf_Data* syms = nullptr;
    if (symscn != nullptr && gelf_getshdr(symscn, &symsh) != nullptr)
      syms = elf_getdata(symscn, nullptr);
    for (size_t i = 0; i < n && *budget > 0; ++i) {
      --*budget;
      GElf_Rela r;
      if (gelf_getrela(rel, static_cast<int>(i), &r) == nullptr) continue;
      const uint64_t type = GELF_R_TYPE(r.r_info), sym = GELF_R_SYM(r.r_info);
      if (type == R_X86_64_IRELATIVE && sym == 0) {
        slots->emplace(r.r_offset, absl::StrFormat("*ABS*+0x%x@plt", r.r_addend));
        continue;
      }
      if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
      GElf_Sym s;
      if (syms == nullptr || sym == 0 || gelf_getsym(syms, static_cast<int>(sym), &s) == nullptr)
        continue;
      const char* name = elf_strptr(elf, symsh.sh_link, s.st_name);
      if (name == nullptr || *name == '\0') continue;
      slots->emplace(r.r_offset, Demangle(name) + "@plt");
    }
  }

  std::vector<Entry> entries_;     // sorted by start, not overlapping
  std::deque<std::string> names_;  // entries_' names (stable addresses)
};

// libdwfl's symbol for every address of one module, without asking
// libdwfl at every address. dwfl_module_addrinfo reads the whole symbol
// table at each call (a linear search, dwfl_module_addrsym.c): on a trace
// of a large library (a Python recording: some hundred thousand distinct
// branch addresses in libpython) that was nearly all of `report`'s and
// `script`'s time. Its choice depends on the address only through
// comparisons with symbols' starts and ends (which symbols contain it,
// which lie at or below it, an absolute symbol's exact address) and with
// sections' bounds (which section holds it and a sizeless symbol:
// derelocate.c's find_section, whose sections end one byte late), so it
// is the same for every address of a stretch between two consecutive such
// bounds. The index keeps those bounds, sorted, and each stretch's answer:
// where a symbol with a size contains the stretch, libdwfl's rule among
// those symbols, applied here once for all stretches in one sweep (facts
// from elfutils 0.188's dwfl_module_addrsym.c: the global symbols are
// searched first, the locals only if no global contains the address; the
// closest start wins, a better binding (global 3, weak 2, local 1) wins
// over a closer start, at the same start the smaller symbol unless its
// binding is worse, else the first in the table); where none does, no
// name when no sizeless symbol stands at the highest end of the symbols
// at or below the stretch (only such a label can name it: libdwfl's
// min_label); anywhere else (at assembly labels) libdwfl itself, once per
// stretch. symbolizer_test holds the names to libdwfl's at every bound of
// real files and of this test binary. Not modelled: libdwfl's second try of
// a symbol at its unresolved value, which differs from the resolved one
// only for ppc64's function descriptors (never on x86-64).
class SymbolIndex {
 public:
  explicit SymbolIndex(Dwfl_Module* mod) : mod_(mod) {
    bounds_.push_back(0);
    const int n = dwfl_module_getsymtab(mod);
    const int first_global = dwfl_module_getsymtab_first_global(mod);
    // The first symbol of the search's first pass, and whether a second
    // pass over the locals before it exists (as __libdwfl_addrsym decides).
    const int pass1 = first_global == 0 ? 1 : first_global;
    has_locals_pass_ = first_global > 1;
    for (int i = 1; i < n; ++i) {
      GElf_Sym sym;
      GElf_Addr addr = 0;
      GElf_Word shndx = 0;
      const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, nullptr, nullptr);
      if (name == nullptr) continue;
      bounds_.push_back(addr);
      // Sizeless: an absolute one matches its own address only.
      bounds_.push_back(addr + (sym.st_size != 0 ? sym.st_size : 1));
      const int type = GELF_ST_TYPE(sym.st_info);
      if (*name == '\0' || sym.st_shndx == SHN_UNDEF || type == STT_SECTION || type == STT_FILE ||
          type == STT_TLS)
        continue;  // never a candidate
      const bool global = i >= pass1;
      starts_.push_back(Start{addr, addr + sym.st_size, global});
      if (sym.st_size == 0) {
        sizeless_.push_back(addr);
        if (global) sizeless_globals_.push_back(addr);
        continue;
      }
      const int bind = GELF_ST_BIND(sym.st_info);
      syms_.push_back(Sym{addr, sym.st_size, name,
                          bind == STB_GLOBAL ? 3 : bind == STB_WEAK ? 2 : bind == STB_LOCAL ? 1 : 0,
                          i, global});
    }
    GElf_Addr bias = 0;
    if (Elf* elf = dwfl_module_getelf(mod, &bias)) {
      Elf_Scn* scn = nullptr;
      while ((scn = elf_nextscn(elf, scn)) != nullptr) {
        GElf_Shdr shdr;
        if (gelf_getshdr(scn, &shdr) == nullptr) continue;
        // libdwfl takes a section's end as inside it (derelocate.c,
        // find_section) unless the next section starts there.
        const uint64_t start = shdr.sh_addr + bias, end = start + shdr.sh_size;
        bounds_.insert(bounds_.end(), {start, end, end + 1});
      }
    }
    std::sort(bounds_.begin(), bounds_.end());
    bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
    std::sort(sizeless_globals_.begin(), sizeless_globals_.end());
    std::sort(sizeless_.begin(), sizeless_.end());
    std::sort(starts_.begin(), starts_.end(),
              [](const Start& a, const Start& b) { return a.value < b.value; });
    Sweep();
  }

  // dwfl_module_addrinfo's symbol for `addr` (a module address), demangled,
  // with *off its offset in it; null when there is none (or no name).
  const std::string* Lookup(uint64_t addr, uint64_t* off) {
    const size_t i =
        static_cast<size_t>(std::upper_bound(bounds_.begin(), bounds_.end(), addr) -
                            bounds_.begin()) - 1;  // bounds_[0] == 0 <= addr
    const int32_t c = choice_[i];
    if (c == kNone) return nullptr;
    if (c >= 0) {
      Sym& s = syms_[static_cast<size_t>(c)];
      if (!s.demangled) s.demangled = std::make_unique<std::string>(Demangle(s.name));
      *off = addr - s.value;
      return s.demangled.get();
    }
    // No sized symbol decides: libdwfl, once for the stretch.
    auto [it, first] = asked_.try_emplace(i);
    Named& n = it->second;
    if (first) {
      GElf_Off o = 0;
      GElf_Sym sym;
      const char* name = dwfl_module_addrinfo(mod_, addr, &o, &sym, nullptr, nullptr, nullptr);
      n.known = name != nullptr && *name != '\0';
      if (n.known) {
        n.name = Demangle(name);
        n.value = addr - o;
      }
    }
    if (!n.known) return nullptr;
    *off = addr - n.value;
    return &n.name;
  }

 private:
  struct Sym {
    uint64_t value, size;
    const char* name;  // in the module's string table
    int binding;       // higher is better
    int index;         // in the symbol table: the search's order
    bool global;       // in the first pass
    std::unique_ptr<std::string> demangled = nullptr;  // made when first named
  };
  // A candidate's start and end (its start when sizeless), and its pass.
  struct Start {
    uint64_t value, end;
    bool global;
  };
  static constexpr int32_t kAsk = -1;   // choice_: ask libdwfl
  static constexpr int32_t kNone = -2;  // choice_: no name
  struct Named {
    bool known = false;
    std::string name;
    uint64_t value = 0;  // the symbol's address: addr - value is the offset
  };

  // libdwfl's pick among the sized symbols `c` containing an address, in
  // table order (try_sym_value, for symbols that contain it).
  int32_t Pick(const std::vector<int32_t>& c) const {
    int32_t best = kAsk;
    for (int32_t k : c) {
      const Sym& s = syms_[static_cast<size_t>(k)];
      if (best < 0) {
        best = k;
        continue;
      }
      const Sym& b = syms_[static_cast<size_t>(best)];
      if (b.value < s.value || b.binding < s.binding) {
        best = k;
      } else if (b.value == s.value && ((b.size > s.size && b.binding <= s.binding) ||
                                        (b.size >= s.size && b.binding < s.binding))) {
        best = k;
      }
    }
    return best;
  }

  // choice_ for every stretch: the symbols containing its start, kept as
  // the stretches go up (added at their start, dropped at their end).
  void Sweep() {
    std::vector<int32_t> by_start(syms_.size());
    for (size_t k = 0; k < syms_.size(); ++k) by_start[k] = static_cast<int32_t>(k);
    std::sort(by_start.begin(), by_start.end(), [this](int32_t a, int32_t b) {
      return syms_[static_cast<size_t>(a)].value < syms_[static_cast<size_t>(b)].value;
    });
    choice_.assign(bounds_.size(), kAsk);
    std::vector<int32_t> active, globals, locals;
    size_t next = 0, next_start = 0;
    // The highest end (a sizeless symbol's start) of the candidates at or
    // below the stretch: of the globals, and of all.
    uint64_t end_globals = 0, end_all = 0;
    bool any_global = false, any = false;
    const auto sizeless_at = [this](uint64_t v) {
      return std::binary_search(sizeless_.begin(), sizeless_.end(), v);
    };
    for (size_t i = 0; i < bounds_.size(); ++i) {
      const uint64_t a = bounds_[i];
      while (next < by_start.size() && syms_[static_cast<size_t>(by_start[next])].value <= a)
        active.push_back(by_start[next++]);
      for (; next_start < starts_.size() && starts_[next_start].value <= a; ++next_start) {
        const Start& st = starts_[next_start];
        end_all = any ? std::max(end_all, st.end) : st.end;
        any = true;
        if (st.global) {
          end_globals = any_global ? std::max(end_globals, st.end) : st.end;
          any_global = true;
        }
      }
      active.erase(std::remove_if(active.begin(), active.end(),
                                  [&](int32_t k) {
                                    const Sym& s = syms_[static_cast<size_t>(k)];
                                    return a - s.value >= s.size;
                                  }),
                   active.end());
      // Where no sized symbol names it, a sizeless one libdwfl could take
      // stands at the highest end of those it visits (the globals', or
      // all): without one there, there is no name.
      const bool no_label =
          !(any_global && sizeless_at(end_globals)) && !(any && sizeless_at(end_all));
      if (active.empty()) {
        if (no_label) choice_[i] = kNone;
        continue;
      }
      globals.clear();
      locals.clear();
      for (int32_t k : active) (syms_[static_cast<size_t>(k)].global ? globals : locals).push_back(k);
      auto by_index = [this](int32_t x, int32_t y) {
        return syms_[static_cast<size_t>(x)].index < syms_[static_cast<size_t>(y)].index;
      };
      if (!globals.empty()) {
        std::sort(globals.begin(), globals.end(), by_index);
        choice_[i] = Pick(globals);
      } else if (has_locals_pass_ &&
                 !std::binary_search(sizeless_globals_.begin(), sizeless_globals_.end(), a)) {
        // No global contains it: the locals are searched, unless a
        // sizeless global at exactly this address might stop that (left
        // to libdwfl).
        std::sort(locals.begin(), locals.end(), by_index);
        choice_[i] = Pick(locals);
      }
    }
  }

  Dwfl_Module* mod_;
  bool has_locals_pass_ = false;
  std::vector<Sym> syms_;                  // candidates with a size
  std::vector<uint64_t> sizeless_globals_;  // sorted addresses
  std::vector<uint64_t> sizeless_;          // of all sizeless candidates, sorted
  std::vector<Start> starts_;               // every candidate, by start
  std::vector<uint64_t> bounds_;           // sorted, distinct, the first 0
  // Per stretch [bounds_[i], bounds_[i + 1]): the symbol of syms_ that
  // names it, kNone, or kAsk: ask libdwfl (asked_ keeps the answer).
  std::vector<int32_t> choice_;
  std::map<size_t, Named> asked_;
};

struct SymbolFiles::File {
  enum class State { kUnread, kOpen, kUnreadable };
  State state = State::kUnread;
  // kOpen: one module, at the file's own ELF addresses (base 0), in a Dwfl
  // of its own (modules of different files would overlap there).
  std::unique_ptr<Dwfl, DwflDelete> dwfl;
  Dwfl_Module* mod = nullptr;
  std::unique_ptr<SymbolIndex> index;  // of `mod`, made at its first lookup
  std::unique_ptr<PltTable> plt;       // likewise
  // The module's .eh_frame CFI (owned by libdwfl) and function starts,
  // read once.
  bool cfi_read = false;
  Dwarf_CFI* cfi = nullptr;
  Dwarf_Addr cfi_bias = 0;
  std::unique_ptr<FdeStarts> fde_starts;
  std::vector<LoadSegment> segments;
  std::string build_id;  // "" none, or not readable
  std::list<File*>::iterator lru;
};

SymbolFiles::SymbolFiles(size_t max_open) : max_open_(std::max<size_t>(max_open, 1)) {}

SymbolFiles::~SymbolFiles() = default;

SymbolFiles::File& SymbolFiles::Get(const std::string& path) {
  std::unique_ptr<File>& slot = files_[path];
  if (slot == nullptr) slot = std::make_unique<File>();
  File& f = *slot;
  if (f.state == File::State::kOpen) {
    lru_.splice(lru_.begin(), lru_, f.lru);
    return f;
  }
  if (f.state == File::State::kUnreadable) return f;
  f.state = File::State::kUnreadable;
  ElfFile elf(path);
  if (elf.get() == nullptr) return f;
  f.segments = LoadSegments(elf.get());
  f.build_id = BuildIdOf(elf.get());
  f.dwfl.reset(dwfl_begin(Callbacks()));
  if (f.dwfl == nullptr) return f;
  dwfl_report_begin(f.dwfl.get());
  f.mod = ReportElf(f.dwfl.get(), path, elf.TakeFd(), 0);
  dwfl_report_end(f.dwfl.get(), nullptr, nullptr);
  if (f.mod == nullptr) {
    f.dwfl.reset();
    return f;
  }
  if (lru_.size() >= max_open_) {
    // The least recently used file closes (its fd and mapping), to be read
    // again when it is needed.
    File& old = *lru_.back();
    lru_.pop_back();
    old.index.reset();
    old.plt.reset();
    old.cfi_read = false;
    old.cfi = nullptr;
    old.fde_starts.reset();
    old.mod = nullptr;
    old.dwfl.reset();
    old.state = File::State::kUnread;
  }
  lru_.push_front(&f);
  f.lru = lru_.begin();
  f.state = File::State::kOpen;
  return f;
}

Symbolizer::Symbolizer(std::vector<Mapping> maps, std::shared_ptr<SymbolFiles> files)
    : maps_(std::move(maps)),
      files_(files != nullptr ? std::move(files) : std::make_shared<SymbolFiles>()) {
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

std::string Symbolizer::Symbolize(uint64_t addr) {
  if (PFM_ADDR_IS_KERNEL(addr)) return "[kernel]";
  const Mapping* m = Find(addr);
  if (m == nullptr) return "";
  SymbolFiles::File& f = files_->Get(m->path);
  auto [usable, first] = usable_.try_emplace(m->path, true);  // no node made when known
  if (first && !m->build_id.empty() && f.build_id != m->build_id) {
    warnings_.push_back(absl::StrCat(
        m->path, ": build-id ", BuildIdHex(m->build_id), " when recorded, ",
        f.build_id.empty() ? "none" : BuildIdHex(f.build_id),
        " now (the file changed since the recording): its addresses are left unnamed"));
    usable->second = false;
  }
  if (usable->second && f.mod != nullptr) {
    if (const std::optional<uint64_t> bias = BiasOf(f.segments, *m)) {
      if (f.index == nullptr) {
        f.index = std::make_unique<SymbolIndex>(f.mod);
        GElf_Addr ebias = 0;
        Elf* elf = dwfl_module_getelf(f.mod, &ebias);
        f.plt = std::make_unique<PltTable>(elf, ebias);
      }
      uint64_t off = 0;
      // A PLT entry is named so whatever label its symbol table has there.
      const std::string* name = f.plt->Lookup(addr - *bias, &off);
      if (name == nullptr) name = f.index->Lookup(addr - *bias, &off);
      if (name != nullptr) {
        std::string out = *name;
        if (off != 0) absl::StrAppendFormat(&out, "+0x%x", off);
        return out;
      }
    }
  }
  return absl::StrFormat("[%s+0x%x]", m->path, addr - m->start + m->offset);
}

std::string Symbolizer::UnnamedFunction(uint64_t addr) {
  if (PFM_ADDR_IS_KERNEL(addr)) return "";
  const Mapping* m = Find(addr);
  if (m == nullptr) return "";
  // Symbolize's checks: the file read, the build-id the recorded one.
  const std::string name = Symbolize(addr);
  if (name.empty() || name[0] != '[') return "";
  SymbolFiles::File& f = files_->Get(m->path);
  auto usable = usable_.find(m->path);
  if (f.mod == nullptr || (usable != usable_.end() && !usable->second)) return "";
  const std::optional<uint64_t> bias = BiasOf(f.segments, *m);
  if (!bias) return "";
  if (!f.cfi_read) {
    f.cfi_read = true;
    f.cfi = dwfl_module_eh_cfi(f.mod, &f.cfi_bias);
    GElf_Addr ebias = 0;
    Elf* elf = dwfl_module_getelf(f.mod, &ebias);
    f.fde_starts = std::make_unique<FdeStarts>(elf, ebias);
  }
  if (f.cfi == nullptr) return "";
  // Covered by an FDE (libdw's lookup, by the FDEs' own ranges)...
  const uint64_t at = addr - *bias;
  Dwarf_Frame* frame = nullptr;
  if (dwarf_cfi_addrframe(f.cfi, at - f.cfi_bias, &frame) != 0) return "";
  std::free(frame);
  // ... whose function starts at the greatest FDE start at or below it.
  uint64_t start = 0;
  if (!f.fde_starts->StartOf(at, &start)) return "";
  return absl::StrFormat("func@0x%x", start);
}

std::string Symbolizer::ModuleOf(uint64_t addr) const {
  if (PFM_ADDR_IS_KERNEL(addr)) return "[kernel]";
  const Mapping* m = Find(addr);
  return m == nullptr ? "" : Basename(m->path);
}

}  // namespace pfm

namespace pfm {

// ---- build-ids ----

std::string ReadBuildId(const std::string& path) {
  ElfFile f(path);
  return BuildIdOf(f.get());
}

std::string BuildIdHex(absl::string_view id) {
  std::string out;
  for (unsigned char c : id) absl::StrAppendFormat(&out, "%02x", c);
  return out;
}

void AddBuildIds(std::vector<Mapping>* maps) {
  std::map<std::string, std::string> ids;
  for (Mapping& m : *maps) {
    m.build_id.clear();
    if (m.path.empty() || m.path[0] != '/' || absl::EndsWith(m.path, " (deleted)")) continue;
    auto [it, inserted] = ids.emplace(m.path, "");
    if (inserted) it->second = ReadBuildId(m.path);
    m.build_id = it->second;
  }
}

std::vector<std::string> BuildIdMismatches(const std::vector<Mapping>& maps) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const Mapping& m : maps) {
    if (m.build_id.empty() || !seen.insert(m.path).second) continue;
    const std::string now = ReadBuildId(m.path);
    if (now != m.build_id)
      out.push_back(absl::StrCat(m.path, ": build-id ", BuildIdHex(m.build_id),
                                 " when recorded, ", now.empty() ? "none" : BuildIdHex(now),
                                 " now (the file changed since the recording)"));
  }
  return out;
}

// ---- names as input ----

absl::StatusOr<CodeLocation> ParseCodeLocation(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("location '", text.substr(0, 80), text.size() > 80 ? "..." : "",
                     "': ", why));
  };
  if (text.empty()) return bad("empty");
  if (text.size() > kMaxLocationBytes)
    return bad(absl::StrCat("longer than ", kMaxLocationBytes, " bytes"));
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return bad("spaces and control characters are not part of a name");
  }
  CodeLocation loc;
  if (absl::ascii_isdigit(static_cast<unsigned char>(text[0]))) {
    if (!ParseNumber(text, &loc.addr)) return bad("not an address (0x... or decimal)");
    loc.kind = CodeLocation::Kind::kAddress;
    return loc;
  }
  // FILE:LINE. "ns::f" ends in "::f", not ":DIGITS".
  if (const size_t colon = text.rfind(':'); colon != absl::string_view::npos) {
    const absl::string_view tail = text.substr(colon + 1);
    if (!tail.empty() && absl::ascii_isdigit(static_cast<unsigned char>(tail[0]))) {
      uint64_t line = 0;
      if (colon == 0 || text[colon - 1] == ':')
        return bad("expected FILE:LINE");
      if (!ParseNumber(tail, &line) || tail[0] == '0' || line > INT_MAX)
        return bad("the line must be a number from 1");
      loc.kind = CodeLocation::Kind::kLine;
      loc.file = std::string(text.substr(0, colon));
      loc.line = static_cast<int>(line);
      return loc;
    }
  }
  // SYMBOL+OFF. A '+' inside a name (C++ "operator+") is followed by no
  // number.
  loc.kind = CodeLocation::Kind::kSymbol;
  loc.symbol = std::string(text);
  if (const size_t plus = text.rfind('+'); plus != absl::string_view::npos && plus > 0) {
    const absl::string_view off = text.substr(plus + 1);
    if (!off.empty() && absl::ascii_isdigit(static_cast<unsigned char>(off[0]))) {
      if (!ParseNumber(off, &loc.offset)) return bad("the offset after '+' is not a number");
      loc.symbol = std::string(text.substr(0, plus));
    }
  }
  return loc;
}

namespace {

// One file of the process, as the resolver searches it.
struct SearchFile {
  std::string path;
  std::vector<const Mapping*> mappings;  // its executable mappings
  Dwfl_Module* mod = nullptr;            // null: not readable as ELF
  bool has_dwarf = false;
};

bool InMappings(const SearchFile& f, uint64_t addr) {
  for (const Mapping* m : f.mappings)
    if (addr >= m->start && addr < m->end) return true;
  return false;
}

// `main` of a program without a symbol table (Debian's /bin/true, ls, ...),
// as an ELF vaddr: the first argument its entry code passes to
// __libc_start_main. glibc's x86-64 _start (sysdeps/x86_64/start.S) loads
// it just before that call:
//   lea main(%rip),%rdi    48 8d 3d rel32   (PIE)
//   mov $main,%rdi         48 c7 c7 imm32   (non-PIE)
// followed by one of
//   call *__libc_start_main@GOTPCREL(%rip)   ff 15 rel32
//   call __libc_start_main                   e8 rel32
//   addr32 call __libc_start_main            67 e8 rel32 (relaxed GOT call)
// Only that exact pair, within the first 64 bytes at e_entry, counts; the
// result must lie in an executable PT_LOAD. Anything else (another libc's
// start code, hand-written _start): nullopt.
std::optional<uint64_t> MainFromEntry(Elf* elf) {
  GElf_Ehdr eh;
  if (elf == nullptr || gelf_getehdr(elf, &eh) == nullptr || eh.e_machine != EM_X86_64)
    return std::nullopt;
  size_t nphdr = 0;
  if (elf_getphdrnum(elf, &nphdr) != 0) return std::nullopt;
  size_t raw_size = 0;
  const char* raw = elf_rawfile(elf, &raw_size);
  if (raw == nullptr) return std::nullopt;
  auto exec_segment = [&](uint64_t vaddr, GElf_Phdr* out) {
    for (size_t i = 0; i < nphdr; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr) continue;
      if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) != 0 && vaddr >= ph.p_vaddr &&
          vaddr - ph.p_vaddr < ph.p_filesz) {
        *out = ph;
        return true;
      }
    }
    return false;
  };
  GElf_Phdr text;
  if (!exec_segment(eh.e_entry, &text)) return std::nullopt;
  const uint64_t off = text.p_offset + (eh.e_entry - text.p_vaddr);
  const uint64_t avail = std::min<uint64_t>(
      {64, text.p_filesz - (eh.e_entry - text.p_vaddr), off < raw_size ? raw_size - off : 0});
  const auto* b = reinterpret_cast<const uint8_t*>(raw) + off;
  auto rel32 = [&](size_t i) {
    int32_t v;
    std::memcpy(&v, b + i, 4);
    return static_cast<int64_t>(v);
  };
  for (size_t i = 0; i + 7 + 2 <= avail; ++i) {
    if (b[i] != 0x48 || (b[i + 1] != 0x8d && b[i + 1] != 0xc7) ||
        (b[i + 1] == 0x8d ? b[i + 2] != 0x3d : b[i + 2] != 0xc7))
      continue;
    const size_t c = i + 7;  // the call
    const bool call = (b[c] == 0xff && b[c + 1] == 0x15) || b[c] == 0xe8 ||
                      (b[c] == 0x67 && c + 2 <= avail && b[c + 1] == 0xe8);
    if (!call) continue;
    const uint64_t main = b[i + 1] == 0x8d ? eh.e_entry + c + rel32(i + 3)
                                           : static_cast<uint64_t>(rel32(i + 3));
    GElf_Phdr seg;
    if (!exec_segment(main, &seg)) return std::nullopt;
    return main;
  }
  return std::nullopt;
}

std::string Hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

// "in /p/prog" or "in /p/prog (and its libraries searched: a, b)".
std::string Searched(const std::vector<SearchFile>& files) {
  std::string out = absl::StrCat("in ", files.empty() ? "(no mapped files)" : files[0].path);
  if (files.size() > 1) {
    std::vector<std::string> rest;
    for (size_t i = 1; i < files.size(); ++i) rest.push_back(files[i].path);
    absl::StrAppend(&out, " (and its libraries searched: ", absl::StrJoin(rest, ", "), ")");
  }
  return out;
}

// "main+0x8" of a runtime address in `mod`, or the address.
std::string FunctionAt(Dwfl_Module* mod, uint64_t addr) {
  GElf_Off off = 0;
  GElf_Sym sym;
  const char* name = dwfl_module_addrinfo(mod, addr, &off, &sym, nullptr, nullptr, nullptr);
  if (name == nullptr || *name == '\0') return Hex(addr);
  std::string out = Demangle(name);
  if (off != 0) absl::StrAppendFormat(&out, "+0x%x", off);
  return out;
}

struct SymbolMatch {
  uint64_t addr = 0;
  uint64_t size = 0;
  int type = STT_NOTYPE;
  bool global = false;
};

// The symbol `want` in `f`: nullopt if the file has none; an error when it
// is ambiguous.
absl::StatusOr<std::optional<SymbolMatch>> FindSymbol(const SearchFile& f,
                                                      const std::string& want,
                                                      LocationUse use) {
  const int n = dwfl_module_getsymtab(f.mod);
  std::map<uint64_t, SymbolMatch> by_addr;
  for (int i = 1; i < n; ++i) {
    GElf_Sym sym;
    GElf_Addr addr = 0;
    GElf_Word shndx = 0;
    const char* name = dwfl_module_getsym_info(f.mod, i, &sym, &addr, &shndx, nullptr, nullptr);
    if (name == nullptr || *name == '\0' || shndx == SHN_UNDEF || sym.st_shndx == SHN_UNDEF ||
        sym.st_shndx == SHN_ABS)
      continue;
    const int type = GELF_ST_TYPE(sym.st_info);
    const bool fits = use == LocationUse::kCode
                          ? type == STT_FUNC || type == STT_GNU_IFUNC || type == STT_NOTYPE
                          : type == STT_OBJECT || type == STT_NOTYPE || type == STT_COMMON;
    if (!fits || !NameMatches(name, want)) continue;
    const int bind = GELF_ST_BIND(sym.st_info);
    SymbolMatch& m = by_addr[addr];
    m.addr = addr;
    m.size = std::max<uint64_t>(m.size, sym.st_size);
    if (m.type == STT_NOTYPE) m.type = type;
    m.global = m.global || bind == STB_GLOBAL || bind == STB_WEAK || bind == STB_GNU_UNIQUE;
  }
  if (by_addr.empty()) return std::optional<SymbolMatch>();
  if (by_addr.size() == 1) return std::optional<SymbolMatch>(by_addr.begin()->second);
  const SymbolMatch* global = nullptr;
  size_t globals = 0;
  for (const auto& [addr, m] : by_addr)
    if (m.global) {
      global = &m;
      ++globals;
    }
  if (globals == 1) return std::optional<SymbolMatch>(*global);
  std::vector<std::string> where;
  for (const auto& [addr, m] : by_addr) where.push_back(Hex(addr));
  return absl::InvalidArgumentError(absl::StrCat(
      "'", want, "' names ", by_addr.size(), " different places in ", f.path, " (at ",
      absl::StrJoin(where, ", "), "): give FILE:LINE or an address"));
}

// Code lines of `file` in `f` that begin a statement: those of `line`, or
// (none there) of the next line that has code. *file_seen says whether the
// file is in the line tables at all.
struct LineHits {
  bool file_seen = false;
  int line = 0;                 // the line the addresses belong to
  std::vector<uint64_t> addrs;  // runtime addresses
};

LineHits FindLine(const SearchFile& f, const std::string& file, int line) {
  LineHits exact, next;
  exact.line = line;
  next.line = INT_MAX;
  Dwarf_Addr bias = 0;
  Dwarf_Die* cu = nullptr;
  while ((cu = dwfl_module_nextcu(f.mod, cu, &bias)) != nullptr) {
    Dwarf_Lines* lines = nullptr;
    size_t nlines = 0;
    if (dwarf_getsrclines(cu, &lines, &nlines) != 0) continue;
    for (size_t i = 0; i < nlines; ++i) {
      Dwarf_Line* l = dwarf_onesrcline(lines, i);
      if (l == nullptr) continue;
      const char* src = dwarf_linesrc(l, nullptr, nullptr);
      if (src == nullptr || !FileMatches(src, file)) continue;
      exact.file_seen = true;
      bool stmt = false, end = false;
      int ln = 0;
      Dwarf_Addr a = 0;
      if (dwarf_linebeginstatement(l, &stmt) != 0 || dwarf_lineendsequence(l, &end) != 0 ||
          dwarf_lineno(l, &ln) != 0 || dwarf_lineaddr(l, &a) != 0 || !stmt || end)
        continue;
      if (ln == line) {
        exact.addrs.push_back(a + bias);
      } else if (ln > line && ln <= next.line) {
        if (ln < next.line) next.addrs.clear();
        next.line = ln;
        next.addrs.push_back(a + bias);
      }
    }
  }
  if (!exact.addrs.empty() || next.addrs.empty()) return exact;
  next.file_seen = true;
  return next;
}

}  // namespace

absl::StatusOr<ResolvedLocation> ResolveLocation(absl::string_view text,
                                                 const std::vector<Mapping>& maps,
                                                 const std::string& exe_in,
                                                 LocationUse use) {
  absl::StatusOr<CodeLocation> loc = ParseCodeLocation(text);
  if (!loc.ok()) return loc.status();
  ResolvedLocation out;
  if (loc->kind == CodeLocation::Kind::kAddress) {
    out.addr = loc->addr;
    out.elf_addr = loc->addr;
    out.description = Hex(loc->addr);
    return out;
  }
  if (loc->kind == CodeLocation::Kind::kLine && use == LocationUse::kData)
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is a source line, which is code: a data breakpoint (r, w, rw) "
        "needs a variable's name or an address"));

  // The files, in the dynamic linker's order.
  std::vector<const Mapping*> sorted;
  for (const Mapping& m : maps)
    if (!m.path.empty() && m.path[0] == '/' && m.start < m.end) sorted.push_back(&m);
  std::sort(sorted.begin(), sorted.end(),
            [](const Mapping* a, const Mapping* b) { return a->start < b->start; });
  std::string exe = exe_in.empty() && !sorted.empty() ? sorted[0]->path : exe_in;
  const std::string interp = exe.empty() ? "" : Interpreter(exe);
  const std::string interp_real = interp.empty() ? "" : RealPath(interp);
  std::vector<SearchFile> files;
  std::map<std::string, size_t> index;
  for (const Mapping* m : sorted) {
    auto [it, inserted] = index.emplace(m->path, files.size());
    if (inserted) files.push_back(SearchFile{m->path, {}, nullptr, false});
    files[it->second].mappings.push_back(m);
  }
  std::stable_sort(files.begin(), files.end(), [&](const SearchFile& a, const SearchFile& b) {
    auto rank = [&](const SearchFile& f) {
      if (f.path == exe) return 0;
      if (!interp_real.empty() && RealPath(f.path) == interp_real) return 2;
      return 1;
    };
    return rank(a) < rank(b);
  });
  if (files.empty())
    return absl::NotFoundError(
        absl::StrCat("cannot resolve '", text, "': the process maps no files"));

  std::unique_ptr<Dwfl, DwflDelete> dwfl(dwfl_begin(Callbacks()));
  if (dwfl == nullptr) return absl::InternalError("elfutils: dwfl_begin failed");
  dwfl_report_begin(dwfl.get());
  std::vector<uint64_t> biases(files.size(), 0);
  for (size_t i = 0; i < files.size(); ++i) {
    SearchFile& f = files[i];
    ElfFile elf(f.path);
    const std::vector<LoadSegment> segments = LoadSegments(elf.get());
    std::optional<uint64_t> bias;
    for (const Mapping* m : f.mappings)
      if ((bias = BiasOf(segments, *m))) break;
    if (!bias) continue;
    biases[i] = *bias;
    f.mod = ReportElf(dwfl.get(), f.path, elf.TakeFd(), *bias);
  }
  dwfl_report_end(dwfl.get(), nullptr, nullptr);

  if (loc->kind == CodeLocation::Kind::kSymbol) {
    for (size_t i = 0; i < files.size(); ++i) {
      const SearchFile& f = files[i];
      if (f.mod == nullptr) continue;
      absl::StatusOr<std::optional<SymbolMatch>> m = FindSymbol(f, loc->symbol, use);
      if (!m.ok()) return m.status();
      if (!m->has_value()) continue;
      const SymbolMatch& s = **m;
      if (s.type == STT_GNU_IFUNC)
        return absl::InvalidArgumentError(absl::StrCat(
            "'", loc->symbol, "' in ", f.path,
            " is an IFUNC: the implementation is chosen when the program starts; "
            "name that implementation (e.g. __", loc->symbol, "_avx2) or an address"));
      if (loc->offset > 0 && loc->offset >= s.size)
        return absl::InvalidArgumentError(
            s.size == 0
                ? absl::StrCat("'", text, "': ", loc->symbol, " in ", f.path,
                               " has no size, so no offset into it can be checked")
                : absl::StrCat("'", text, "' is beyond ", loc->symbol, ": its ", s.size,
                               " bytes end at ", loc->symbol, "+", Hex(s.size), " (in ",
                               f.path, ")"));
      out.addr = s.addr + loc->offset;
      out.path = f.path;
      out.elf_addr = out.addr - biases[i];
      out.size = s.size;
      out.description = absl::StrCat(text, " in ", f.path);
      if (use == LocationUse::kCode && !InMappings(f, out.addr))
        return absl::FailedPreconditionError(absl::StrCat(
            "'", text, "' in ", f.path, " is at ", Hex(out.addr),
            ", which no executable mapping of that file covers"));
      return out;
    }
    // A stripped program's main: where its _start sends __libc_start_main
    // (what GDB's `start` needs symbols for).
    if (loc->symbol == "main" && loc->offset == 0 && use == LocationUse::kCode) {
      for (size_t i = 0; i < files.size(); ++i) {
        const SearchFile& f = files[i];
        if (f.mod == nullptr || f.path != exe) continue;
        Dwarf_Addr elf_bias = 0;
        std::optional<uint64_t> vaddr = MainFromEntry(dwfl_module_getelf(f.mod, &elf_bias));
        if (!vaddr) break;
        out.addr = *vaddr + biases[i];
        out.path = f.path;
        out.elf_addr = *vaddr;
        out.size = 0;
        out.description = absl::StrCat(
            "main in ", f.path, " (no symbol: the address its _start passes to __libc_start_main)");
        if (!InMappings(f, out.addr)) break;
        return out;
      }
    }
    return absl::NotFoundError(
        absl::StrCat("no symbol '", loc->symbol, "' ", Searched(files)));
  }

  // A source line.
  bool any_seen = false;
  for (size_t i = 0; i < files.size(); ++i) {
    SearchFile& f = files[i];
    if (f.mod == nullptr) continue;
    Dwarf_Addr dbias = 0;
    f.has_dwarf = dwfl_module_getdwarf(f.mod, &dbias) != nullptr;
    if (!f.has_dwarf) continue;
    LineHits hits = FindLine(f, loc->file, loc->line);
    if (!hits.file_seen) continue;
    any_seen = true;
    if (hits.addrs.empty()) continue;
    // One function: its lowest address. Several: say which.
    std::map<std::string, uint64_t> lowest;  // function -> lowest address
    for (uint64_t a : hits.addrs) {
      GElf_Off off = 0;
      GElf_Sym sym;
      const char* fn = dwfl_module_addrinfo(f.mod, a, &off, &sym, nullptr, nullptr, nullptr);
      const std::string key = fn != nullptr ? Demangle(fn) : "";
      auto [it, inserted] = lowest.emplace(key, a);
      if (!inserted) it->second = std::min(it->second, a);
    }
    if (lowest.size() > 1) {
      std::vector<std::string> where;
      for (const auto& [fn, a] : lowest)
        where.push_back(absl::StrCat(Hex(a), " (", FunctionAt(f.mod, a), ")"));
      return absl::InvalidArgumentError(absl::StrCat(
          "'", text, "' is code in ", lowest.size(), " functions of ", f.path, ": ",
          absl::StrJoin(where, ", "), "; give one by name or address"));
    }
    out.addr = lowest.begin()->second;
    out.path = f.path;
    out.elf_addr = out.addr - biases[i];
    const std::string moved =
        hits.line != loc->line ? absl::StrCat("no code there: line ", hits.line, ", ") : "";
    out.description = absl::StrCat(text, " (", moved, FunctionAt(f.mod, out.addr), ") in ",
                                   f.path);
    if (!InMappings(f, out.addr))
      return absl::FailedPreconditionError(absl::StrCat(
          "'", text, "' in ", f.path, " is at ", Hex(out.addr),
          ", which no executable mapping of that file covers"));
    return out;
  }
  if (any_seen)
    return absl::NotFoundError(absl::StrCat("no code at or after line ", loc->line, " of ",
                                            loc->file, " ", Searched(files)));
  std::string why = absl::StrCat("no source file '", loc->file, "' in the line tables ",
                                 Searched(files));
  if (files[0].mod == nullptr || !files[0].has_dwarf)
    absl::StrAppend(&why, "; ", files[0].path, " has no debug info (build it with -g)");
  return absl::NotFoundError(why);
}

}  // namespace pfm
