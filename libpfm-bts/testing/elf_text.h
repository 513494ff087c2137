// Where a loader places a file's code, and where its functions are by its
// unwind table, for tests that symbolize a real ELF file without running it
// (symbolizer_test, report_test): read with libelf and binutils' readelf,
// not with the symbolizer under test.
#ifndef PFM_LIBPFM_BTS_TESTING_ELF_TEXT_H_
#define PFM_LIBPFM_BTS_TESTING_ELF_TEXT_H_

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernel/uapi/proc_maps.h"

namespace pfm::testing {

// The file's executable segment mapped at `bias` + its page-aligned vaddr,
// as an mmap of it would be; *lo and *hi its ELF addresses (the page-aligned
// start, the end of its file bytes). Nothing if the file has no such
// segment or is not ELF.
inline std::optional<Mapping> TextMapping(const std::string& path, uint64_t bias, uint64_t* lo,
                                          uint64_t* hi) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  GElf_Phdr text{};
  if (elf_version(EV_CURRENT) != EV_NONE) {
    if (Elf* elf = elf_begin(fd, ELF_C_READ, nullptr)) {
      size_t phnum = 0;
      if (elf_getphdrnum(elf, &phnum) == 0) {
        for (size_t i = 0; i < phnum; ++i) {
          GElf_Phdr ph;
          if (gelf_getphdr(elf, static_cast<int>(i), &ph) != nullptr && ph.p_type == PT_LOAD &&
              (ph.p_flags & PF_X) != 0)
            text = ph;
        }
      }
      elf_end(elf);
    }
  }
  ::close(fd);
  if (text.p_memsz == 0) return std::nullopt;
  *lo = text.p_vaddr & ~uint64_t{0xfff};
  *hi = text.p_vaddr + text.p_filesz;
  return Mapping{bias + *lo, bias + *hi, text.p_offset & ~uint64_t{0xfff}, path};
}

// The functions .eh_frame's FDEs cover, by binutils' readelf (`--debug-dump=
// frames`: "pc=START..END" per FDE): [START, END).
inline std::vector<std::pair<uint64_t, uint64_t>> ReadelfFdes(const std::string& path) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  const std::string cmd = "/usr/bin/readelf --debug-dump=frames '" + path + "' 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char line[4096];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    const char* pc = std::strstr(line, " FDE ");
    if (pc == nullptr || (pc = std::strstr(pc, "pc=")) == nullptr) continue;
    char* end = nullptr;
    const uint64_t a = std::strtoull(pc + 3, &end, 16);
    if (end == nullptr || std::strncmp(end, "..", 2) != 0) continue;
    const uint64_t b = std::strtoull(end + 2, nullptr, 16);
    if (b > a) out.emplace_back(a, b);
  }
  ::pclose(p);
  return out;
}

}  // namespace pfm::testing

#endif  // PFM_LIBPFM_BTS_TESTING_ELF_TEXT_H_
