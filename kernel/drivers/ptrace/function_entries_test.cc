#include "kernel/drivers/ptrace/function_entries.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace pfm {
namespace {

bool Has(const std::vector<uint64_t>& v, uint64_t a) {
  return std::binary_search(v.begin(), v.end(), a);
}

// The test program (static, not PIE, with symbols) prints where spin() is.
TEST(FunctionEntries, SymbolsAndEntryPointOfAProgram) {
  const std::string prog = "kernel/drivers/ptrace/testdata_loop_bin";
  const std::string out = std::string(getenv("TEST_TMPDIR")) + "/spin";
  const std::string cmd = prog + " 0 " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream f(out);
  std::string hex;
  f >> hex;
  const uint64_t spin = std::stoull(hex, nullptr, 16);
  ElfCode code;
  ASSERT_TRUE(ReadElfCode(prog, &code));
  EXPECT_TRUE(Has(code.entries, spin)) << hex;
  EXPECT_TRUE(std::is_sorted(code.entries.begin(), code.entries.end()));
  EXPECT_FALSE(code.loads.empty());
  // A mapping of the whole file at its own addresses maps spin where it is.
  std::vector<uint64_t> mapped;
  for (const ElfCode::Load& l : code.loads) {
    Mapping m;
    m.offset = l.offset & ~uint64_t{0xfff};
    m.start = l.vaddr - (l.offset - m.offset);
    m.end = l.vaddr + l.filesz;
    MappedEntries(code, m, &mapped);
  }
  EXPECT_TRUE(std::find(mapped.begin(), mapped.end(), spin) != mapped.end());
}

// A stripped program: its functions come from .eh_frame_hdr. Debian's ls
// has no .symtab and exports no function of its own, yet has hundreds of
// functions with unwind tables; every entry lies in its text, and the
// load bias of a mapping moves them all.
TEST(FunctionEntries, StrippedProgramsFunctionsFromUnwindTables) {
  ElfCode code;
  ASSERT_TRUE(ReadElfCode("/usr/bin/ls", &code));
  EXPECT_GT(code.entries.size(), 200u);
  Mapping text;
  for (const ElfCode::Load& l : code.loads) {
    if (code.entries.front() >= l.vaddr && code.entries.front() < l.vaddr + l.filesz) {
      text.offset = l.offset & ~uint64_t{0xfff};
      text.start = 0x555555554000 + l.vaddr - (l.offset - text.offset);
      text.end = 0x555555554000 + l.vaddr + l.filesz;
    }
  }
  ASSERT_NE(text.end, 0u);
  std::vector<uint64_t> mapped;
  MappedEntries(code, text, &mapped);
  ASSERT_FALSE(mapped.empty());
  EXPECT_EQ(mapped.front(), 0x555555554000 + code.entries.front());
  for (uint64_t a : mapped) {
    EXPECT_GE(a, text.start);
    EXPECT_LT(a, text.end);
  }
  // A mapping of another part of the file maps none of the text's entries.
  Mapping other = text;
  other.offset = 1ull << 40;
  std::vector<uint64_t> none;
  MappedEntries(code, other, &none);
  EXPECT_TRUE(none.empty());
}

TEST(FunctionEntries, NotElfOrMissingIsFalseAndEmpty) {
  ElfCode code;
  EXPECT_FALSE(ReadElfCode("/etc/passwd", &code));
  EXPECT_TRUE(code.entries.empty());
  EXPECT_FALSE(ReadElfCode("/nonexistent/file", &code));
  EXPECT_FALSE(ReadElfCode("/tmp", &code));
}

}  // namespace
}  // namespace pfm
