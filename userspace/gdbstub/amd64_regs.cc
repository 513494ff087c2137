#include "userspace/gdbstub/amd64_regs.h"

#include <cstdint>
#include <cstring>

namespace pfm::gdbstub {

// The block is little-endian and so is every host that has user_regs_struct
// for x86-64, so fields are copied byte for byte.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "amd64 register block is little-endian");

namespace {

// Sizes in regno order (see the table in amd64_regs.h).
constexpr size_t SizeOf(int regno) {
  if (regno <= kAmd64Rip) return 8;
  if (regno < kAmd64St0) return 4;
  if (regno < kAmd64Fctrl) return 10;
  if (regno < kAmd64Xmm0) return 4;
  if (regno < kAmd64Mxcsr) return 16;
  if (regno == kAmd64Mxcsr) return 4;
  return 8;
}

constexpr size_t OffsetOf(int regno) {
  size_t off = 0;
  for (int r = 0; r < regno; ++r) off += SizeOf(r);
  return off;
}

static_assert(OffsetOf(kAmd64NumRegs) == kAmd64RegsBytes, "register table and size disagree");

// rax..r15 in GDB's order; user_regs_struct orders them differently.
unsigned long long user_regs_struct::*const kGprs[16] = {
    &user_regs_struct::rax, &user_regs_struct::rbx, &user_regs_struct::rcx,
    &user_regs_struct::rdx, &user_regs_struct::rsi, &user_regs_struct::rdi,
    &user_regs_struct::rbp, &user_regs_struct::rsp, &user_regs_struct::r8,
    &user_regs_struct::r9,  &user_regs_struct::r10, &user_regs_struct::r11,
    &user_regs_struct::r12, &user_regs_struct::r13, &user_regs_struct::r14,
    &user_regs_struct::r15,
};

// eflags cs ss ds es fs gs: 4 bytes each in the block, 8 in user_regs_struct.
unsigned long long user_regs_struct::*const kNarrow[7] = {
    &user_regs_struct::eflags, &user_regs_struct::cs, &user_regs_struct::ss,
    &user_regs_struct::ds,     &user_regs_struct::es, &user_regs_struct::fs,
    &user_regs_struct::gs,
};

void Put(std::string* out, int regno, uint64_t v) {
  std::memcpy(&(*out)[OffsetOf(regno)], &v, SizeOf(regno));
}

uint64_t Get(std::string_view raw, int regno) {
  uint64_t v = 0;
  std::memcpy(&v, raw.data() + OffsetOf(regno), SizeOf(regno));
  return v;
}

// Replaces the low `bits` of *field, as gdbserver writes a narrower register
// into a wider slot.
template <typename T>
void SetLow(T* field, uint64_t v, int bits) {
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  *field = static_cast<T>((static_cast<uint64_t>(*field) & ~mask) | (v & mask));
}

// gdbserver/i387-fp.cc i387_ftag: 0 valid, 1 zero, 2 special.
unsigned ClassifyX87(const unsigned char* raw) {
  const bool integer = (raw[7] & 0x80) != 0;
  const unsigned exponent = ((raw[9] & 0x7fu) << 8) | raw[8];
  uint64_t fraction = 0;
  std::memcpy(&fraction, raw, 8);
  fraction &= ~(uint64_t{1} << 63);
  if (exponent == 0x7fff) return 2;
  if (exponent == 0) return (fraction == 0 && !integer) ? 1 : 2;
  return integer ? 0 : 2;
}

}  // namespace

unsigned FullTagWord(unsigned abridged, unsigned fstat, const unsigned char st_space[128]) {
  // The abridged tag is indexed by physical register; st_space by stack
  // position, and physical register i is ST((i - TOP) mod 8).
  const unsigned top = (fstat >> 11) & 7;
  unsigned full = 0;
  for (unsigned i = 0; i < 8; ++i) {
    unsigned tag = 3;
    if (abridged & (1u << i)) tag = ClassifyX87(st_space + ((i + 8 - top) % 8) * 16);
    full |= tag << (2 * i);
  }
  return full;
}

unsigned AbridgedTag(unsigned full) {
  unsigned abridged = 0;
  for (unsigned i = 0; i < 8; ++i)
    if (((full >> (2 * i)) & 3) != 3) abridged |= 1u << i;
  return abridged;
}

std::string EncodeAmd64(const user_regs_struct& regs, const user_fpregs_struct& fpregs) {
  std::string out(kAmd64RegsBytes, '\0');
  for (int i = 0; i < 16; ++i) Put(&out, i, regs.*kGprs[i]);
  Put(&out, kAmd64Rip, regs.rip);
  for (int i = 0; i < 7; ++i) Put(&out, kAmd64Eflags + i, regs.*kNarrow[i] & 0xffffffff);

  const auto* st = reinterpret_cast<const unsigned char*>(fpregs.st_space);
  for (int i = 0; i < 8; ++i)
    std::memcpy(&out[OffsetOf(kAmd64St0 + i)], st + i * 16, SizeOf(kAmd64St0 + i));
  Put(&out, kAmd64Fctrl, fpregs.cwd);
  Put(&out, kAmd64Fstat, fpregs.swd);
  Put(&out, kAmd64Ftag, FullTagWord(fpregs.ftw & 0xff, fpregs.swd, st));
  Put(&out, kAmd64Fiseg, (fpregs.rip >> 32) & 0xffff);
  Put(&out, kAmd64Fioff, fpregs.rip & 0xffffffff);
  Put(&out, kAmd64Foseg, (fpregs.rdp >> 32) & 0xffff);
  Put(&out, kAmd64Fooff, fpregs.rdp & 0xffffffff);
  Put(&out, kAmd64Fop, fpregs.fop & 0x7ff);

  const auto* xmm = reinterpret_cast<const unsigned char*>(fpregs.xmm_space);
  for (int i = 0; i < 16; ++i)
    std::memcpy(&out[OffsetOf(kAmd64Xmm0 + i)], xmm + i * 16, SizeOf(kAmd64Xmm0 + i));
  Put(&out, kAmd64Mxcsr, fpregs.mxcsr);
  Put(&out, kAmd64OrigRax, regs.orig_rax);
  Put(&out, kAmd64FsBase, regs.fs_base);
  Put(&out, kAmd64GsBase, regs.gs_base);
  return out;
}

bool DecodeAmd64(std::string_view raw, user_regs_struct* regs, user_fpregs_struct* fpregs) {
  if (raw.size() != kAmd64RegsBytes) return false;
  for (int i = 0; i < 16; ++i) regs->*kGprs[i] = Get(raw, i);
  regs->rip = Get(raw, kAmd64Rip);
  for (int i = 0; i < 7; ++i) SetLow(&(regs->*kNarrow[i]), Get(raw, kAmd64Eflags + i), 32);

  auto* st = reinterpret_cast<unsigned char*>(fpregs->st_space);
  for (int i = 0; i < 8; ++i)
    std::memcpy(st + i * 16, raw.data() + OffsetOf(kAmd64St0 + i), SizeOf(kAmd64St0 + i));
  SetLow(&fpregs->cwd, Get(raw, kAmd64Fctrl), 16);
  SetLow(&fpregs->swd, Get(raw, kAmd64Fstat), 16);
  SetLow(&fpregs->ftw, AbridgedTag(static_cast<unsigned>(Get(raw, kAmd64Ftag))), 8);
  // FXSAVE64's 64-bit pointers: offset in bits 0-31, "segment" in 32-47.
  SetLow(&fpregs->rip, Get(raw, kAmd64Fioff), 32);
  SetLow(&fpregs->rip, ((Get(raw, kAmd64Fiseg) & 0xffff) << 32) | (fpregs->rip & 0xffffffff), 48);
  SetLow(&fpregs->rdp, Get(raw, kAmd64Fooff), 32);
  SetLow(&fpregs->rdp, ((Get(raw, kAmd64Foseg) & 0xffff) << 32) | (fpregs->rdp & 0xffffffff), 48);
  SetLow(&fpregs->fop, Get(raw, kAmd64Fop), 11);

  auto* xmm = reinterpret_cast<unsigned char*>(fpregs->xmm_space);
  for (int i = 0; i < 16; ++i)
    std::memcpy(xmm + i * 16, raw.data() + OffsetOf(kAmd64Xmm0 + i), SizeOf(kAmd64Xmm0 + i));
  fpregs->mxcsr = static_cast<unsigned>(Get(raw, kAmd64Mxcsr));
  regs->orig_rax = Get(raw, kAmd64OrigRax);
  regs->fs_base = Get(raw, kAmd64FsBase);
  regs->gs_base = Get(raw, kAmd64GsBase);
  return true;
}

bool RegisterSlice(int regno, size_t* offset, size_t* size) {
  if (regno < 0 || regno >= kAmd64NumRegs) return false;
  *offset = OffsetOf(regno);
  *size = SizeOf(regno);
  return true;
}

}  // namespace pfm::gdbstub
