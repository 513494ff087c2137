#include "kernel/drivers/ptrace/function_entries.h"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace pfm {
namespace {

// DW_EH_PE_* (LSB 5.0, "DWARF Exception Header Encoding").
constexpr uint8_t kUdata4 = 0x03;
constexpr uint8_t kSdata4 = 0x0b;
constexpr uint8_t kUdata8 = 0x04;
constexpr uint8_t kSdata8 = 0x0c;
constexpr uint8_t kDatarelSdata4 = 0x3b;
constexpr uint8_t kOmit = 0xff;

// Bytes of an encoded pointer of the formats .eh_frame_hdr uses; 0 for
// others.
size_t EncodedSize(uint8_t enc) {
  if (enc == kOmit) return 0;
  switch (enc & 0x0f) {
    case kUdata4:
    case kSdata4: return 4;
    case kUdata8:
    case kSdata8: return 8;
    default: return 0;
  }
}

void EhFrameHdrEntries(const uint8_t* p, size_t n, uint64_t hdr_vaddr,
                       std::vector<uint64_t>* out) {
  if (n < 4 || p[0] != 1) return;
  const uint8_t ptr_enc = p[1], count_enc = p[2], table_enc = p[3];
  const size_t ptr_size = EncodedSize(ptr_enc);
  if (ptr_size == 0 || table_enc != kDatarelSdata4 ||
      (count_enc != kUdata4 && count_enc != kSdata4))
    return;
  size_t off = 4 + ptr_size;
  if (off + 4 > n) return;
  uint32_t count = 0;
  std::memcpy(&count, p + off, 4);
  off += 4;
  if (count > (n - off) / 8) return;  // a table longer than the section
  for (uint32_t i = 0; i < count; ++i, off += 8) {
    int32_t rel = 0;
    std::memcpy(&rel, p + off, 4);
    out->push_back(hdr_vaddr + static_cast<int64_t>(rel));
  }
}

}  // namespace

bool ReadElfCode(const std::string& path, ElfCode* out) {
  *out = ElfCode();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  elf_version(EV_CURRENT);
  Elf* e = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  bool ok = false;
  GElf_Ehdr eh;
  if (e != nullptr && elf_kind(e) == ELF_K_ELF && gelf_getehdr(e, &eh) != nullptr) {
    ok = true;
    size_t raw_size = 0;
    const char* raw = elf_rawfile(e, &raw_size);
    size_t nph = 0;
    elf_getphdrnum(e, &nph);
    for (size_t i = 0; i < nph; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(e, static_cast<int>(i), &ph) == nullptr) continue;
      if (ph.p_type == PT_LOAD) out->loads.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz});
      if (ph.p_type == PT_GNU_EH_FRAME && raw != nullptr && ph.p_offset < raw_size &&
          ph.p_filesz <= raw_size - ph.p_offset)
        EhFrameHdrEntries(reinterpret_cast<const uint8_t*>(raw) + ph.p_offset, ph.p_filesz,
                          ph.p_vaddr, &out->entries);
    }
    if (eh.e_entry != 0) out->entries.push_back(eh.e_entry);
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(e, scn)) != nullptr) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr) continue;
      if (sh.sh_type == SHT_INIT_ARRAY || sh.sh_type == SHT_FINI_ARRAY ||
          sh.sh_type == SHT_PREINIT_ARRAY) {
        // Constructors and destructors, called through these pointers by
        // the dynamic linker (crtstuff's frame_dummy has no unwind table).
        // A PIE's slots hold the RELATIVE relocations' addends: vaddrs.
        Elf_Data* data = elf_getdata(scn, nullptr);
        if (data == nullptr || data->d_buf == nullptr) continue;
        for (size_t off = 0; off + 8 <= data->d_size; off += 8) {
          uint64_t v = 0;
          std::memcpy(&v, static_cast<const char*>(data->d_buf) + off, 8);
          if (v != 0 && v != ~uint64_t{0}) out->entries.push_back(v);
        }
        continue;
      }
      if (sh.sh_type == SHT_DYNAMIC) {  // DT_INIT, DT_FINI (crti's _init, _fini)
        Elf_Data* data = elf_getdata(scn, nullptr);
        if (data == nullptr || sh.sh_entsize == 0) continue;
        for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; ++i) {
          GElf_Dyn dyn;
          if (gelf_getdyn(data, static_cast<int>(i), &dyn) == nullptr) break;
          if ((dyn.d_tag == DT_INIT || dyn.d_tag == DT_FINI) && dyn.d_un.d_ptr != 0)
            out->entries.push_back(dyn.d_un.d_ptr);
        }
        continue;
      }
      if (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr || sh.sh_entsize == 0) continue;
      const size_t count = sh.sh_size / sh.sh_entsize;
      for (size_t i = 0; i < count; ++i) {
        GElf_Sym sym;
        if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) break;
        if (GELF_ST_TYPE(sym.st_info) == STT_FUNC && sym.st_shndx != SHN_UNDEF &&
            sym.st_value != 0)
          out->entries.push_back(sym.st_value);
      }
    }
  }
  if (e != nullptr) elf_end(e);
  close(fd);
  std::sort(out->entries.begin(), out->entries.end());
  out->entries.erase(std::unique(out->entries.begin(), out->entries.end()), out->entries.end());
  return ok;
}

void MappedEntries(const ElfCode& code, const Mapping& m, std::vector<uint64_t>* out) {
  const uint64_t len = m.end - m.start;
  for (const ElfCode::Load& l : code.loads) {
    // The part of this segment's file bytes that `m` maps.
    const uint64_t lo = std::max(l.offset, m.offset);
    const uint64_t hi = std::min(l.offset + l.filesz, m.offset + len);
    if (lo >= hi) continue;
    const uint64_t vlo = l.vaddr + (lo - l.offset), vhi = l.vaddr + (hi - l.offset);
    auto it = std::lower_bound(code.entries.begin(), code.entries.end(), vlo);
    for (; it != code.entries.end() && *it < vhi; ++it)
      out->push_back(m.start + (*it - l.vaddr + l.offset - m.offset));
  }
}

}  // namespace pfm
