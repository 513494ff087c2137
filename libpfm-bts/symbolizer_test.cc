#include "pfm/symbolizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace pfm
