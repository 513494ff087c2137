// Addresses of a traced process -> "function+0xoff", and back: names a user
// gives ("main", "prog.c:42", "write+0x10") -> addresses in a process
// (ResolveLocation), through elfutils' libdwfl (symbol tables), libdw (DWARF
// line tables) and libelf (program headers, build-id notes).
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_SYMBOLIZER_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_SYMBOLIZER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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

  // One line per file left unread because its build-id is not the one
  // recorded with its mapping (Mapping::build_id): the binary was replaced
  // since the recording, and its symbols would name the wrong code. Its
  // addresses then read "[path+0xoff]". Filled as files are opened.
  const std::vector<std::string>& warnings() const { return warnings_; }

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
  std::vector<std::string> warnings_;
};

// ---- build-ids ----

// The GNU build-id (the NT_GNU_BUILD_ID note's bytes) of the ELF file at
// `path`; "" when the file cannot be read, is not ELF, has no such note or
// one over kMaxBuildIdBytes.
std::string ReadBuildId(const std::string& path);

// "c89156eb..." (lower-case hex) of raw build-id bytes.
std::string BuildIdHex(absl::string_view id);

// Sets each mapping's build_id from its file as it is now (one read per
// distinct path), for a trace's MAPS block at record time. Paths that do not
// start with '/' (anonymous, [vdso]) and files the kernel calls
// " (deleted)" (the file at that name is another one) get none.
void AddBuildIds(std::vector<Mapping>* maps);

// "PATH: build-id X when recorded, Y now (the file changed since the
// recording)" for each distinct path whose recorded build-id differs from
// the file's now ("none" when the file has none or cannot be read); nothing
// for mappings recorded without one.
std::vector<std::string> BuildIdMismatches(const std::vector<Mapping>& maps);

// ---- names as input (pfmctl --breakpoint) ----

// A code or data location as a user writes it:
//   0x401000, 4198400      an address                        kAddress
//   main, pfm::Foo, write  a symbol (C++ names demangled, or  kSymbol
//                          the mangled name; "pfm::Foo"
//                          matches "pfm::Foo(int)")
//   main+0x10, main+16     an offset into it                 kSymbol
//   prog.c:42, src/a.c:42  a source line (DWARF line table)  kLine
// A name ending in ":DIGITS" is a line; C++'s "ns::f" is not ("::f").
struct CodeLocation {
  enum class Kind { kAddress, kSymbol, kLine };
  Kind kind = Kind::kAddress;
  uint64_t addr = 0;    // kAddress
  std::string symbol;   // kSymbol
  uint64_t offset = 0;  // kSymbol: the +OFF
  std::string file;     // kLine
  int line = 0;         // kLine, >= 1
};

// INVALID_ARGUMENT naming `text` for an empty name, a bad +OFF or line
// number, a name over kMaxLocationBytes, or whitespace or control bytes.
absl::StatusOr<CodeLocation> ParseCodeLocation(absl::string_view text);
inline constexpr size_t kMaxLocationBytes = 512;

// What a name resolved to.
struct ResolvedLocation {
  uint64_t addr = 0;      // in the process's address space
  std::string path;       // the file it lies in
  uint64_t elf_addr = 0;  // the same place in the file's own vaddrs
  uint64_t size = 0;      // the symbol's size (kSymbol), else 0
  // How it was found, for messages: "main in /usr/bin/prog",
  // "prog.c:42 (main+0x8) in /p/prog".
  std::string description;
};

// Code (an execute breakpoint: functions, source lines) or data (a
// watchpoint: objects; no lines).
enum class LocationUse { kCode, kData };

// Resolves `text` (ParseCodeLocation) in a process whose executable file
// mappings are `maps` (ReadProcMaps' form) and whose program is `exe` (its
// /proc/PID/exe; "" = the file of the lowest mapping). Files are searched
// in the order the dynamic linker looks symbols up: the program, then the
// other files in address order, the dynamic linker itself (the program's
// PT_INTERP) last; the first file that has the name wins. Each file's load
// bias comes from its mapping, as for Symbolize.
//
// A symbol: functions (STT_FUNC, or untyped) for kCode, objects for kData;
// defined, not an import. Aliases at one address are one match; several
// addresses in one file (static functions of one name in two sources) are
// refused, listing them, unless exactly one is global. +OFF must lie within
// the symbol's size (INVALID_ARGUMENT otherwise). An IFUNC is refused: its
// address is the resolver that picks the implementation at run time.
//
// A line: the line table entries of FILE (the name or a trailing part of its
// path, e.g. "prog.c", "src/prog.c") that begin a statement; a line with no
// code moves to the next line that has some, as gdb does. Of several
// addresses the lowest is taken (gdb's choice) when they are all in one
// function; a line in several functions (inlined code) is refused, listing
// them.
//
// An address is returned as is (no file needed; path and description say
// what covers it, if anything).
//
// NOT_FOUND "no symbol 'foo' in /p/prog (and its libraries searched:
// /lib/.../libc.so.6, ...)" (or "no line ..." / "no source file ...") when
// no file has it; a code location must also lie in an executable mapping.
absl::StatusOr<ResolvedLocation> ResolveLocation(absl::string_view text,
                                                 const std::vector<Mapping>& maps,
                                                 const std::string& exe,
                                                 LocationUse use = LocationUse::kCode);

}  // namespace pfm

#endif  // PFM_LIBPFM_BTS_INCLUDE_PFM_SYMBOLIZER_H_
