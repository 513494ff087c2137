// Where the functions of an ELF file start, for the gates of soft BTS's
// address filters (soft_bts.h, SoftBtsOptions::filter_ranges): a task that
// runs untraced outside a filter comes back into it by a call to one of its
// functions, so the tracer plants an int3 on each function entry inside the
// filter (docs/host_drivers.md, "Address filters").
//
// Read with elfutils' libelf: FUNC symbols of .symtab and .dynsym (defined,
// non-zero), the program's entry point (e_entry), DT_INIT and DT_FINI, the
// pointers of .init_array, .fini_array and .preinit_array (a PIE's slots
// hold their relocations' addends), and the initial location
// of every FDE in .eh_frame_hdr's binary-search table, which names the
// functions of a stripped program too (gcc and clang emit unwind tables for
// every function on x86-64). Layout facts from the LSB 5.0 Core
// specification, "Exception Frames" (.eh_frame_hdr: version 1, the
// encodings of eh_frame_ptr, fde_count and the table, then eh_frame_ptr,
// fde_count and fde_count {initial_location, fde} pairs; the table is
// DW_EH_PE_datarel | DW_EH_PE_sdata4 (0x3b), relative to the section).
#ifndef PFM_KERNEL_DRIVERS_PTRACE_FUNCTION_ENTRIES_H_
#define PFM_KERNEL_DRIVERS_PTRACE_FUNCTION_ENTRIES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernel/uapi/proc_maps.h"

namespace pfm {

struct ElfCode {
  // Function entries in the file's virtual addresses, sorted, unique.
  std::vector<uint64_t> entries;
  // The PT_LOAD segments: file offset of a virtual address.
  struct Load {
    uint64_t vaddr = 0;
    uint64_t offset = 0;
    uint64_t filesz = 0;
  };
  std::vector<Load> loads;
};

// Reads `path`. False when it cannot be opened or is not ELF (*out empty).
bool ReadElfCode(const std::string& path, ElfCode* out);

// The entries of `code` that `m` (a mapping of the same file) maps, as
// addresses of the process; appended to *out.
void MappedEntries(const ElfCode& code, const Mapping& m, std::vector<uint64_t>* out);

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_PTRACE_FUNCTION_ENTRIES_H_
