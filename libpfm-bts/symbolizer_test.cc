#include "pfm/symbolizer.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "libpfm-bts/testing/elf_text.h"
#include "pfm/unique_fd.h"

namespace pfm {

// Outside the anonymous namespace so its demangled name is predictable.
__attribute__((noinline)) int SymbolizerTestTarget(int x) {
  // Enough code that +8 is still inside the function.
  volatile int v = x;
  for (int i = 0; i < 3; ++i) v = v * 3 + i;
  return v;
}

namespace {

bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

Symbolizer SelfSymbolizer() {
  auto maps = ReadProcMaps(0);
  EXPECT_TRUE(maps.ok()) << maps.status();
  return Symbolizer(maps.ok() ? *maps : std::vector<Mapping>{});
}

TEST(ReadProcMaps, ListsOnlyExecutableFileMappingsInOrder) {
  auto maps = ReadProcMaps(::getpid());
  ASSERT_TRUE(maps.ok()) << maps.status();
  ASSERT_FALSE(maps->empty());
  bool has_self = false;
  for (size_t i = 0; i < maps->size(); ++i) {
    const Mapping& m = (*maps)[i];
    EXPECT_EQ(m.path[0], '/') << m.path;
    EXPECT_LT(m.start, m.end);
    if (i > 0) {
      EXPECT_LE((*maps)[i - 1].end, m.start);
    }
    const uint64_t f = Addr(reinterpret_cast<void*>(&SymbolizerTestTarget));
    if (f >= m.start && f < m.end) has_self = true;
  }
  EXPECT_TRUE(has_self) << "no mapping covers this test's own code";
}

TEST(ReadProcMaps, MissingProcessIsNotFound) {
  // Above the default pid_max (4194304 is the kernel's hard limit).
  auto maps = ReadProcMaps(4194305);
  EXPECT_EQ(maps.status().code(), absl::StatusCode::kNotFound) << maps.status();
}

// ReadProcMaps' parsing and filtering (ParseProcMaps, KeepFileBacked) are
// tested in kernel/uapi/proc_maps_test.cc.

TEST(Symbolizer, LeavesOutMappingsWithoutAPathOrBytes) {
  Symbolizer s({Mapping{0x10000000, 0x10001000, 0, ""},
                Mapping{0x10001000, 0x10001000, 0, "/nonexistent/empty"},
                Mapping{0x10002000, 0x10003000, 0, "[vdso]"}});
  EXPECT_EQ(s.Symbolize(0x10000010), "");
  EXPECT_EQ(s.ModuleOf(0x10001000), "");
  EXPECT_EQ(s.Symbolize(0x10002010), "[[vdso]+0x10]");
}

TEST(Symbolizer, NamesOwnFunctionDemangledWithOffset) {
  Symbolizer s = SelfSymbolizer();
  const uint64_t f = Addr(reinterpret_cast<void*>(&SymbolizerTestTarget));
  EXPECT_EQ(s.Symbolize(f), "pfm::SymbolizerTestTarget(int)");
  EXPECT_EQ(s.Symbolize(f + 8), "pfm::SymbolizerTestTarget(int)+0x8");
  EXPECT_FALSE(s.ModuleOf(f).empty());
}

TEST(Symbolizer, NamesFunctionInAnotherLoadedObject) {
  // ReadProcMaps lives in the symbolizer library: a shared object of its own
  // when Bazel links the test dynamically, else the test executable.
  Symbolizer s = SelfSymbolizer();
  const uint64_t f = Addr(reinterpret_cast<void*>(&ReadProcMaps));
  const std::string name = s.Symbolize(f);
  EXPECT_EQ(name.rfind("pfm::ReadProcMaps(", 0), 0u) << name;
  EXPECT_FALSE(Contains(name, "+")) << name;
}

TEST(Symbolizer, NamesLibcFunctionFromSharedObject) {
  void* getpid_addr = dlsym(RTLD_DEFAULT, "getpid");
  ASSERT_NE(getpid_addr, nullptr);
  Symbolizer s = SelfSymbolizer();
  const std::string name = s.Symbolize(Addr(getpid_addr));
  // glibc exports getpid and __getpid at one address; either is right.
  EXPECT_TRUE(Contains(name, "getpid")) << name;
  EXPECT_FALSE(Contains(name, "+")) << name;
  EXPECT_TRUE(Contains(s.ModuleOf(Addr(getpid_addr)), "libc")) << s.ModuleOf(Addr(getpid_addr));
  EXPECT_TRUE(Contains(s.Symbolize(Addr(getpid_addr) + 1), "getpid+0x1"));
}

TEST(Symbolizer, UnmappedIsEmptyAndKernelIsBracketed) {
  Symbolizer s = SelfSymbolizer();
  EXPECT_EQ(s.Symbolize(0x10), "");
  EXPECT_EQ(s.ModuleOf(0x10), "");
  EXPECT_EQ(s.Symbolize(0xffffffff81000000ull), "[kernel]");
  EXPECT_EQ(s.ModuleOf(0xffffffff81000000ull), "[kernel]");
}

TEST(Symbolizer, MissingFileFallsBackToPathAndFileOffset) {
  Symbolizer s({Mapping{0x10000000, 0x10002000, 0x3000, "/nonexistent/libgone.so"}});
  EXPECT_EQ(s.Symbolize(0x10000010), "[/nonexistent/libgone.so+0x3010]");
  EXPECT_EQ(s.Symbolize(0x10000020), "[/nonexistent/libgone.so+0x3020]");  // cached failure
  EXPECT_EQ(s.ModuleOf(0x10000010), "libgone.so");
  EXPECT_EQ(s.Symbolize(0x10002000), "");  // end is exclusive
}

TEST(Symbolizer, FileThatIsNotElfFallsBack) {
  // /proc/self/maps exists but is not ELF: must not crash or match symbols.
  Symbolizer s({Mapping{0x20000000, 0x20001000, 0, "/proc/self/maps"}});
  EXPECT_EQ(s.Symbolize(0x20000004), "[/proc/self/maps+0x4]");
}

// Many Symbolizers over the same files (a trace's MAPS blocks) read each
// file once; at most max_open stay open, the others are read again when
// needed, and the names do not change.
// libdwfl's own answer for `addr` in `mod`, formatted as Symbolize does
// ("" for none): the reference the symbolizer's index is held to.
std::string LibdwflName(Dwfl_Module* mod, uint64_t addr) {
  GElf_Off off = 0;
  GElf_Sym sym;
  const char* name = dwfl_module_addrinfo(mod, addr, &off, &sym, nullptr, nullptr, nullptr);
  if (name == nullptr || *name == '\0') return "";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d != nullptr ? d : name;
  std::free(d);
  if (off != 0) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "+0x%llx", static_cast<unsigned long long>(off));
    out += hex;
  }
  return out;
}

// Symbolize names an address through an index of the file's symbols
// (symbolizer.cc, SymbolIndex: libdwfl's pick made once per stretch of
// addresses between symbols' and sections' bounds), and its names must be
// the ones libdwfl gives when asked at each address: here at every
// symbol's start and end and one byte either side, every section's
// bounds, and 4000 addresses spread over the code, in address order, over
// real files: libc (.dynsym only, aliases and sizeless symbols among
// them), bash (a stripped PIE), names_prog (a PIE with .symtab), its
// non-PIE build (ET_EXEC with .symtab) and that one stripped (no names in
// its code: the no-name answers), overlap_syms.so
// (testdata/overlap_syms.S: the cases libdwfl's pick among overlapping
// symbols turns on, in a known table order) and this test binary (a
// .symtab of tens of thousands: static functions, C++ names; sampled). A
// bound the index missed would give two addresses with different answers
// one name: without a section's end + 1 (libdwfl counts the end byte in),
// the 8 bytes after names_prog's .init were "_init+0x18"; without the
// binding or same-start rule, overlap_syms' inner_weak_first and
// pair_b_small were misnamed.
// The PLT entries objdump (binutils) names in `path`'s .plt, .plt.sec and
// .plt.got: its labels that end in "@plt" (address, demangled name), not
// the ones relative to them (the resolver's header is `first@plt-0x10`).
std::vector<std::pair<uint64_t, std::string>> ObjdumpPlt(const std::string& path) {
  std::vector<std::pair<uint64_t, std::string>> out;
  const std::string cmd = "/usr/bin/objdump -d -C -j .plt -j .plt.sec -j .plt.got '" + path +
                          "' 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char line[4096];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    // "0000000000001030 <puts@plt>:"
    unsigned long long a = 0;
    char* end = nullptr;
    a = std::strtoull(line, &end, 16);
    if (end == line || std::strncmp(end, " <", 2) != 0) continue;
    std::string label(end + 2);
    const size_t close = label.rfind(">:");
    if (close == std::string::npos) continue;
    label.resize(close);
    if (label.size() > 4 && label.compare(label.size() - 4, 4, "@plt") == 0)
      out.emplace_back(a, label);
  }
  ::pclose(p);
  return out;
}

// The sections objdump's PLT labels are in: their [start, end).
std::vector<std::pair<uint64_t, uint64_t>> PltSections(Elf* elf) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return out;
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr) continue;
    const char* n = elf_strptr(elf, shstrndx, sh.sh_name);
    if (n != nullptr && (std::strcmp(n, ".plt") == 0 || std::strcmp(n, ".plt.sec") == 0 ||
                         std::strcmp(n, ".plt.got") == 0))
      out.emplace_back(sh.sh_addr, sh.sh_addr + sh.sh_size);
  }
  return out;
}

TEST(Symbolizer, NamesAreLibdwflsAtEveryBoundOfRealFiles) {
  Dwfl_Callbacks cb{};
  char* debuginfo_path = nullptr;
  cb.find_elf = dwfl_build_id_find_elf;
  cb.find_debuginfo = dwfl_standard_find_debuginfo;
  cb.section_address = dwfl_offline_section_address;
  cb.debuginfo_path = &debuginfo_path;
  const uint64_t kBias = uint64_t{1} << 40;  // where the file is "mapped"
  char self[PATH_MAX] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  for (const std::string& path : {std::string("/usr/lib/x86_64-linux-gnu/libc.so.6"),
                                  std::string("/usr/bin/bash"),
                                  std::string("libpfm-bts/names_prog"),
                                  std::string("libpfm-bts/names_prog_nopie"),
                                  std::string("libpfm-bts/names_prog_nopie_stripped"),
                                  std::string("libpfm-bts/overlap_syms.so"), std::string(self)}) {
    SCOPED_TRACE(path);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    Dwfl* dwfl = dwfl_begin(&cb);
    ASSERT_NE(dwfl, nullptr);
    dwfl_report_begin(dwfl);
    Dwfl_Module* mod = dwfl_report_elf(dwfl, path.c_str(), path.c_str(), fd, 0, true);
    dwfl_report_end(dwfl, nullptr, nullptr);
    ASSERT_NE(mod, nullptr) << dwfl_errmsg(-1);
    GElf_Addr ebias = 0;
    Elf* elf = dwfl_module_getelf(mod, &ebias);
    ASSERT_NE(elf, nullptr);
    // The executable PT_LOAD segment, mapped at kBias + its vaddr.
    size_t phnum = 0;
    ASSERT_EQ(elf_getphdrnum(elf, &phnum), 0);
    GElf_Phdr text{};
    for (size_t i = 0; i < phnum; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) != nullptr && ph.p_type == PT_LOAD &&
          (ph.p_flags & PF_X) != 0)
        text = ph;
    }
    ASSERT_NE(text.p_memsz, 0u);
    const uint64_t lo = text.p_vaddr & ~uint64_t{0xfff};
    const uint64_t hi = text.p_vaddr + text.p_filesz;
    Symbolizer sym({Mapping{kBias + lo, kBias + hi, text.p_offset & ~uint64_t{0xfff}, path}});
    std::vector<uint64_t> at;
    auto near = [&](uint64_t a) {
      for (uint64_t x : {a - 1, a, a + 1})
        if (x >= lo && x < hi) at.push_back(x);
    };
    const int n = dwfl_module_getsymtab(mod);
    ASSERT_GT(n, 5);  // the stripped ET_EXEC: its 9 .dynsym entries
    // Every symbol's bounds, or those of 2000 spread over a larger table
    // (this binary's: tens of thousands, locals among them).
    const int stride = std::max(1, n / 2000);
    for (int i = 1; i < n; i += stride) {
      GElf_Sym s;
      GElf_Addr a = 0;
      GElf_Word shndx = 0;
      if (dwfl_module_getsym_info(mod, i, &s, &a, &shndx, nullptr, nullptr) == nullptr) continue;
      near(a);
      near(a + s.st_size);
    }
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(elf, scn)) != nullptr) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr) continue;
      near(sh.sh_addr);
      near(sh.sh_addr + sh.sh_size);
    }
    for (uint64_t k = 0; k < 4000; ++k) at.push_back(lo + (hi - lo) * k / 4000);
    std::sort(at.begin(), at.end());
    at.erase(std::unique(at.begin(), at.end()), at.end());
    // PLT entries have names of their own (objdump's: the next test), where
    // libdwfl has none or a label before them.
    const std::vector<std::pair<uint64_t, uint64_t>> plt = PltSections(elf);
    at.erase(std::remove_if(at.begin(), at.end(),
                            [&](uint64_t a) {
                              for (const auto& [b, e] : plt)
                                if (a >= b && a < e) return true;
                              return false;
                            }),
             at.end());
    size_t named = 0, mismatches = 0;
    for (uint64_t a : at) {
      const std::string want = LibdwflName(mod, a);
      const std::string got = sym.Symbolize(kBias + a);
      named += !want.empty();
      // No symbol: the file and offset ("[path+0x...]").
      const bool same = want.empty() ? got.rfind("[" + path + "+0x", 0) == 0 : got == want;
      if (!same && ++mismatches <= 5)
        ADD_FAILURE() << "0x" << std::hex << a << ": libdwfl '" << want << "', Symbolize '"
                      << got << "'";
    }
    EXPECT_EQ(mismatches, 0u) << "of " << at.size() << " addresses";
    // Names to compare, but where there are none to give (the stripped
    // ET_EXEC's code: its .dynsym names only imports): the fallback there.
    if (path.find("stripped") == std::string::npos) {
      EXPECT_GT(named, at.size() / 2) << "of " << at.size();
    }
    dwfl_end(dwfl);
  }
}

// A Symbolizer over `path`'s executable PT_LOAD segment, mapped at `bias` +
// its page-aligned vaddr as a loader would place it; *lo and *hi: the
// segment's ELF addresses. Null if the file has none.
std::unique_ptr<Symbolizer> TextSymbolizer(const std::string& path, uint64_t bias, uint64_t* lo,
                                           uint64_t* hi) {
  const std::optional<Mapping> m = testing::TextMapping(path, bias, lo, hi);
  if (!m) return nullptr;
  return std::make_unique<Symbolizer>(std::vector<Mapping>{*m});
}

// PLT entries are named as binutils names them (objdump -d -C, GDB) and as
// perf synthesizes them: `puts@plt`, `*ABS*+0x9f550@plt` for libc's
// IRELATIVE slots, C++ names demangled; an address inside an entry is
// `name@plt+0x6`. Over libc (.plt of IRELATIVE and JUMP_SLOT entries), bash
// (a lazy .plt), names_prog and its non-PIE build (.plt, .plt.got) and this
// test binary (C++ names). Before, these addresses had no name: the PLT is
// in no symbol table.
TEST(Symbolizer, PltEntriesAreNamedAsObjdumpNamesThem) {
  char self[PATH_MAX] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  const uint64_t kBias = uint64_t{1} << 40;
  for (const std::string& path : {std::string("/usr/lib/x86_64-linux-gnu/libc.so.6"),
                                  std::string("/usr/bin/bash"),
                                  std::string("libpfm-bts/names_prog"),
                                  std::string("libpfm-bts/names_prog_nopie"), std::string(self)}) {
    SCOPED_TRACE(path);
    const std::vector<std::pair<uint64_t, std::string>> want = ObjdumpPlt(path);
    ASSERT_GE(want.size(), 2u) << "objdump found no PLT entries";
    uint64_t lo = 0, hi = 0;
    std::unique_ptr<Symbolizer> made = TextSymbolizer(path, kBias, &lo, &hi);
    ASSERT_NE(made, nullptr);
    Symbolizer& sym = *made;
    size_t checked = 0;
    for (const auto& [a, name] : want) {
      if (a < lo || a + 8 > hi) continue;
      EXPECT_EQ(sym.Symbolize(kBias + a), name) << std::hex << a;
      EXPECT_EQ(sym.Symbolize(kBias + a + 6), name + "+0x6") << std::hex << a;
      ++checked;
    }
    EXPECT_EQ(checked, want.size());
  }
}

// Code no symbol names is told apart by function: UnnamedFunction gives the
// start of the FDE that covers an address, as readelf lists the FDEs, over
// a stripped ET_EXEC (its functions' starts also read from the unstripped
// copy's symbol table, at the same addresses) and stripped bash (every FDE
// outside the PLT, sampled); an address a symbol names, or in no FDE, gets
// no such name.
TEST(Symbolizer, UnnamedCodeIsToldApartByTheUnwindTablesFunctions) {
  const uint64_t kBias = uint64_t{1} << 40;
  // The unstripped copy's functions.
  std::map<std::string, std::pair<uint64_t, uint64_t>> fns;
  {
    const int fd = ::open("libpfm-bts/names_prog_nopie", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
    ASSERT_NE(elf, nullptr);
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(elf, scn)) != nullptr) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != SHT_SYMTAB) continue;
      Elf_Data* d = elf_getdata(scn, nullptr);
      for (size_t i = 0; d != nullptr && i < sh.sh_size / sh.sh_entsize; ++i) {
        GElf_Sym sy;
        if (gelf_getsym(d, static_cast<int>(i), &sy) == nullptr) continue;
        const char* n = elf_strptr(elf, sh.sh_link, sy.st_name);
        if (n != nullptr && GELF_ST_TYPE(sy.st_info) == STT_FUNC && sy.st_size > 0)
          fns[n] = {sy.st_value, sy.st_size};
      }
    }
    elf_end(elf);
    ::close(fd);
  }
  uint64_t lo = 0, hi = 0;
  std::unique_ptr<Symbolizer> stripped =
      TextSymbolizer("libpfm-bts/names_prog_nopie_stripped", kBias, &lo, &hi);
  std::unique_ptr<Symbolizer> named =
      TextSymbolizer("libpfm-bts/names_prog_nopie", kBias, &lo, &hi);
  ASSERT_TRUE(stripped && named);
  for (const char* f : {"main", "pfm_names_work", "twice"}) {
    SCOPED_TRACE(f);
    ASSERT_EQ(fns.count(f), 1u);
    const auto [start, size] = fns[f];
    char want[64];
    std::snprintf(want, sizeof(want), "func@0x%llx", static_cast<unsigned long long>(start));
    for (uint64_t a : {start, start + 1, start + size - 1}) {
      EXPECT_EQ(stripped->Symbolize(kBias + a).rfind("[", 0), 0u);
      EXPECT_EQ(stripped->UnnamedFunction(kBias + a), want) << std::hex << a;
      EXPECT_EQ(named->UnnamedFunction(kBias + a), "") << "a symbol names it";
    }
  }
  // Stripped bash, against readelf's FDEs.
  std::unique_ptr<Symbolizer> bash = TextSymbolizer("/usr/bin/bash", kBias, &lo, &hi);
  ASSERT_NE(bash, nullptr);
  const std::vector<std::pair<uint64_t, uint64_t>> fdes = testing::ReadelfFdes("/usr/bin/bash");
  ASSERT_GT(fdes.size(), 500u);
  size_t checked = 0;
  const size_t stride = std::max<size_t>(1, fdes.size() / 1500);
  for (size_t i = 0; i < fdes.size(); i += stride) {
    const auto [a, b] = fdes[i];
    if (a < lo || b > hi) continue;
    char want[64];
    std::snprintf(want, sizeof(want), "func@0x%llx", static_cast<unsigned long long>(a));
    for (uint64_t x : {a, (a + b) / 2, b - 1}) {
      if (bash->Symbolize(kBias + x).rfind("[", 0) != 0) continue;  // named (.dynsym, PLT)
      EXPECT_EQ(bash->UnnamedFunction(kBias + x), want) << std::hex << x;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000u);
  // In no FDE (between two of readelf's, crtstuff's code and the like): no
  // such name, although a function starts below it.
  std::vector<std::pair<uint64_t, uint64_t>> sorted = fdes;
  std::sort(sorted.begin(), sorted.end());
  size_t gaps = 0;
  for (size_t i = 0; i + 1 < sorted.size(); ++i) {
    const uint64_t gap = sorted[i].second, next = sorted[i + 1].first;
    if (gap >= next || gap < lo || gap >= hi) continue;
    if (bash->Symbolize(kBias + gap).rfind("[", 0) != 0) continue;  // named
    EXPECT_EQ(bash->UnnamedFunction(kBias + gap), "") << std::hex << gap;
    ++gaps;
  }
  EXPECT_GT(gaps, 10u);
  EXPECT_EQ(bash->UnnamedFunction(kBias + lo), "");
}

TEST(SymbolFiles, ReadsEachFileOnceForAllSymbolizersAndKeepsAtMostMaxOpen) {
  absl::StatusOr<std::vector<Mapping>> maps = ReadProcMaps(0);
  ASSERT_TRUE(maps.ok()) << maps.status();
  const uint64_t own = Addr(reinterpret_cast<void*>(&SymbolizerTestTarget));
  void* getpid_addr = dlsym(RTLD_DEFAULT, "getpid");
  ASSERT_NE(getpid_addr, nullptr);
  const uint64_t libc = Addr(getpid_addr);

  auto shared = std::make_shared<SymbolFiles>();
  std::vector<std::unique_ptr<Symbolizer>> blocks;
  for (int i = 0; i < 50; ++i) {
    blocks.push_back(std::make_unique<Symbolizer>(*maps, shared));
    EXPECT_EQ(blocks.back()->Symbolize(own + 8), "pfm::SymbolizerTestTarget(int)+0x8");
  }
  EXPECT_EQ(shared->open_files(), 1u);
  EXPECT_TRUE(Contains(blocks[7]->Symbolize(libc), "getpid"));
  EXPECT_EQ(shared->open_files(), 2u);

  auto one = std::make_shared<SymbolFiles>(1);
  Symbolizer s(*maps, one);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.Symbolize(own), "pfm::SymbolizerTestTarget(int)");
    EXPECT_EQ(one->open_files(), 1u);
    const std::string name = s.Symbolize(libc + 1);
    EXPECT_TRUE(Contains(name, "getpid+0x1")) << name;
    EXPECT_EQ(one->open_files(), 1u);
  }
}

// Runs `fn` in a child process: its result, or -1 when the child was still
// running after `seconds` (stuck, e.g. in an open() of a FIFO; it is killed).
int InChildWithin(int seconds, const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid < 0) return -2;
  if (pid == 0) ::_exit(fn());
  int status = 0;
  for (int i = 0; i < seconds * 100; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -3;
    ::usleep(10000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

// A trace's MAPS block is input: a path in it may name a FIFO, which a
// blocking open() would wait on forever (no writer comes).
TEST(Symbolizer, AFifoAtAMappedPathIsNeverOpenedAndFallsBack) {
  const std::string fifo = ::testing::TempDir() + "/mapped_fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << strerror(errno);
  // Each place a mapped path is read: its symbols and load bias, its
  // build-id (recorded: checked first; AddBuildIds, BuildIdMismatches,
  // ReadBuildId) and the resolver's program headers.
  EXPECT_EQ(InChildWithin(5, [&] {
              Symbolizer s({Mapping{0x10000000, 0x10002000, 0x3000, fifo}});
              return s.Symbolize(0x10000010) == "[" + fifo + "+0x3010]" ? 0 : 1;
            }),
            0);
  EXPECT_EQ(InChildWithin(5, [&] {
              Mapping m{0x10000000, 0x10002000, 0x3000, fifo};
              m.build_id = std::string(20, '\x5a');
              Symbolizer s({m});
              if (s.Symbolize(0x10000010) != "[" + fifo + "+0x3010]") return 1;
              return s.warnings().size() == 1 ? 0 : 2;
            }),
            0);
  EXPECT_EQ(InChildWithin(5, [&] {
              std::vector<Mapping> maps = {Mapping{0x1000, 0x2000, 0, fifo}};
              AddBuildIds(&maps);
              maps[0].build_id = "x";
              return ReadBuildId(fifo).empty() && BuildIdMismatches(maps).size() == 1 ? 0 : 1;
            }),
            0);
  EXPECT_EQ(InChildWithin(5, [&] {
              absl::StatusOr<ResolvedLocation> r =
                  ResolveLocation("main", {Mapping{0x10000000, 0x10002000, 0, fifo}}, fifo);
              return r.status().code() == absl::StatusCode::kNotFound ? 0 : 1;
            }),
            0);
}

// A stripped file's symbols may be in a separate debuginfo file, which
// libdwfl looks for next to it (NAME.debug, .debug/NAME.debug, ...) with a
// blocking open(): a FIFO there is not waited on either.
TEST(Symbolizer, AFifoWhereADebugFileWouldBeIsNotWaitedOn) {
  const std::string dir = ::testing::TempDir() + "/debug_fifo";
  ::mkdir(dir.c_str(), 0755);
  const std::string prog = dir + "/prog";
  {
    std::ifstream in("libpfm-bts/names_prog_stripped", std::ios::binary);
    std::ofstream out(prog, std::ios::binary | std::ios::trunc);
    out << in.rdbuf();
  }
  ASSERT_FALSE(ReadBuildId(prog).empty());
  for (const char* fifo : {"/prog.debug", "/.debug/prog.debug"}) {
    SCOPED_TRACE(fifo);
    ::mkdir((dir + "/.debug").c_str(), 0755);
    ::unlink((dir + "/prog.debug").c_str());
    ::unlink((dir + "/.debug/prog.debug").c_str());
    ASSERT_EQ(::mkfifo((dir + fifo).c_str(), 0600), 0) << strerror(errno);
    // Its entry code: in the file, named from what the file itself has.
    EXPECT_EQ(InChildWithin(5, [&] {
                Symbolizer s({Mapping{0x555555554000, 0x555555554000 + (1 << 20), 0, prog}});
                const std::string name = s.Symbolize(0x555555554000 + 0x1000);
                return name.empty() ? 1 : 0;
              }),
              0);
    // The resolver's search of the same file (a symbol: its tables).
    EXPECT_EQ(InChildWithin(5, [&] {
                absl::StatusOr<ResolvedLocation> r = ResolveLocation(
                    "nosuchname", {Mapping{0x555555554000, 0x555555554000 + (1 << 20), 0, prog}},
                    prog);
                return r.status().code() == absl::StatusCode::kNotFound ? 0 : 1;
              }),
              0);
  }
}

// ---- build-ids and names as input, against a real program ----

// libpfm-bts/BUILD: names_prog (gcc -g -O0, a PIE) and what binutils reads
// in it.
constexpr char kProg[] = "libpfm-bts/names_prog";
constexpr char kProgSource[] = "libpfm-bts/testdata/names_prog.c";

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string RealPath(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) != nullptr ? buf : p;
}

struct NmSymbol {
  uint64_t value = 0;
  uint64_t size = 0;
};

// `nm -S`: "0000000000001177 0000000000000042 T pfm_names_work".
std::map<std::string, NmSymbol> Nm() {
  std::map<std::string, NmSymbol> out;
  std::istringstream in(Slurp(std::string(kProg) + ".nm"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string value, size, type, name;
    if (!(f >> value >> size >> type >> name)) continue;
    out[name] = {std::stoull(value, nullptr, 16), std::stoull(size, nullptr, 16)};
  }
  return out;
}

// `readelf --debug-dump=decodedline` rows of names_prog.c that begin a
// statement: line -> ELF addresses.
std::map<int, std::vector<uint64_t>> StmtLines() {
  std::map<int, std::vector<uint64_t>> out;
  std::istringstream in(Slurp(std::string(kProg) + ".lines"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::vector<std::string> w;
    for (std::string t; f >> t;) w.push_back(t);
    if (w.size() < 4 || w[0] != "names_prog.c" || w.back() != "x" ||
        w[2].rfind("0x", 0) != 0)
      continue;
    out[std::stoi(w[1])].push_back(std::stoull(w[2], nullptr, 16));
  }
  return out;
}

// The line of names_prog.c that carries `marker`.
int MarkerLine(const std::string& marker) {
  std::istringstream in(Slurp(kProgSource));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(marker) != std::string::npos && line.find("/*") != 0) return n;
  return 0;
}

// `names_prog wait`, running, and the addresses it printed.
class RunningProg {
 public:
  explicit RunningProg(const char* path = kProg) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      execl(path, path, "wait", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    FILE* f = fdopen(fds[0], "r");
    char line[256];
    while (f != nullptr && printed_.size() < 3 && fgets(line, sizeof(line), f) != nullptr) {
      const std::string l(line);
      const size_t eq = l.find('=');
      if (eq != std::string::npos)
        printed_[l.substr(0, eq)] = std::stoull(l.substr(eq + 1), nullptr, 16);
    }
    if (f != nullptr) fclose(f);
  }
  ~RunningProg() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // "main", "pfm_names_work", "write" -> the address the program printed.
  uint64_t printed(const std::string& name) const {
    auto it = printed_.find(name);
    return it == printed_.end() ? 0 : it->second;
  }

 private:
  pid_t pid_ = -1;
  std::map<std::string, uint64_t> printed_;
};

class NamesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(prog_.pid(), 0);
    ASSERT_NE(prog_.printed("write"), 0u) << "names_prog did not print its addresses";
    absl::StatusOr<std::vector<Mapping>> maps = ReadProcMaps(prog_.pid());
    ASSERT_TRUE(maps.ok()) << maps.status();
    maps_ = *maps;
    exe_ = RealPath(kProg);
    nm_ = Nm();
    ASSERT_EQ(nm_.count("main"), 1u);
    bias_ = prog_.printed("main") - nm_["main"].value;
  }
  absl::StatusOr<ResolvedLocation> Resolve(const std::string& text,
                                           LocationUse use = LocationUse::kCode) {
    return ResolveLocation(text, maps_, exe_, use);
  }

  RunningProg prog_;
  std::vector<Mapping> maps_;
  std::string exe_;
  std::map<std::string, NmSymbol> nm_;
  uint64_t bias_ = 0;
};

TEST(ParseCodeLocation, TellsAddressesSymbolsAndLinesApart) {
  absl::StatusOr<CodeLocation> l = ParseCodeLocation("0x401000");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->kind, CodeLocation::Kind::kAddress);
  EXPECT_EQ(l->addr, 0x401000u);
  l = ParseCodeLocation("4096");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->addr, 4096u);
  l = ParseCodeLocation("main");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->kind, CodeLocation::Kind::kSymbol);
  EXPECT_EQ(l->symbol, "main");
  EXPECT_EQ(l->offset, 0u);
  l = ParseCodeLocation("sym+0x10");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->symbol, "sym");
  EXPECT_EQ(l->offset, 0x10u);
  l = ParseCodeLocation("sym+16");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->offset, 16u);
  l = ParseCodeLocation("pfm::Foo");  // "::Foo" is no line number
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->kind, CodeLocation::Kind::kSymbol);
  l = ParseCodeLocation("operator+");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->symbol, "operator+");
  l = ParseCodeLocation("src/prog.c:42");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->kind, CodeLocation::Kind::kLine);
  EXPECT_EQ(l->file, "src/prog.c");
  EXPECT_EQ(l->line, 42);
  for (const char* bad : {"", "0xzz", "12ab", "prog.c:0", "prog.c:4x", ":42", "a b",
                          "sym+0xg", "prog.c:99999999999"})
    EXPECT_EQ(ParseCodeLocation(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  EXPECT_FALSE(ParseCodeLocation(std::string(kMaxLocationBytes + 1, 'f')).ok());
}

TEST_F(NamesTest, FunctionsResolveWhereTheProgramSeesThem) {
  for (const char* name : {"main", "pfm_names_work", "write"}) {
    absl::StatusOr<ResolvedLocation> r = Resolve(name);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    EXPECT_EQ(r->addr, prog_.printed(name)) << name;
  }
  absl::StatusOr<ResolvedLocation> m = Resolve("main");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->path, exe_);
  EXPECT_EQ(m->elf_addr, nm_["main"].value);
  EXPECT_EQ(m->size, nm_["main"].size);
  absl::StatusOr<ResolvedLocation> w = Resolve("write");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(Contains(w->path, "libc.so")) << w->path;
}

TEST_F(NamesTest, StaticFunctionsAndDataObjects) {
  absl::StatusOr<ResolvedLocation> r = Resolve("twice");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addr, bias_ + nm_["twice"].value);
  r = Resolve("pfm_names_counter", LocationUse::kData);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addr, bias_ + nm_["pfm_names_counter"].value);
  // A variable is no place for an execute breakpoint, nor a line for a
  // watchpoint.
  EXPECT_EQ(Resolve("pfm_names_counter").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Resolve("names_prog.c:20", LocationUse::kData).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NamesTest, OffsetsStayInsideTheSymbol) {
  const NmSymbol work = nm_["pfm_names_work"];
  ASSERT_GT(work.size, 4u);
  absl::StatusOr<ResolvedLocation> r = Resolve("pfm_names_work+0x4");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addr, prog_.printed("pfm_names_work") + 4);
  char last[64];
  snprintf(last, sizeof(last), "pfm_names_work+%llu",
           static_cast<unsigned long long>(work.size - 1));
  EXPECT_TRUE(Resolve(last).ok());
  snprintf(last, sizeof(last), "pfm_names_work+%llu", static_cast<unsigned long long>(work.size));
  r = Resolve(last);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(r.status().message()), "beyond pfm_names_work"))
      << r.status();
}

TEST_F(NamesTest, SourceLinesTakeTheLowestStatementAddressAsGdbDoes) {
  const std::map<int, std::vector<uint64_t>> lines = StmtLines();
  const int loop = MarkerLine("NAMES_LINE_LOOP");
  ASSERT_GT(loop, 0);
  ASSERT_EQ(lines.count(loop), 1u);
  const std::vector<uint64_t>& at = lines.at(loop);
  // A for statement is code in several places: init, test, increment.
  ASSERT_GE(at.size(), 2u) << "the loop line has one address: nothing to choose";
  const uint64_t lowest = *std::min_element(at.begin(), at.end());
  for (const std::string file : {"names_prog.c", "testdata/names_prog.c"}) {
    absl::StatusOr<ResolvedLocation> r = Resolve(file + ":" + std::to_string(loop));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->addr, bias_ + lowest) << file;
    EXPECT_TRUE(Contains(r->description, "pfm_names_work+")) << r->description;
  }
  // The line a function opens on is its first instruction.
  absl::StatusOr<ResolvedLocation> r =
      Resolve("names_prog.c:" + std::to_string(MarkerLine("NAMES_LINE_TWICE")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addr, bias_ + nm_["twice"].value);
  // A line without code moves to the next one with some.
  const int empty = MarkerLine("NAMES_LINE_NO_CODE");
  const int after = MarkerLine("NAMES_LINE_AFTER_NO_CODE");
  ASSERT_EQ(lines.count(empty), 0u);
  ASSERT_EQ(lines.count(after), 1u);
  r = Resolve("names_prog.c:" + std::to_string(empty));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addr, bias_ + *std::min_element(lines.at(after).begin(), lines.at(after).end()));
  EXPECT_TRUE(Contains(r->description, "no code there: line " + std::to_string(after)))
      << r->description;
}

TEST_F(NamesTest, UnknownNamesAreNotFoundNamingWhatWasSearched) {
  absl::StatusOr<ResolvedLocation> r = Resolve("pfm_no_such_function");
  ASSERT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  const std::string msg(r.status().message());
  EXPECT_EQ(msg.rfind("no symbol 'pfm_no_such_function' in " + exe_ +
                          " (and its libraries searched: ",
                      0),
            0u)
      << msg;
  EXPECT_TRUE(Contains(msg, "libc.so")) << msg;
  r = Resolve("no_such_file.c:3");
  ASSERT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_TRUE(Contains(std::string(r.status().message()), "no source file 'no_such_file.c'"));
  r = Resolve("names_prog.c:100000");
  ASSERT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_TRUE(Contains(std::string(r.status().message()), "no code at or after line 100000"));
}

#if defined(__x86_64__)
TEST_F(NamesTest, RefusesAnIfuncItsResolverIsNotTheFunction) {
  // glibc picks strlen's implementation (SSE2, AVX2, EVEX) at load time.
  absl::StatusOr<ResolvedLocation> r = Resolve("strlen");
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_TRUE(Contains(std::string(r.status().message()), "IFUNC")) << r.status();
}
#endif

TEST_F(NamesTest, TheLoadBiasComesFromTheMappings) {
  // The same file mapped 1 MiB higher: every name moves with it.
  std::vector<Mapping> moved = maps_;
  const uint64_t delta = 1 << 20;
  for (Mapping& m : moved)
    if (m.path == exe_) {
      m.start += delta;
      m.end += delta;
    }
  absl::StatusOr<ResolvedLocation> r = ResolveLocation("main", moved, exe_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addr, prog_.printed("main") + delta);
  EXPECT_EQ(r->elf_addr, nm_["main"].value);
  // With the program alone, a libc name is not found.
  std::vector<Mapping> alone;
  for (const Mapping& m : maps_)
    if (m.path == exe_) alone.push_back(m);
  r = ResolveLocation("write", alone, exe_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(r.status().message()), "no symbol 'write' in " + exe_);
}

// Debian's programs have no symbol table; `main` (for --start main, a
// breakpoint on main) is the address _start hands __libc_start_main.
TEST(StrippedMain, IsFoundFromTheEntryCodeInPieAndNonPiePrograms) {
  for (const char* path :
       {"libpfm-bts/names_prog_stripped", "libpfm-bts/names_prog_nopie_stripped"}) {
    SCOPED_TRACE(path);
    RunningProg prog(path);
    ASSERT_GT(prog.pid(), 0);
    ASSERT_NE(prog.printed("main"), 0u) << "the program did not print its addresses";
    absl::StatusOr<std::vector<Mapping>> maps = ReadProcMaps(prog.pid());
    ASSERT_TRUE(maps.ok()) << maps.status();
    const std::string exe = RealPath(path);
    absl::StatusOr<ResolvedLocation> r = ResolveLocation("main", *maps, exe);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->addr, prog.printed("main"));
    EXPECT_EQ(r->path, exe);
    EXPECT_EQ(r->size, 0u);
    EXPECT_TRUE(Contains(r->description, "__libc_start_main")) << r->description;
    // Only main: other functions of a stripped program have no name.
    EXPECT_EQ(ResolveLocation("pfm_names_work", *maps, exe).status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(ResolveLocation("main+0x1", *maps, exe).status().code(),
              absl::StatusCode::kNotFound);
    // Not for a watchpoint: main is code.
    EXPECT_EQ(ResolveLocation("main", *maps, exe, LocationUse::kData).status().code(),
              absl::StatusCode::kNotFound);
  }
}

TEST(StrippedMain, StartCodeThatIsNotGlibcsIsNotGuessed) {
  // /bin/true's real start code, with the call after `lea ...,%rdi` turned
  // into a nop: no main.
  const std::string copy = ::testing::TempDir() + "/true_no_call";
  std::string bytes = Slurp("/bin/true");
  ASSERT_FALSE(bytes.empty());
  const std::string lea_call("\x48\x8d\x3d", 3);
  size_t at = std::string::npos;
  for (size_t i = bytes.find(lea_call); i != std::string::npos; i = bytes.find(lea_call, i + 1))
    if (static_cast<uint8_t>(bytes[i + 7]) == 0xff && bytes[i + 8] == 0x15) {
      at = i;
      break;
    }
  ASSERT_NE(at, std::string::npos) << "/bin/true's _start is not glibc's";
  bytes[at + 7] = static_cast<char>(0x90);
  bytes[at + 8] = static_cast<char>(0x90);
  FILE* f = fopen(copy.c_str(), "w");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  fclose(f);
  // Mapped where its text would be: one executable mapping over the file.
  const std::vector<Mapping> maps = {Mapping{0x555555554000, 0x555555554000 + (1 << 20), 0,
                                             RealPath(copy)}};
  absl::StatusOr<ResolvedLocation> r = ResolveLocation("main", maps, RealPath(copy));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
}

TEST(BuildId, ReadsTheGnuNoteAsReadelfDoes) {
  const std::string notes = Slurp(std::string(kProg) + ".notes");
  const size_t at = notes.find("Build ID: ");
  ASSERT_NE(at, std::string::npos) << notes;
  std::string want = notes.substr(at + 10);
  want = want.substr(0, want.find_first_of("\r\n"));
  const std::string id = ReadBuildId(kProg);
  EXPECT_EQ(id.size(), 20u);
  EXPECT_EQ(BuildIdHex(id), want);
  EXPECT_EQ(ReadBuildId("/nonexistent/file"), "");
  EXPECT_EQ(ReadBuildId("/proc/self/maps"), "");  // not ELF
}

TEST(BuildId, AddBuildIdsReadsFilesOnlyAndMismatchesAreNamed) {
  std::vector<Mapping> maps = {Mapping{0x1000, 0x2000, 0, RealPath(kProg)},
                               Mapping{0x3000, 0x4000, 0, "[vdso]"},
                               Mapping{0x5000, 0x6000, 0, RealPath(kProg) + " (deleted)"},
                               Mapping{0x7000, 0x8000, 0, ""}};
  AddBuildIds(&maps);
  EXPECT_EQ(maps[0].build_id, ReadBuildId(kProg));
  EXPECT_FALSE(maps[0].build_id.empty());
  EXPECT_EQ(maps[1].build_id, "");
  EXPECT_EQ(maps[2].build_id, "");
  EXPECT_EQ(maps[3].build_id, "");
  EXPECT_TRUE(BuildIdMismatches(maps).empty());
  maps[0].build_id[0] ^= 1;  // as if recorded from another build
  const std::vector<std::string> w = BuildIdMismatches(maps);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(Contains(w[0], BuildIdHex(maps[0].build_id) + " when recorded, " +
                                 BuildIdHex(ReadBuildId(kProg)) + " now"))
      << w[0];
}

TEST_F(NamesTest, SymbolizerLeavesAChangedBinaryUnnamed) {
  std::vector<Mapping> recorded = maps_;
  for (Mapping& m : recorded) m.build_id = m.path == exe_ ? ReadBuildId(exe_) : "";
  const uint64_t main_addr = prog_.printed("main");
  {
    Symbolizer s(recorded);
    EXPECT_EQ(s.Symbolize(main_addr), "main");
    EXPECT_TRUE(s.warnings().empty());
  }
  for (Mapping& m : recorded)
    if (m.path == exe_) m.build_id[0] ^= 1;
  Symbolizer s(recorded);
  const std::string name = s.Symbolize(main_addr);
  EXPECT_EQ(name.rfind("[" + exe_ + "+0x", 0), 0u) << name;
  ASSERT_EQ(s.warnings().size(), 1u);
  EXPECT_TRUE(Contains(s.warnings()[0], "the file changed since the recording"))
      << s.warnings()[0];
}

}  // namespace
}  // namespace pfm
