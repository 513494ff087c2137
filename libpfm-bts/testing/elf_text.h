// Where a loader places a file's code, for tests that symbolize a real ELF
// file without running it (symbolizer_test, report_test): its executable
// PT_LOAD segment, read with libelf (not with the symbolizer under test).
#ifndef PFM_LIBPFM_BTS_TESTING_ELF_TEXT_H_
#define PFM_LIBPFM_BTS_TESTING_ELF_TEXT_H_

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>

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

}  // namespace pfm::testing

#endif  // PFM_LIBPFM_BTS_TESTING_ELF_TEXT_H_
