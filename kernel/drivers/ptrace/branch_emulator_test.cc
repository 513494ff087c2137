// EmulateBranch on synthetic registers and memory. Encodings from the Intel
// SDM Vol. 2 instruction pages (cross-checked with GNU objdump).
#include "kernel/drivers/ptrace/branch_emulator.h"

#include <cstring>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace pfm {
namespace {

// Byte-addressed memory; reads of bytes never written fail.
class MapMemory : public EmuMemory {
 public:
  int Read(uint64_t addr, void* buf, size_t n) override {
    ++reads;
    uint8_t* out = static_cast<uint8_t*>(buf);
    for (size_t i = 0; i < n; ++i) {
      auto it = bytes.find(addr + i);
      if (it == bytes.end()) return -14;
      out[i] = it->second;
    }
    return 0;
  }
  int Write(uint64_t addr, const void* buf, size_t n) override {
    if (read_only) return -14;
    const uint8_t* in = static_cast<const uint8_t*>(buf);
    for (size_t i = 0; i < n; ++i) bytes[addr + i] = in[i];
    return 0;
  }
  void Put64(uint64_t addr, uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes[addr + i] = static_cast<uint8_t>(v >> (8 * i));
  }
  uint64_t Get64(uint64_t addr) {
    uint64_t v = 0;
    EXPECT_EQ(Read(addr, &v, 8), 0);
    return v;
  }
  std::map<uint64_t, uint8_t> bytes;
  bool read_only = false;
  int reads = 0;
};

constexpr uint64_t kRip = 0x401000;

struct Outcome {
  EmuResult result;
  bool taken;
  user_regs_struct regs;
};

Outcome Emulate(const std::vector<uint8_t>& code, user_regs_struct regs, MapMemory* mem) {
  DecodedInsn d;
  EXPECT_GT(DecodeInsn(code.data(), code.size(), &d), 0);
  EXPECT_TRUE(CanEmulateBranch(code.data(), code.size(), d));
  regs.rip = kRip;
  Outcome r{};
  r.regs = regs;
  r.result = EmulateBranch(code.data(), code.size(), d, &r.regs, mem, &r.taken);
  return r;
}

user_regs_struct Regs() {
  user_regs_struct r;
  std::memset(&r, 0, sizeof(r));
  r.rsp = 0x7ffff000;
  return r;
}

TEST(BranchEmulator, EveryConditionCodeFromRflags) {
  // (cc, flags, taken) for each of the 16 conditions, both ways.
  constexpr uint64_t CF = 1, PF = 4, ZF = 0x40, SF = 0x80, OF = 0x800;
  struct C {
    int cc;
    uint64_t flags;
    bool taken;
  };
  const std::vector<C> cases = {
      {0x0, OF, true},  {0x0, 0, false},   {0x1, 0, true},        {0x1, OF, false},
      {0x2, CF, true},  {0x2, 0, false},   {0x3, 0, true},        {0x3, CF, false},
      {0x4, ZF, true},  {0x4, 0, false},   {0x5, 0, true},        {0x5, ZF, false},
      {0x6, CF, true},  {0x6, ZF, true},   {0x6, 0, false},       {0x7, 0, true},
      {0x7, ZF, false}, {0x8, SF, true},   {0x8, 0, false},       {0x9, 0, true},
      {0xA, PF, true},  {0xA, 0, false},   {0xB, 0, true},        {0xC, SF, true},
      {0xC, OF, true},  {0xC, SF | OF, false}, {0xD, SF | OF, true}, {0xD, SF, false},
      {0xE, ZF, true},  {0xE, SF, true},   {0xE, SF | OF, false}, {0xF, SF | OF, true},
      {0xF, ZF | SF | OF, false}, {0xF, OF, false},
  };
  for (const C& c : cases) {
    MapMemory mem;
    user_regs_struct r = Regs();
    r.eflags = c.flags | 0x202;
    // rel8 (7x 10) and rel32 (0F 8x 00 01 00 00) forms.
    Outcome a = Emulate({static_cast<uint8_t>(0x70 | c.cc), 0x10}, r, &mem);
    ASSERT_EQ(a.result, EmuResult::kDone);
    EXPECT_EQ(a.taken, c.taken) << "cc " << c.cc << " flags " << c.flags;
    EXPECT_EQ(a.regs.rip, c.taken ? kRip + 2 + 0x10 : kRip + 2);
    Outcome b = Emulate({0x0F, static_cast<uint8_t>(0x80 | c.cc), 0x00, 0x01, 0x00, 0x00}, r, &mem);
    ASSERT_EQ(b.result, EmuResult::kDone);
    EXPECT_EQ(b.taken, c.taken);
    EXPECT_EQ(b.regs.rip, c.taken ? kRip + 6 + 0x100 : kRip + 6);
    EXPECT_EQ(b.regs.rsp, r.rsp);
  }
  // A backward rel8 with a branch hint prefix (3E: "taken").
  MapMemory mem;
  user_regs_struct r = Regs();
  r.eflags = ZF;
  Outcome back = Emulate({0x3E, 0x74, 0xF0}, r, &mem);
  EXPECT_TRUE(back.taken);
  EXPECT_EQ(back.regs.rip, kRip + 3 - 0x10);
}

TEST(BranchEmulator, LoopFamilyDecrementsRcxAndJrcxzDoesNot) {
  MapMemory mem;
  user_regs_struct r = Regs();
  r.rcx = 2;
  Outcome a = Emulate({0xE2, 0xFE}, r, &mem);  // loop $-0 (to itself)
  EXPECT_TRUE(a.taken);
  EXPECT_EQ(a.regs.rcx, 1u);
  EXPECT_EQ(a.regs.rip, kRip);
  r.rcx = 1;
  Outcome b = Emulate({0xE2, 0xFE}, r, &mem);
  EXPECT_FALSE(b.taken);
  EXPECT_EQ(b.regs.rcx, 0u);
  EXPECT_EQ(b.regs.rip, kRip + 2);
  r.rcx = 5;
  r.eflags = 0;
  EXPECT_FALSE(Emulate({0xE1, 0x10}, r, &mem).taken);  // loope, ZF=0
  EXPECT_TRUE(Emulate({0xE0, 0x10}, r, &mem).taken);   // loopne, ZF=0
  r.eflags = 0x40;
  EXPECT_TRUE(Emulate({0xE1, 0x10}, r, &mem).taken);
  EXPECT_FALSE(Emulate({0xE0, 0x10}, r, &mem).taken);
  r.rcx = 0;
  Outcome z = Emulate({0xE3, 0x10}, r, &mem);  // jrcxz
  EXPECT_TRUE(z.taken);
  EXPECT_EQ(z.regs.rcx, 0u);
  EXPECT_EQ(z.regs.rip, kRip + 2 + 0x10);
  r.rcx = 7;
  EXPECT_FALSE(Emulate({0xE3, 0x10}, r, &mem).taken);
}

TEST(BranchEmulator, CallPushesTheReturnAddressAndRetPopsIt) {
  MapMemory mem;
  user_regs_struct r = Regs();
  // call rel32 (+0x1000)
  Outcome c = Emulate({0xE8, 0x00, 0x10, 0x00, 0x00}, r, &mem);
  ASSERT_EQ(c.result, EmuResult::kDone);
  EXPECT_EQ(c.regs.rip, kRip + 5 + 0x1000);
  EXPECT_EQ(c.regs.rsp, r.rsp - 8);
  EXPECT_EQ(mem.Get64(r.rsp - 8), kRip + 5);
  // ret from there, and "rep ret" (F3 C3), and ret 0x10.
  Outcome ret = Emulate({0xC3}, c.regs, &mem);
  ASSERT_EQ(ret.result, EmuResult::kDone);
  EXPECT_EQ(ret.regs.rip, kRip + 5);
  EXPECT_EQ(ret.regs.rsp, r.rsp);
  EXPECT_EQ(Emulate({0xF3, 0xC3}, c.regs, &mem).regs.rip, kRip + 5);
  Outcome reti = Emulate({0xC2, 0x10, 0x00}, c.regs, &mem);
  EXPECT_EQ(reti.regs.rip, kRip + 5);
  EXPECT_EQ(reti.regs.rsp, r.rsp + 0x10);
  // jmp rel8 / rel32 change nothing but RIP.
  Outcome j = Emulate({0xEB, 0x80}, r, &mem);
  EXPECT_EQ(j.regs.rip, kRip + 2 - 0x80);
  EXPECT_EQ(j.regs.rsp, r.rsp);
  EXPECT_EQ(Emulate({0xE9, 0xFB, 0xFF, 0xFF, 0xFF}, r, &mem).regs.rip, kRip);
}

TEST(BranchEmulator, IndirectThroughRegistersAndEveryAddressingForm) {
  MapMemory mem;
  user_regs_struct r = Regs();
  r.rax = 0x500000;
  r.r11 = 0x600000;
  r.rbx = 0x10000;
  r.rsi = 3;
  r.r9 = 2;
  r.fs_base = 0x7000000;
  // jmp rax (FF E0), call r11 (41 FF D3), notrack jmp rax (3E FF E0).
  EXPECT_EQ(Emulate({0xFF, 0xE0}, r, &mem).regs.rip, 0x500000u);
  Outcome cr = Emulate({0x41, 0xFF, 0xD3}, r, &mem);
  EXPECT_EQ(cr.regs.rip, 0x600000u);
  EXPECT_EQ(mem.Get64(r.rsp - 8), kRip + 3);
  EXPECT_EQ(Emulate({0x3E, 0xFF, 0xE0}, r, &mem).regs.rip, 0x500000u);
  // jmp *0x2fe2(%rip) (FF 25 E2 2F 00 00): a PLT slot.
  mem.Put64(kRip + 6 + 0x2fe2, 0x7f0000001234);
  EXPECT_EQ(Emulate({0xFF, 0x25, 0xE2, 0x2F, 0x00, 0x00}, r, &mem).regs.rip,
            0x7f0000001234u);
  // call *0x10(%rax) (FF 50 10): a vtable.
  mem.Put64(0x500010, 0x401234);
  Outcome v = Emulate({0xFF, 0x50, 0x10}, r, &mem);
  EXPECT_EQ(v.regs.rip, 0x401234u);
  EXPECT_EQ(mem.Get64(r.rsp - 8), kRip + 3);
  // jmp *0x100(%rbx,%rsi,8) (FF A4 F3 00 01 00 00): a jump table.
  mem.Put64(0x10000 + 0x100 + 3 * 8, 0x402000);
  EXPECT_EQ(Emulate({0xFF, 0xA4, 0xF3, 0x00, 0x01, 0x00, 0x00}, r, &mem).regs.rip,
            0x402000u);
  // jmp *(%r11,%r9,4) with REX.X and REX.B (43 FF 24 8B).
  mem.Put64(0x600000 + 2 * 4, 0x403000);
  EXPECT_EQ(Emulate({0x43, 0xFF, 0x24, 0x8B}, r, &mem).regs.rip, 0x403000u);
  // jmp *0x2000(,%rsi,8): SIB without a base (FF 24 F5 00 20 00 00).
  mem.Put64(0x2000 + 3 * 8, 0x404000);
  EXPECT_EQ(Emulate({0xFF, 0x24, 0xF5, 0x00, 0x20, 0x00, 0x00}, r, &mem).regs.rip,
            0x404000u);
  // call *%fs:0x28 (64 FF 14 25 28 00 00 00): FS-relative.
  mem.Put64(0x7000000 + 0x28, 0x405000);
  EXPECT_EQ(Emulate({0x64, 0xFF, 0x14, 0x25, 0x28, 0x00, 0x00, 0x00}, r, &mem).regs.rip,
            0x405000u);
  // call *8(%rsp): the address uses RSP before the push.
  mem.Put64(r.rsp + 8, 0x406000);
  Outcome s = Emulate({0xFF, 0x54, 0x24, 0x08}, r, &mem);
  EXPECT_EQ(s.regs.rip, 0x406000u);
  EXPECT_EQ(s.regs.rsp, r.rsp - 8);
}

TEST(BranchEmulator, FaultsAndUnsupportedFormsChangeNothing) {
  MapMemory mem;
  user_regs_struct r = Regs();
  // ret with an unreadable stack, jmp through an unreadable slot, call onto
  // an unwritable stack: kFault, registers and memory as they were.
  for (const std::vector<uint8_t>& code :
       std::vector<std::vector<uint8_t>>{{0xC3}, {0xFF, 0x25, 0, 0, 0, 0}}) {
    DecodedInsn d;
    ASSERT_GT(DecodeInsn(code.data(), code.size(), &d), 0);
    user_regs_struct x = r;
    x.rip = kRip;
    bool taken = false;
    EXPECT_EQ(EmulateBranch(code.data(), code.size(), d, &x, &mem, &taken),
              EmuResult::kFault);
    EXPECT_EQ(std::memcmp(&x.rsp, &r.rsp, sizeof(r.rsp)), 0);
    EXPECT_EQ(x.rip, kRip);
  }
  mem.read_only = true;
  const std::vector<uint8_t> call = {0xE8, 0, 0, 0, 0};
  DecodedInsn d;
  ASSERT_GT(DecodeInsn(call.data(), call.size(), &d), 0);
  user_regs_struct x = r;
  x.rip = kRip;
  bool taken = false;
  EXPECT_EQ(EmulateBranch(call.data(), call.size(), d, &x, &mem, &taken), EmuResult::kFault);
  EXPECT_EQ(x.rsp, r.rsp);
  EXPECT_TRUE(mem.bytes.empty());
  // Not emulated: far and 16-bit forms, 67h loop, traps, non-branches.
  const std::vector<std::vector<uint8_t>> no = {
      {0xCB},              // lret
      {0xFF, 0x2D, 0, 0, 0, 0},  // ljmp *
      {0x48, 0xCF},        // iretq
      {0x0F, 0x05},        // syscall
      {0x66, 0xC3},        // 16-bit ret
      {0x66, 0xFF, 0xE0},  // 16-bit jmp ax
      {0x67, 0xE2, 0x10},  // loop with ECX
      {0x67, 0xFF, 0x25, 0, 0, 0, 0},  // jmp *disp32(%eip)
      {0x90},              // nop
  };
  for (const auto& c : no) {
    DecodedInsn k;
    ASSERT_GT(DecodeInsn(c.data(), c.size(), &k), 0);
    EXPECT_FALSE(CanEmulateBranch(c.data(), c.size(), k)) << int(c[0]) << " " << int(c[1 % c.size()]);
    user_regs_struct y = r;
    y.rip = kRip;
    EXPECT_EQ(EmulateBranch(c.data(), c.size(), k, &y, &mem, &taken), EmuResult::kUnsupported);
    EXPECT_EQ(y.rip, kRip);
  }
}

}  // namespace
}  // namespace pfm
