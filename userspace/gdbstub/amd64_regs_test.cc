#include "userspace/gdbstub/amd64_regs.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

namespace pfm::gdbstub {
namespace {

uint64_t At(const std::string& block, size_t offset, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, block.data() + offset, size);
  return v;
}

// An 80-bit x87 value into a 16-byte st_space slot.
void PutX87(user_fpregs_struct* fp, int slot, uint64_t mantissa, unsigned sign_exponent) {
  auto* p = reinterpret_cast<unsigned char*>(fp->st_space) + slot * 16;
  std::memcpy(p, &mantissa, 8);
  p[8] = sign_exponent & 0xff;
  p[9] = (sign_exponent >> 8) & 0xff;
}

const unsigned char* St(const user_fpregs_struct& fp) {
  return reinterpret_cast<const unsigned char*>(fp.st_space);
}

template <typename T>
void FillRandom(T* t, uint32_t seed) {
  std::mt19937 rng(seed);
  auto* p = reinterpret_cast<unsigned char*>(t);
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<unsigned char>(rng());
}

// Offsets derived from the sizes in gdb/features/i386/64bit-*.xml.
TEST(Amd64Regs, LayoutMatchesGdbsDefaultDescription) {
  struct Expect {
    int regno;
    size_t offset, size;
  };
  const Expect kExpected[] = {
      {0, 0, 8},     {7, 56, 8},    {15, 120, 8},  {16, 128, 8},  {17, 136, 4},
      {18, 140, 4},  {23, 160, 4},  {24, 164, 10}, {31, 234, 10}, {32, 244, 4},
      {34, 252, 4},  {35, 256, 4},  {36, 260, 4},  {39, 272, 4},  {40, 276, 16},
      {55, 516, 16}, {56, 532, 4},  {57, 536, 8},  {58, 544, 8},  {59, 552, 8},
  };
  for (const Expect& e : kExpected) {
    size_t offset = 0, size = 0;
    ASSERT_TRUE(RegisterSlice(e.regno, &offset, &size)) << e.regno;
    EXPECT_EQ(offset, e.offset) << e.regno;
    EXPECT_EQ(size, e.size) << e.regno;
  }
  size_t offset = 0, size = 0;
  EXPECT_FALSE(RegisterSlice(-1, &offset, &size));
  EXPECT_FALSE(RegisterSlice(60, &offset, &size));
  // The slices tile the block.
  size_t next = 0;
  for (int r = 0; r < kAmd64NumRegs; ++r) {
    ASSERT_TRUE(RegisterSlice(r, &offset, &size));
    EXPECT_EQ(offset, next) << r;
    next = offset + size;
  }
  EXPECT_EQ(next, kAmd64RegsBytes);
}

TEST(Amd64Regs, EncodesEachRegisterInItsSlot) {
  user_regs_struct regs{};
  user_fpregs_struct fp{};
  regs.rax = 0x1111111111111111;
  regs.rbx = 0x2222222222222222;
  regs.rsp = 0x7ffc0000aaaa;
  regs.r15 = 0xf15f15;
  regs.rip = 0x401000;
  regs.eflags = 0xdead000000000246;  // only the low 32 bits are sent
  regs.cs = 0x33;
  regs.ss = 0x2b;
  regs.gs = 0x7;
  regs.orig_rax = static_cast<unsigned long long>(-1);
  regs.fs_base = 0x7f0000001000;
  regs.gs_base = 0x7f0000002000;
  fp.cwd = 0x37f;
  fp.swd = 0x0000;
  fp.mxcsr = 0x1f80;
  fp.fop = 0xffff;
  fp.rip = 0xabcd123456789abc;
  fp.rdp = 0x00005678deadbeef;
  fp.xmm_space[0] = 0x01020304;
  fp.xmm_space[63] = 0xa0b0c0d0;
  PutX87(&fp, 0, 0x8000000000000000, 0x3fff);  // 1.0 in st0

  const std::string b = EncodeAmd64(regs, fp);
  ASSERT_EQ(b.size(), kAmd64RegsBytes);
  EXPECT_EQ(At(b, 0, 8), regs.rax);
  EXPECT_EQ(At(b, 8, 8), regs.rbx);
  EXPECT_EQ(At(b, 56, 8), regs.rsp);
  EXPECT_EQ(At(b, 120, 8), regs.r15);
  EXPECT_EQ(At(b, 128, 8), 0x401000u);
  EXPECT_EQ(At(b, 136, 4), 0x246u);
  EXPECT_EQ(At(b, 140, 4), 0x33u);
  EXPECT_EQ(At(b, 144, 4), 0x2bu);
  EXPECT_EQ(At(b, 160, 4), 0x7u);
  EXPECT_EQ(At(b, 164, 8), 0x8000000000000000u);
  EXPECT_EQ(At(b, 172, 2), 0x3fffu);
  EXPECT_EQ(At(b, 244, 4), 0x37fu);
  EXPECT_EQ(At(b, 252, 4), 0xffffu);  // ftw 0: every register empty
  // gdbserver's i387_fxsave_to_cache: fiseg = bits 32-47, fioff = 0-31.
  EXPECT_EQ(At(b, 256, 4), 0x1234u);
  EXPECT_EQ(At(b, 260, 4), 0x56789abcu);
  EXPECT_EQ(At(b, 264, 4), 0x5678u);
  EXPECT_EQ(At(b, 268, 4), 0xdeadbeefu);
  EXPECT_EQ(At(b, 272, 4), 0x7ffu);
  EXPECT_EQ(At(b, 276, 4), 0x01020304u);
  EXPECT_EQ(At(b, 276 + 15 * 16 + 12, 4), 0xa0b0c0d0u);
  EXPECT_EQ(At(b, 532, 4), 0x1f80u);
  EXPECT_EQ(At(b, 536, 8), UINT64_MAX);
  EXPECT_EQ(At(b, 544, 8), 0x7f0000001000u);
  EXPECT_EQ(At(b, 552, 8), 0x7f0000002000u);
}

TEST(Amd64Regs, DecodeOfEncodeGivesTheSameState) {
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    user_regs_struct regs;
    user_fpregs_struct fp;
    FillRandom(&regs, seed);
    FillRandom(&fp, seed * 7919);
    user_regs_struct regs2 = regs;
    user_fpregs_struct fp2 = fp;
    ASSERT_TRUE(DecodeAmd64(EncodeAmd64(regs, fp), &regs2, &fp2));
    EXPECT_EQ(std::memcmp(&regs, &regs2, sizeof(regs)), 0) << seed;
    EXPECT_EQ(std::memcmp(&fp, &fp2, sizeof(fp)), 0) << seed;
  }
}

TEST(Amd64Regs, DecodeTakesTheBlockAndKeepsWhatItDoesNotCarry) {
  user_regs_struct from;
  user_fpregs_struct from_fp;
  FillRandom(&from, 3);
  FillRandom(&from_fp, 4);
  const std::string block = EncodeAmd64(from, from_fp);

  user_regs_struct regs;
  user_fpregs_struct fp;
  FillRandom(&regs, 5);
  FillRandom(&fp, 6);
  const user_regs_struct old = regs;
  const user_fpregs_struct old_fp = fp;
  ASSERT_TRUE(DecodeAmd64(block, &regs, &fp));

  EXPECT_EQ(regs.rax, from.rax);
  EXPECT_EQ(regs.r15, from.r15);
  EXPECT_EQ(regs.rip, from.rip);
  EXPECT_EQ(regs.orig_rax, from.orig_rax);
  EXPECT_EQ(regs.fs_base, from.fs_base);
  EXPECT_EQ(regs.gs_base, from.gs_base);
  EXPECT_EQ(regs.eflags, (old.eflags & ~0xffffffffull) | (from.eflags & 0xffffffff));
  EXPECT_EQ(regs.cs, (old.cs & ~0xffffffffull) | (from.cs & 0xffffffff));
  EXPECT_EQ(fp.cwd, from_fp.cwd);
  EXPECT_EQ(fp.swd, from_fp.swd);
  EXPECT_EQ(fp.ftw, (old_fp.ftw & 0xff00) | (from_fp.ftw & 0xff));
  EXPECT_EQ(fp.fop, (old_fp.fop & 0xf800) | (from_fp.fop & 0x7ff));
  EXPECT_EQ(fp.rip, (old_fp.rip & 0xffff000000000000) | (from_fp.rip & 0xffffffffffff));
  EXPECT_EQ(fp.rdp, (old_fp.rdp & 0xffff000000000000) | (from_fp.rdp & 0xffffffffffff));
  EXPECT_EQ(fp.mxcsr, from_fp.mxcsr);
  EXPECT_EQ(fp.mxcr_mask, old_fp.mxcr_mask);
  EXPECT_EQ(std::memcmp(fp.xmm_space, from_fp.xmm_space, sizeof(fp.xmm_space)), 0);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(std::memcmp(St(fp) + i * 16, St(from_fp) + i * 16, 10), 0) << i;
    EXPECT_EQ(std::memcmp(St(fp) + i * 16 + 10, St(old_fp) + i * 16 + 10, 6), 0) << i;
  }
}

TEST(Amd64Regs, DecodeRefusesAnyOtherSizeAndChangesNothing) {
  user_regs_struct regs;
  user_fpregs_struct fp;
  FillRandom(&regs, 8);
  FillRandom(&fp, 9);
  const user_regs_struct old = regs;
  const user_fpregs_struct old_fp = fp;
  for (size_t n : {size_t{0}, size_t{559}, size_t{561}, size_t{608}}) {
    EXPECT_FALSE(DecodeAmd64(std::string(n, '\x5a'), &regs, &fp)) << n;
    EXPECT_EQ(std::memcmp(&regs, &old, sizeof(regs)), 0);
    EXPECT_EQ(std::memcmp(&fp, &old_fp, sizeof(fp)), 0);
  }
}

TEST(Amd64Regs, DecodesPatchedRegisters) {
  user_regs_struct regs{};
  user_fpregs_struct fp{};
  std::string block = EncodeAmd64(regs, fp);
  const uint64_t rip = 0x401234;
  std::memcpy(&block[128], &rip, 8);
  const uint32_t ftag = 0x3fff;  // st0 (physical 7 with TOP 7) valid
  std::memcpy(&block[252], &ftag, 4);
  ASSERT_TRUE(DecodeAmd64(block, &regs, &fp));
  EXPECT_EQ(regs.rip, 0x401234u);
  EXPECT_EQ(fp.ftw, 0x80);
}

// ---- tag word ----

TEST(Amd64Ftag, EmptyRegistersAreThree) {
  user_fpregs_struct fp{};
  EXPECT_EQ(FullTagWord(0, 0, St(fp)), 0xffffu);
  EXPECT_EQ(FullTagWord(0, 0x3800, St(fp)), 0xffffu);
}

TEST(Amd64Ftag, ClassifiesValidZeroAndSpecial) {
  struct Case {
    uint64_t mantissa;
    unsigned sign_exponent;
    unsigned tag;
  };
  const Case kCases[] = {
      {0x8000000000000000, 0x3fff, 0},  // 1.0
      {0xc000000000000000, 0xc000, 0},  // -3.0
      {0, 0, 1},                        // +0
      {0, 0x8000, 1},                   // -0
      {0x8000000000000000, 0x7fff, 2},  // infinity
      {0xc000000000000000, 0xffff, 2},  // NaN
      {0x0000000000000001, 0, 2},       // denormal
      {0x8000000000000000, 0, 2},       // pseudo-denormal
      {0x4000000000000000, 0x3fff, 2},  // unnormal: integer bit clear
  };
  for (const Case& c : kCases) {
    user_fpregs_struct fp{};
    PutX87(&fp, 0, c.mantissa, c.sign_exponent);
    // TOP 0: physical register 0 is st0.
    EXPECT_EQ(FullTagWord(0x01, 0, St(fp)), 0xfffcu | c.tag) << std::hex << c.mantissa;
  }
}

// The abridged tag and the full tag word are indexed by physical register,
// st_space by stack position: physical i holds ST((i - TOP) mod 8).
TEST(Amd64Ftag, MapsPhysicalRegistersThroughTop) {
  user_fpregs_struct fp{};
  PutX87(&fp, 0, 0x8000000000000000, 0x3fff);  // st0 = 1.0 (valid)
  // st1 stays +0 (zero).
  const unsigned top6 = 6u << 11;
  // Physical 6 = st0, physical 7 = st1.
  EXPECT_EQ(FullTagWord(0xc0, top6, St(fp)), 0x0fffu | (0u << 12) | (1u << 14));
  // With TOP 7 after one push, st0 is physical 7.
  EXPECT_EQ(FullTagWord(0x80, 7u << 11, St(fp)), 0x3fffu);
  // With TOP 0, physical 0 = st0, physical 1 = st1.
  EXPECT_EQ(FullTagWord(0x03, 0, St(fp)), 0xfff0u | 0u | (1u << 2));
}

TEST(Amd64Ftag, AbridgedKeepsOnlyNonEmpty) {
  EXPECT_EQ(AbridgedTag(0xffff), 0u);
  EXPECT_EQ(AbridgedTag(0x0000), 0xffu);
  EXPECT_EQ(AbridgedTag(0x4fff), 0xc0u);
  EXPECT_EQ(AbridgedTag(0xfffe), 0x01u);  // tag 2 (special) is not empty
}

TEST(Amd64Ftag, EncodeSendsTheFullWord) {
  user_regs_struct regs{};
  user_fpregs_struct fp{};
  fp.ftw = 0x80;
  fp.swd = 0x3800;  // TOP 7
  PutX87(&fp, 0, 0x8000000000000000, 0x3fff);
  const std::string b = EncodeAmd64(regs, fp);
  EXPECT_EQ(At(b, 252, 4), 0x3fffu);
  EXPECT_EQ(At(b, 248, 4), 0x3800u);
}

}  // namespace
}  // namespace pfm::gdbstub
