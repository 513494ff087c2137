// Addresses of a traced process -> "function+0xoff", through elfutils'
// libdwfl (symbol tables) and libelf (program headers).
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_SYMBOLIZER_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_SYMBOLIZER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernel/uapi/proc_maps.h"

struct Dwfl;
struct Dwfl_Module;

namespace pfm {

// The executable, file-backed mappings of /proc/PID/maps (pid 0 = self), in
// address order: kernel/uapi/proc_maps.h's ParseProcMaps (INVALID_ARGUMENT
// naming a malformed line, or for more than kMaxMappings), then KeepFileBacked
// (pseudo-mappings such as [vdso] and anonymous ones left out, a
// " (deleted)" suffix stripped). NOT_FOUND if the process does not exist,
// PERMISSION_DENIED if its maps are not readable.
absl::StatusOr<std::vector<Mapping>> ReadProcMaps(pid_t pid);

// Not thread-safe. Each file is opened on the first address that falls in one
// of its mappings and kept open (with its symbol table) until destruction; a
// file that cannot be read is remembered as such and not retried.
class Symbolizer {
 public:
  // Mappings without a path (anonymous memory) or without bytes are left
  // out: there is no file to name; the others need not be file-backed
  // ("[vdso]" addresses show as "[[vdso]+0x...]").
  explicit Symbolizer(std::vector<Mapping> maps);
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // "function+0xoff", or "function" at offset 0, with C++ names demangled
  // (abi::__cxa_demangle: "pfm::Foo(int)+0x1c"; a name that does not demangle
  // is kept as is). The symbol comes from .symtab, else .dynsym (or a
  // separate debuginfo file libdwfl finds by build-id).
  // "[path+0xoff]" (offset in the file) when the address is mapped but no
  // symbol covers it or the file cannot be read; "[kernel]" for kernel
  // addresses (PFM_ADDR_IS_KERNEL); "" when the address is not mapped.
  // Works for ET_EXEC, PIE executables and shared objects: the load bias is
  // derived from the mapping (start, offset) and the file's PT_LOAD headers.
  std::string Symbolize(uint64_t addr);

  // Basename of the mapping's path ("libc.so.6"); "[kernel]" for kernel
  // addresses; "" if unmapped.
  std::string ModuleOf(uint64_t addr) const;

 private:
  const Mapping* Find(uint64_t addr) const;
  // The libdwfl module for `path`, reporting it on first use; null if the
  // file cannot be read (remembered).
  Dwfl_Module* ModuleFor(const Mapping& m);

  std::vector<Mapping> maps_;  // sorted by start
  struct DwflDeleter {
    void operator()(Dwfl* d) const;
  };
  std::unique_ptr<Dwfl, DwflDeleter> dwfl_;
  std::map<std::string, Dwfl_Module*> modules_;  // null = unreadable
};

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_SYMBOLIZER_H_
