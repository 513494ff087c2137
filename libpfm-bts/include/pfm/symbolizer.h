// Addresses of a traced process -> "function+0xoff", and back: names a user
// gives ("main", "prog.c:42", "write+0x10") -> addresses in a process
// (ResolveLocation), through elfutils' libdwfl (symbol tables), libdw (DWARF
// line tables) and libelf (program headers, build-id notes).
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_SYMBOLIZER_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_SYMBOLIZER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernel/uapi/proc_maps.h"

namespace pfm {

// The executable, file-backed mappings of /proc/PID/maps (pid 0 = self), in
// address order: kernel/uapi/proc_maps.h's ParseProcMaps (INVALID_ARGUMENT
// naming a malformed line, or for more than kMaxMappings), then KeepFileBacked
// (pseudo-mappings such as [vdso] and anonymous ones left out, a
// " (deleted)" suffix stripped). NOT_FOUND if the process does not exist,
// PERMISSION_DENIED if its maps are not readable.
absl::StatusOr<std::vector<Mapping>> ReadProcMaps(pid_t pid);

// The ELF files Symbolizers read, each read once however many Symbolizers
// map it. A trace's MAPS blocks (one per process and per exec) mostly map
// the same files (libc, the dynamic linker, the program), and libdwfl keeps
// every file it reads open (an fd and a mapping) until its Dwfl ends: one
// Symbolizer per block, each with files of its own, would hold blocks x
// files descriptors (300 blocks of 3 files: 900, near a usual
// RLIMIT_NOFILE of 1024).
//
// A file is read on its first use: its symbol table (a libdwfl module
// placed at the file's own ELF addresses; each mapping's load bias comes
// from the PT_LOAD headers, read then too) and its build-id. At most
// `max_open` files are held open; opening one more closes the least
// recently used, which is read again when it is needed again. A path that
// is not a regular ELF file (missing, unreadable, a directory, a device, a
// FIFO: paths come from trace files, which are input, and a FIFO is never
// opened in a way that waits for a writer) is remembered as unreadable and
// not retried. Nor is a file's separate debuginfo searched for when a path
// the search would open next to it (NAME.debug, .debug/NAME.debug, ...) is
// not a regular file.
//
// Not thread-safe; Symbolizers share one through a shared_ptr.
class SymbolFiles {
 public:
  static constexpr size_t kDefaultMaxOpen = 128;

  explicit SymbolFiles(size_t max_open = kDefaultMaxOpen);
  ~SymbolFiles();
  SymbolFiles(const SymbolFiles&) = delete;
  SymbolFiles& operator=(const SymbolFiles&) = delete;

  // Files held open now (each with one fd).
  size_t open_files() const { return lru_.size(); }

 private:
  friend class Symbolizer;
  struct File;
  // The file at `path`, read on first use (or again after it was closed).
  // Valid until the next Get.
  File& Get(const std::string& path);

  size_t max_open_;
  std::map<std::string, std::unique_ptr<File>> files_;
  std::list<File*> lru_;  // the open files, most recently used first
};

// Not thread-safe. Files are read through a SymbolFiles (its rules: each
// read on the first address that falls in one of its mappings, an
// unreadable one remembered as such).
class Symbolizer {
 public:
  // Mappings without a path (anonymous memory) or without bytes are left
  // out: there is no file to name; the others need not be file-backed
  // ("[vdso]" addresses show as "[[vdso]+0x...]"). `files` may be shared
  // with other Symbolizers (a trace's blocks, TraceSymbols); null gives
  // this one files of its own.
  explicit Symbolizer(std::vector<Mapping> maps,
                      std::shared_ptr<SymbolFiles> files = nullptr);
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // "function+0xoff", or "function" at offset 0, with C++ names demangled
  // (abi::__cxa_demangle: "pfm::Foo(int)+0x1c"; a name that does not demangle
  // is kept as is). The symbol comes from .symtab, else .dynsym (or a
  // separate debuginfo file libdwfl finds by build-id): the one
  // dwfl_module_addrinfo gives, found through an index of the file's
  // symbols made at its first lookup (symbolizer.cc, SymbolIndex) instead
  // of libdwfl's search of the whole table at every address.
  // "[path+0xoff]" (offset in the file) when the address is mapped but no
  // symbol covers it or the file cannot be read; "[kernel]" for kernel
  // addresses (PFM_ADDR_IS_KERNEL); "" when the address is not mapped.
  // Works for ET_EXEC, PIE executables and shared objects: the load bias is
  // derived from the mapping (start, offset) and the file's PT_LOAD headers.
  std::string Symbolize(uint64_t addr);

  // For an address no symbol names (Symbolize gave "[path+0xoff]"): the
  // function that holds it by the file's unwind table (.eh_frame, libdw's
  // CFI: an FDE covers every function a C or C++ compiler emits, stripped
  // or not), as "func@0x<its start, an ELF address as objdump and
  // addr2line print them>"; "" when no FDE covers it, the file cannot be
  // read, or a symbol names it. What `report` groups a stripped program's
  // branches by (docs/pfmctl.md).
  std::string UnnamedFunction(uint64_t addr);

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

  std::vector<Mapping> maps_;  // sorted by start
  std::shared_ptr<SymbolFiles> files_;
  // Per path, on its first use: whether the file may name addresses (no
  // build-id recorded, or the recorded one is the file's).
  std::map<std::string, bool> usable_;
  std::vector<std::string> warnings_;
};

// ---- build-ids ----

// The GNU build-id (the NT_GNU_BUILD_ID note's bytes) of the ELF file at
// `path`; "" when the file cannot be read, is not a regular file (a FIFO is
// not waited on), is not ELF, has no such note or one over
// kMaxBuildIdBytes.
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
