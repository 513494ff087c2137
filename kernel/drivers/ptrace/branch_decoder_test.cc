// Encodings below are from the Intel SDM Vol. 2 instruction pages (and were
// cross-checked with GNU objdump); each comment gives the assembly.
#include "kernel/drivers/ptrace/branch_decoder.h"

#include <cerrno>
#include <initializer_list>
#include <vector>

#include "gtest/gtest.h"

namespace pfm {
namespace {

struct Case {
  std::vector<uint8_t> bytes;
  int length;
  BranchKind kind;
  int32_t rel;
  const char* what;
};

void Check(const Case& c) {
  DecodedInsn d;
  const int rc = DecodeInsn(c.bytes.data(), c.bytes.size(), &d);
  EXPECT_EQ(rc, c.length) << c.what;
  EXPECT_EQ(d.length, c.length) << c.what;
  EXPECT_EQ(static_cast<int>(d.kind), static_cast<int>(c.kind))
      << c.what << " decoded as " << BranchKindName(d.kind);
  EXPECT_EQ(d.rel, c.rel) << c.what;
}

TEST(BranchDecoder, ClassifiesDirectBranches) {
  const Case cases[] = {
      {{0x74, 0x05}, 2, BranchKind::kCondRel, 5, "je .+7"},
      {{0x7F, 0xFE}, 2, BranchKind::kCondRel, -2, "jg . (self)"},
      {{0x0F, 0x85, 0x10, 0x00, 0x00, 0x00}, 6, BranchKind::kCondRel, 16,
       "jne rel32"},
      {{0x0F, 0x8C, 0xF0, 0xFF, 0xFF, 0xFF}, 6, BranchKind::kCondRel, -16,
       "jl rel32 backward"},
      {{0xE2, 0xFC}, 2, BranchKind::kCondRel, -4, "loop"},
      {{0xE0, 0x02}, 2, BranchKind::kCondRel, 2, "loopne"},
      {{0xE1, 0x02}, 2, BranchKind::kCondRel, 2, "loope"},
      {{0xE3, 0x10}, 2, BranchKind::kCondRel, 16, "jrcxz"},
      {{0x67, 0xE3, 0x10}, 3, BranchKind::kCondRel, 16, "jecxz (67h)"},
      {{0xEB, 0x80}, 2, BranchKind::kJmpRel, -128, "jmp rel8"},
      {{0xE9, 0x00, 0x01, 0x00, 0x00}, 5, BranchKind::kJmpRel, 256,
       "jmp rel32"},
      {{0xE8, 0xFB, 0xFF, 0xFF, 0xFF}, 5, BranchKind::kCallRel, -5,
       "call rel32 (to self)"},
      // 66h does not shrink a near rel32 in 64-bit mode on Intel.
      {{0x66, 0xE8, 0x01, 0x00, 0x00, 0x00}, 6, BranchKind::kCallRel, 1,
       "data16 call"},
      {{0xF2, 0xE9, 0x01, 0x00, 0x00, 0x00}, 6, BranchKind::kJmpRel, 1,
       "bnd jmp"},
      {{0x3E, 0x74, 0x03}, 3, BranchKind::kCondRel, 3, "ds je (hint)"},
  };
  for (const Case& c : cases) Check(c);
}

TEST(BranchDecoder, ClassifiesReturnsAndIndirectTransfers) {
  const Case cases[] = {
      {{0xC3}, 1, BranchKind::kRet, 0, "ret"},
      {{0xF3, 0xC3}, 2, BranchKind::kRet, 0, "repz ret"},
      {{0xF2, 0xC3}, 2, BranchKind::kRet, 0, "bnd ret"},
      {{0xC2, 0x08, 0x00}, 3, BranchKind::kRet, 0, "ret 8"},
      {{0xCB}, 1, BranchKind::kFarRet, 0, "lret"},
      {{0x48, 0xCB}, 2, BranchKind::kFarRet, 0, "lretq"},
      {{0xCA, 0x10, 0x00}, 3, BranchKind::kFarRet, 0, "lret 16"},
      {{0x48, 0xCF}, 2, BranchKind::kIret, 0, "iretq"},
      {{0xFF, 0xD0}, 2, BranchKind::kCallInd, 0, "call *%rax"},
      {{0x41, 0xFF, 0xD3}, 3, BranchKind::kCallInd, 0, "call *%r11"},
      {{0xFF, 0x15, 0x10, 0x20, 0x00, 0x00}, 6, BranchKind::kCallInd, 0,
       "call *0x2010(%rip)"},
      {{0xFF, 0x14, 0xC5, 0x00, 0x10, 0x00, 0x00}, 7, BranchKind::kCallInd, 0,
       "call *0x1000(,%rax,8)"},
      {{0xFF, 0xE0}, 2, BranchKind::kJmpInd, 0, "jmp *%rax"},
      {{0x3E, 0xFF, 0xE0}, 3, BranchKind::kJmpInd, 0, "notrack jmp *%rax"},
      {{0xFF, 0x64, 0x24, 0x08}, 4, BranchKind::kJmpInd, 0,
       "jmp *0x8(%rsp)"},
      {{0xFF, 0xA0, 0x00, 0x01, 0x00, 0x00}, 6, BranchKind::kJmpInd, 0,
       "jmp *0x100(%rax)"},
      {{0xFF, 0x25, 0x02, 0x00, 0x00, 0x00}, 6, BranchKind::kJmpInd, 0,
       "jmp *0x2(%rip) (PLT)"},
      {{0xFF, 0x18}, 2, BranchKind::kFarCallInd, 0, "lcall *(%rax)"},
      {{0xFF, 0x28}, 2, BranchKind::kFarJmpInd, 0, "ljmp *(%rax)"},
  };
  for (const Case& c : cases) Check(c);
}

TEST(BranchDecoder, ClassifiesTraps) {
  const Case cases[] = {
      {{0x0F, 0x05}, 2, BranchKind::kTrap, 0, "syscall"},
      {{0x0F, 0x34}, 2, BranchKind::kTrap, 0, "sysenter"},
      {{0xCD, 0x80}, 2, BranchKind::kTrap, 0, "int $0x80"},
      {{0xCC}, 1, BranchKind::kTrap, 0, "int3"},
      {{0xF1}, 1, BranchKind::kTrap, 0, "int1"},
  };
  for (const Case& c : cases) Check(c);
}

TEST(BranchDecoder, NonBranchesGetTheirLength) {
  const Case cases[] = {
      {{0x90}, 1, BranchKind::kNone, 0, "nop"},
      {{0x55}, 1, BranchKind::kNone, 0, "push %rbp"},
      {{0x48, 0x89, 0xE5}, 3, BranchKind::kNone, 0, "mov %rsp,%rbp"},
      {{0x48, 0x83, 0xEC, 0x10}, 4, BranchKind::kNone, 0, "sub $0x10,%rsp"},
      {{0x48, 0x81, 0xEC, 0x00, 0x01, 0x00, 0x00}, 7, BranchKind::kNone, 0,
       "sub $0x100,%rsp"},
      {{0x66, 0x81, 0xC3, 0x34, 0x12}, 5, BranchKind::kNone, 0,
       "add $0x1234,%bx"},
      {{0x48, 0xB8, 1, 2, 3, 4, 5, 6, 7, 8}, 10, BranchKind::kNone, 0,
       "movabs $imm64,%rax"},
      {{0xB8, 1, 2, 3, 4}, 5, BranchKind::kNone, 0, "mov $imm32,%eax"},
      {{0x66, 0xB8, 1, 2}, 4, BranchKind::kNone, 0, "mov $imm16,%ax"},
      {{0x48, 0xA1, 1, 2, 3, 4, 5, 6, 7, 8}, 10, BranchKind::kNone, 0,
       "movabs moffs64,%rax"},
      {{0x67, 0xA1, 1, 2, 3, 4}, 6, BranchKind::kNone, 0,
       "addr32 mov moffs32,%eax"},
      {{0xC7, 0x44, 0x24, 0x08, 1, 0, 0, 0}, 8, BranchKind::kNone, 0,
       "movl $1,0x8(%rsp)"},
      {{0xC7, 0x05, 1, 0, 0, 0, 2, 0, 0, 0}, 10, BranchKind::kNone, 0,
       "movl $2,0x1(%rip)"},
      {{0x8B, 0x04, 0x25, 0, 0x10, 0, 0}, 7, BranchKind::kNone, 0,
       "mov 0x1000,%eax (SIB no base)"},
      {{0x8B, 0x44, 0x88, 0x10}, 4, BranchKind::kNone, 0,
       "mov 0x10(%rax,%rcx,4),%eax"},
      {{0xF6, 0xC1, 0x01}, 3, BranchKind::kNone, 0, "test $1,%cl"},
      {{0xF7, 0xC1, 1, 0, 0, 0}, 6, BranchKind::kNone, 0, "test $1,%ecx"},
      {{0xF7, 0xD8}, 2, BranchKind::kNone, 0, "neg %eax (no imm)"},
      {{0xF6, 0xE1}, 2, BranchKind::kNone, 0, "mul %cl (no imm)"},
      {{0xC8, 0x10, 0x00, 0x01}, 4, BranchKind::kNone, 0, "enter $16,$1"},
      {{0xF3, 0x0F, 0x1E, 0xFA}, 4, BranchKind::kNone, 0, "endbr64"},
      {{0x0F, 0x1F, 0x44, 0x00, 0x00}, 5, BranchKind::kNone, 0,
       "nopl 0x0(%rax,%rax,1)"},
      {{0x66, 0x2E, 0x0F, 0x1F, 0x84, 0, 0, 0, 0, 0}, 10, BranchKind::kNone,
       0, "cs nopw 0x0(%rax,%rax,1)"},
      {{0x0F, 0x94, 0xC0}, 3, BranchKind::kNone, 0, "sete %al"},
      {{0x0F, 0xA2}, 2, BranchKind::kNone, 0, "cpuid"},
      {{0x0F, 0x31}, 2, BranchKind::kNone, 0, "rdtsc"},
      {{0x0F, 0xBA, 0xE0, 0x03}, 4, BranchKind::kNone, 0, "bt $3,%eax"},
      {{0x66, 0x0F, 0x70, 0xC0, 0x1B}, 5, BranchKind::kNone, 0,
       "pshufd $0x1b,%xmm0,%xmm0"},
      {{0x66, 0x0F, 0x38, 0x00, 0xC1}, 5, BranchKind::kNone, 0,
       "pshufb %xmm1,%xmm0"},
      {{0x66, 0x0F, 0x3A, 0x0F, 0xC1, 0x08}, 6, BranchKind::kNone, 0,
       "palignr $8,%xmm1,%xmm0"},
      {{0xF0, 0x48, 0x0F, 0xB1, 0x0A}, 5, BranchKind::kNone, 0,
       "lock cmpxchg %rcx,(%rdx)"},
      {{0xF3, 0x48, 0xA5}, 3, BranchKind::kNone, 0, "rep movsq"},
      {{0x64, 0x48, 0x8B, 0x04, 0x25, 0x28, 0, 0, 0}, 9, BranchKind::kNone,
       0, "mov %fs:0x28,%rax"},
      {{0x8F, 0xC0}, 2, BranchKind::kNone, 0, "pop %rax (8F /0, not XOP)"},
      {{0xD9, 0xE8}, 2, BranchKind::kNone, 0, "fld1"},
  };
  for (const Case& c : cases) Check(c);
}

TEST(BranchDecoder, VexAndEvexAreNeverBranches) {
  const Case cases[] = {
      {{0xC5, 0xF8, 0x77}, 3, BranchKind::kNone, 0, "vzeroupper"},
      {{0xC5, 0xFD, 0x6F, 0x06}, 4, BranchKind::kNone, 0,
       "vmovdqa (%rsi),%ymm0"},
      {{0xC4, 0xE2, 0x7D, 0x58, 0xC0}, 5, BranchKind::kNone, 0,
       "vpbroadcastd %xmm0,%ymm0 (map 0F38)"},
      {{0xC4, 0xE3, 0x7D, 0x39, 0xC1, 0x01}, 6, BranchKind::kNone, 0,
       "vextracti128 $1,%ymm0,%xmm1 (map 0F3A, ib)"},
      {{0xC5, 0xF9, 0x70, 0xC0, 0x1B}, 5, BranchKind::kNone, 0,
       "vpshufd $0x1b,%xmm0,%xmm0"},
      {{0x62, 0xF1, 0x7D, 0x48, 0x6F, 0x06}, 6, BranchKind::kNone, 0,
       "vmovdqa32 (%rsi),%zmm0"},
      {{0x62, 0xF1, 0x7D, 0x48, 0x6F, 0x46, 0x01}, 7, BranchKind::kNone, 0,
       "vmovdqa32 0x40(%rsi),%zmm0 (disp8*N)"},
      {{0x62, 0xF3, 0x7D, 0x48, 0x39, 0xC1, 0x01}, 7, BranchKind::kNone, 0,
       "vextracti32x4 $1,%zmm0,%xmm1"},
  };
  for (const Case& c : cases) Check(c);
}

TEST(BranchDecoder, RefusesInvalidAndOverlongInstructions) {
  DecodedInsn d;
  const uint8_t invalid[][1] = {{0x06}, {0x27}, {0x60}, {0xD6}, {0xEA}};
  for (const auto& b : invalid) EXPECT_EQ(DecodeInsn(b, 1, &d), -EINVAL);
  // 14 prefixes then a 2-byte instruction: 16 bytes > the 15-byte limit.
  std::vector<uint8_t> overlong(14, 0x66);
  overlong.push_back(0x89);
  overlong.push_back(0xC0);
  EXPECT_EQ(DecodeInsn(overlong.data(), overlong.size(), &d), -EINVAL);
  // Prefix run filling the window.
  std::vector<uint8_t> prefixes(15, 0x2E);
  EXPECT_EQ(DecodeInsn(prefixes.data(), prefixes.size(), &d), -EINVAL);
}

TEST(BranchDecoder, ReportsTruncatedInput) {
  DecodedInsn d;
  const uint8_t call[] = {0xE8, 0x00, 0x00, 0x00, 0x00};
  for (size_t n = 0; n < sizeof(call); ++n)
    EXPECT_EQ(DecodeInsn(call, n, &d), -ENODATA) << n;
  EXPECT_EQ(DecodeInsn(call, sizeof(call), &d), 5);
  const uint8_t evex[] = {0x62, 0xF1, 0x7D};
  EXPECT_EQ(DecodeInsn(evex, sizeof(evex), &d), -ENODATA);
}

TEST(BranchDecoder, NeverReadsPastAvailOnAnyTwoBytePrefix) {
  // Every 1- and 2-byte input: the decoder must return a length that fits,
  // or an error, never a length beyond what it was given.
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      const uint8_t code[2] = {static_cast<uint8_t>(a), static_cast<uint8_t>(b)};
      DecodedInsn d;
      const int rc = DecodeInsn(code, 2, &d);
      if (rc > 0) {
        ASSERT_LE(rc, 2) << a << " " << b;
      } else {
        ASSERT_TRUE(rc == -EINVAL || rc == -ENODATA) << a << " " << b;
      }
    }
  }
}

// Lengths cross-checked with GNU objdump 2.40 (`-b binary -m i386:x86-64`),
// except where a comment says objdump differs. `sequential` per
// DecodedInsn: a tracer may compute the next RIP as rip + length.
struct LenCase {
  std::vector<uint8_t> bytes;
  int length;
  bool sequential;
  const char* what;
};

void CheckLen(const LenCase& c) {
  std::vector<uint8_t> code = c.bytes;
  code.resize(code.size() + 4, 0x90);  // bytes after the instruction
  DecodedInsn d;
  EXPECT_EQ(DecodeInsn(code.data(), code.size(), &d), c.length) << c.what;
  EXPECT_EQ(d.sequential, c.sequential) << c.what;
  if (c.sequential) {
    EXPECT_EQ(static_cast<int>(d.kind), static_cast<int>(BranchKind::kNone))
        << c.what;
  }
}

TEST(BranchDecoder, LengthsOfATableOfEncodings) {
  const LenCase cases[] = {
      {{0x48, 0x8B, 0x05, 0x10, 0x00, 0x00, 0x00}, 7, true, "mov rip-rel"},
      {{0x8B, 0x44, 0x24, 0x08}, 4, true, "mov 8(rsp)"},
      {{0x8B, 0x84, 0x24, 0x00, 0x01, 0x00, 0x00}, 7, true, "mov 0x100(rsp)"},
      {{0x8B, 0x04, 0x24}, 3, true, "mov (rsp)"},
      {{0x8B, 0x45, 0x00}, 3, true, "mov 0(rbp)"},
      {{0x41, 0x8B, 0x45, 0x00}, 4, true, "mov 0(r13)"},
      {{0x8B, 0x04, 0x2C}, 3, true, "mov (rsp,rbp)"},
      {{0x8B, 0x44, 0xAD, 0xF0}, 4, true, "sib base rbp mod1"},
      {{0x42, 0x8B, 0x04, 0xE5, 0x00, 0x00, 0x00, 0x00}, 8, true, "no base r12*8"},
      {{0x67, 0x8B, 0x00}, 3, true, "addr32 (eax)"},
      {{0x67, 0x8B, 0x05, 0x10, 0x00, 0x00, 0x00}, 7, true, "addr32 eip-rel"},
      {{0x66, 0x0F, 0x1F, 0x44, 0x00, 0x00}, 6, true, "nopw"},
      {{0x0F, 0x1F, 0x80, 0x00, 0x00, 0x00, 0x00}, 7, true, "nopl disp32"},
      {{0x0F, 0x1F, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00}, 8, true, "nopl sib disp32"},
      {{0x66, 0x66, 0x2E, 0x0F, 0x1F, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00}, 11, true, "data16 cs nopw"},
      {{0x48, 0xC7, 0xC0, 0xFF, 0xFF, 0xFF, 0xFF}, 7, true, "mov -1 rax"},
      {{0x48, 0x69, 0xC0, 0x10, 0x27, 0x00, 0x00}, 7, true, "imul iz"},
      {{0x6B, 0xC0, 0x0A}, 3, true, "imul ib"},
      {{0x66, 0x6B, 0xC0, 0x0A}, 4, true, "imul16 ib"},
      {{0x68, 0x00, 0x10, 0x00, 0x00}, 5, true, "push iz"},
      {{0x66, 0x68, 0x34, 0x12}, 4, true, "pushw"},
      {{0x6A, 0x01}, 2, true, "push ib"},
      {{0xC1, 0xE0, 0x04}, 3, true, "shl ib"},
      {{0xD1, 0xE0}, 2, true, "shl 1"},
      {{0xD3, 0xE0}, 2, true, "shl cl"},
      {{0x0F, 0xA4, 0xC2, 0x04}, 4, true, "shld ib"},
      {{0x0F, 0xA5, 0xC2}, 3, true, "shld cl"},
      {{0x48, 0x0F, 0xAF, 0xC1}, 4, true, "imul r r"},
      {{0xF3, 0x0F, 0xB8, 0xC1}, 4, true, "popcnt"},
      {{0xF3, 0x48, 0x0F, 0xBC, 0xC1}, 5, true, "tzcnt"},
      {{0x66, 0x0F, 0x3A, 0x16, 0xC0, 0x01}, 6, true, "pextrd"},
      {{0x66, 0x48, 0x0F, 0x3A, 0x16, 0xC0, 0x01}, 7, true, "pextrq"},
      {{0x66, 0x0F, 0x38, 0x17, 0xC1}, 5, true, "ptest"},
      {{0xF2, 0x0F, 0x38, 0xF1, 0xC1}, 5, true, "crc32"},
      {{0x0F, 0x0D, 0x08}, 3, true, "prefetchw"},
      {{0x0F, 0xAE, 0xF0}, 3, true, "mfence"},
      {{0x0F, 0xAE, 0x5C, 0x24, 0xFC}, 5, true, "stmxcsr"},
      {{0x0F, 0xC7, 0xF0}, 3, true, "rdrand"},
      {{0x48, 0x0F, 0xC7, 0x0E}, 4, true, "cmpxchg16b"},
      {{0xF0, 0x48, 0x0F, 0xC1, 0x07}, 5, true, "lock xadd"},
      {{0x0F, 0x18, 0x08}, 3, true, "prefetcht0"},
      {{0xDD, 0x44, 0x24, 0x08}, 4, true, "fldl"},
      {{0xD9, 0xFA}, 2, true, "fsqrt"},
      {{0xDF, 0xE0}, 2, true, "fnstsw"},
      {{0xC5, 0xFA, 0x6F, 0x06}, 4, true, "vmovdqu"},
      {{0xC5, 0xFE, 0x7F, 0x44, 0x24, 0x20}, 6, true, "vmovdqu ymm store"},
      {{0xC4, 0xE2, 0x79, 0x18, 0x05, 0x10, 0x00, 0x00, 0x00}, 9, true, "vbroadcastss rip"},
      {{0xC4, 0xE3, 0xFD, 0x00, 0xC0, 0x1B}, 6, true, "vpermq"},
      {{0xC5, 0xF1, 0x72, 0xF0, 0x04}, 5, true, "vpslld ib"},
      {{0xC5, 0xF8, 0xC2, 0xC1, 0x00}, 5, true, "vcmpeqps"},
      {{0xC4, 0xE1, 0xF9, 0x7E, 0xC0}, 5, true, "vmovq"},
      {{0x62, 0xF1, 0xFD, 0x48, 0x7F, 0x44, 0x24, 0x01}, 8, true, "vmovdqa64 disp8N"},
      {{0x62, 0xF1, 0x7C, 0x48, 0xC2, 0xC1, 0x00}, 7, true, "vcmpps k"},
      {{0x62, 0xF2, 0x7D, 0x48, 0x58, 0x05, 0x10, 0x00, 0x00, 0x00}, 10, true, "vpbroadcastd rip"},
      {{0x62, 0xF3, 0xFD, 0x48, 0x00, 0xC0, 0x1B}, 7, true, "vpermq zmm"},
      {{0x62, 0xF1, 0x7D, 0x48, 0x72, 0xF0, 0x04}, 7, true, "vpslld zmm"},
      {{0x66, 0x48, 0x81, 0xC0, 0x78, 0x56, 0x34, 0x12}, 8, true, "rexw over 66 81"},
      {{0x66, 0x48, 0xC7, 0xC0, 0x78, 0x56, 0x34, 0x12}, 8, true, "rexw over 66 c7"},
      {{0x66, 0x48, 0xB8, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}, 11, true, "rexw over 66 b8"},
      {{0x66, 0x48, 0xF7, 0xC0, 0x78, 0x56, 0x34, 0x12}, 8, true, "rexw over 66 f7 test"},
      {{0x66, 0x48, 0x05, 0x78, 0x56, 0x34, 0x12}, 7, true, "rexw over 66 05"},
      // REX before 66h is ignored (SDM 2.2.1): one 16-bit add; objdump prints a lone rex.W
      {{0x48, 0x66, 0x81, 0xC0, 0x34, 0x12}, 6, true, "rex not last"},
      {{0xF3, 0xA4}, 2, false, "rep movsb"},
      {{0xF2, 0xAE}, 2, false, "repne scasb"},
      {{0xF3, 0xAA}, 2, false, "rep stosb"},
      {{0xF3, 0xA6}, 2, false, "repe cmpsb"},
      {{0xA4}, 1, true, "movsb"},
      {{0x48, 0xA5}, 2, true, "movsq"},
      {{0xAC}, 1, true, "lodsb"},
      {{0xAE}, 1, true, "scasb"},
      // a hypervisor may exit on it
      {{0xF3, 0x90}, 2, false, "pause"},
      // MOV SS holds the step trap until after the next instruction
      {{0x8E, 0xD0}, 2, false, "mov ss"},
      {{0x8C, 0xD0}, 2, true, "mov from ss"},
      {{0x9D}, 1, false, "popf"},
      {{0x9C}, 1, true, "pushf"},
      // lost its step trap on this VM
      {{0x0F, 0xA2}, 2, false, "cpuid"},
      {{0x0F, 0x31}, 2, false, "rdtsc"},
      {{0x0F, 0x01, 0xF9}, 3, false, "rdtscp"},
      {{0x0F, 0x01, 0xD0}, 3, false, "xgetbv"},
      {{0x0F, 0x0B}, 2, false, "ud2"},
      {{0xC7, 0xF8, 0x00, 0x00, 0x00, 0x00}, 6, false, "xbegin"},
      {{0xC6, 0xF8, 0xFF}, 3, false, "xabort"},
      {{0x0F, 0x01, 0xD5}, 3, false, "xend"},
      {{0xF4}, 1, false, "hlt"},
      {{0xEC}, 1, false, "in"},
      {{0xE6, 0x80}, 2, false, "out"},
      {{0x6C}, 1, false, "insb"},
      {{0x0F, 0x00, 0xC0}, 3, false, "sldt"},
      {{0x0F, 0x01, 0x08}, 3, false, "sidt"},
      {{0x0F, 0xA1}, 2, false, "pop fs"},
      // AMD XOP
      {{0x8F, 0xE8, 0x78, 0xC0, 0xC8, 0x02}, 6, false, "xop vprotb"},
  };
  for (const LenCase& c : cases) CheckLen(c);
}

TEST(BranchDecoder, BranchesAndTrapsAreNeverSequential) {
  const std::vector<std::vector<uint8_t>> cases = {
      {0x74, 0x05}, {0x0F, 0x85, 0, 0, 0, 0}, {0xE2, 0xFC}, {0xE3, 0x10},
      {0xEB, 0x00}, {0xE9, 0, 0, 0, 0}, {0xE8, 0, 0, 0, 0}, {0xC3},
      {0xF3, 0xC3}, {0xC2, 0x08, 0x00}, {0xCB}, {0x48, 0xCF}, {0xFF, 0xD0},
      {0xFF, 0x25, 0, 0, 0, 0}, {0xFF, 0x18}, {0xFF, 0x28}, {0x0F, 0x05},
      {0x0F, 0x34}, {0xCD, 0x80}, {0xCC}, {0xF1},
  };
  for (const auto& c : cases) {
    DecodedInsn d;
    ASSERT_GT(DecodeInsn(c.data(), c.size(), &d), 0);
    EXPECT_NE(static_cast<int>(d.kind), static_cast<int>(BranchKind::kNone));
    EXPECT_FALSE(d.sequential) << BranchKindName(d.kind);
  }
}

// What a branch-stepping tracer may run natively between two branches.
TEST(BranchDecoder, NativeIsSequentialPlusRepStringsPauseCpuidRdtsc) {
  struct NativeCase {
    std::vector<uint8_t> bytes;
    bool native;
    const char* what;
  };
  const std::vector<NativeCase> cases = {
      {{0x48, 0x89, 0xC3}, true, "mov rbx, rax"},
      {{0xF3, 0xA4}, true, "rep movsb"},
      {{0xF3, 0x48, 0xAB}, true, "rep stosq"},
      {{0xF2, 0xAE}, true, "repne scasb"},
      {{0xA4}, true, "movsb (sequential)"},
      {{0xF3, 0x90}, true, "pause"},
      {{0x0F, 0xA2}, true, "cpuid"},
      {{0x0F, 0x31}, true, "rdtsc"},
      {{0x9D}, false, "popf"},
      {{0x8E, 0xD0}, false, "mov ss, ax"},
      {{0xC7, 0xF8, 0, 0, 0, 0}, false, "xbegin"},
      {{0x0F, 0x01, 0xD0}, false, "xgetbv (group 7)"},
      {{0xF3, 0x6C}, false, "rep insb"},
      {{0x0F, 0x05}, false, "syscall"},
      {{0xCC}, false, "int3"},
      {{0x74, 0x05}, false, "je"},
      {{0xC3}, false, "ret"},
      {{0x0F, 0x0B}, false, "ud2"},
  };
  for (const NativeCase& c : cases) {
    DecodedInsn d;
    ASSERT_GT(DecodeInsn(c.bytes.data(), c.bytes.size(), &d), 0) << c.what;
    EXPECT_EQ(d.native, c.native) << c.what;
  }
  DecodedInsn bad;
  const uint8_t ud[] = {0x06};
  EXPECT_LT(DecodeInsn(ud, 1, &bad), 0);
  EXPECT_FALSE(bad.native);
}

TEST(BranchDecoder, UndecodableInputIsNotSequential) {
  // An undecodable or truncated instruction leaves the default: not
  // sequential, so a tracer reads the registers.
  DecodedInsn d;
  const uint8_t ud[] = {0x06};
  EXPECT_EQ(DecodeInsn(ud, 1, &d), -EINVAL);
  EXPECT_FALSE(d.sequential);
  const uint8_t cut[] = {0x48, 0x8B};
  EXPECT_EQ(DecodeInsn(cut, 2, &d), -ENODATA);
  EXPECT_FALSE(d.sequential);
}

TEST(BranchDecoder, TakenDependsOnFallThroughOnlyForConditionals) {
  DecodedInsn jcc;
  const uint8_t je[] = {0x74, 0x05};
  ASSERT_EQ(DecodeInsn(je, 2, &jcc), 2);
  EXPECT_FALSE(BranchTaken(jcc, 0x1000, 0x1002));
  EXPECT_TRUE(BranchTaken(jcc, 0x1000, 0x1007));

  DecodedInsn sc;
  const uint8_t syscall[] = {0x0F, 0x05};
  ASSERT_EQ(DecodeInsn(syscall, 2, &sc), 2);
  EXPECT_FALSE(BranchTaken(sc, 0x2000, 0x2002));
  EXPECT_TRUE(BranchTaken(sc, 0x2000, 0x7000));  // e.g. rt_sigreturn

  DecodedInsn jmp;
  const uint8_t jmp0[] = {0xEB, 0x00};  // jmp to the next instruction
  ASSERT_EQ(DecodeInsn(jmp0, 2, &jmp), 2);
  EXPECT_TRUE(BranchTaken(jmp, 0x3000, 0x3002));

  DecodedInsn nop;
  const uint8_t n[] = {0x90};
  ASSERT_EQ(DecodeInsn(n, 1, &nop), 1);
  EXPECT_FALSE(BranchTaken(nop, 0x4000, 0x9000));
}

}  // namespace
}  // namespace pfm
