// GDB's register block ('g'/'G', 'p'/'P') for an amd64 Linux thread when the
// stub sends no target description: GDB then uses its default amd64-linux
// description, built by amd64_create_target_description (gdb/arch/amd64.c)
// from the features core, sse, linux and segments, in that order, numbering
// registers consecutively:
//
//   regno  name                       bytes  source (gdb/features/i386/)
//   0-15   rax rbx rcx rdx rsi rdi     8     64bit-core.xml
//          rbp rsp r8..r15
//   16     rip                         8     64bit-core.xml
//   17-23  eflags cs ss ds es fs gs    4     64bit-core.xml
//   24-31  st0..st7                   10     64bit-core.xml (i387_ext)
//   32-39  fctrl fstat ftag fiseg      4     64bit-core.xml
//          fioff foseg fooff fop
//   40-55  xmm0..xmm15                16     64bit-sse.xml (xmm0 regnum=40)
//   56     mxcsr                       4     64bit-sse.xml
//   57     orig_rax                    8     64bit-linux.xml (regnum=57)
//   58-59  fs_base gs_base             8     64bit-segments.xml
//
// The 'g' block is every register in regno order, little-endian: 560 bytes.
// gdbserver fills the same slots (gdbserver/linux-x86-low.cc x86_64_regmap:
// 0-23 and 57-59 from user_regs_struct, the rest from the FXSAVE area).
//
// Pure functions; no ptrace here.
#ifndef PFM_USERSPACE_GDBSTUB_AMD64_REGS_H_
#define PFM_USERSPACE_GDBSTUB_AMD64_REGS_H_

#include <sys/user.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace pfm::gdbstub {

inline constexpr int kAmd64NumRegs = 60;
inline constexpr size_t kAmd64RegsBytes = 560;

// Register numbers GDB uses in 'p'/'P' and in stop replies (T05 10:...).
enum Amd64Reg {
  kAmd64Rax = 0,
  kAmd64Rsp = 7,
  kAmd64Rip = 16,
  kAmd64Eflags = 17,
  kAmd64St0 = 24,
  kAmd64Fctrl = 32,
  kAmd64Fstat = 33,
  kAmd64Ftag = 34,
  kAmd64Fiseg = 35,
  kAmd64Fioff = 36,
  kAmd64Foseg = 37,
  kAmd64Fooff = 38,
  kAmd64Fop = 39,
  kAmd64Xmm0 = 40,
  kAmd64Mxcsr = 56,
  kAmd64OrigRax = 57,
  kAmd64FsBase = 58,
  kAmd64GsBase = 59,
};

// The 560-byte block for a stopped thread's PTRACE_GETREGS/GETFPREGS state.
// The x87 registers are converted as gdbserver's i387_fxsave_to_cache
// (gdbserver/i387-fp.cc) does: fctrl/fstat zero-extended, ftag expanded to
// the full two-bits-per-register tag word, fioff/fooff the low 32 bits of the
// 64-bit FXSAVE instruction/operand pointers and fiseg/foseg their bits
// 32-47, fop its low 11 bits.
std::string EncodeAmd64(const user_regs_struct& regs, const user_fpregs_struct& fpregs);

// The inverse, for 'G': raw must be exactly kAmd64RegsBytes, else false and
// nothing is changed. *regs and *fpregs come in holding the thread's current
// state; bits the block does not carry keep their values (the upper halves
// of eflags and the segment slots, the 6 pad bytes after each st register,
// fop bits 11-15, pointer bits 48-63, mxcsr_mask, padding), as gdbserver's
// i387_cache_to_fxsave keeps them. ftag goes back to the abridged FXSAVE
// form: a register is valid unless its tag is 3 (empty).
bool DecodeAmd64(std::string_view raw, user_regs_struct* regs, user_fpregs_struct* fpregs);

// Where register regno lives in the block, for 'p'/'P'. False for regno
// outside [0, kAmd64NumRegs).
bool RegisterSlice(int regno, size_t* offset, size_t* size);

// The full i387 tag word GDB shows as ftag, from FXSAVE's abridged tag
// (one valid bit per physical register), TOP (fstat bits 11-13) and the
// register contents (st_space: eight 16-byte slots in stack order, st0
// first). Per register: 3 empty; else 0 valid, 1 zero, 2 special (NaN,
// infinity, denormal, unnormal), classified as gdbserver's i387_ftag does.
unsigned FullTagWord(unsigned abridged, unsigned fstat, const unsigned char st_space[128]);

// Back to the abridged form: bit i set unless tag i is 3.
unsigned AbridgedTag(unsigned full);

}  // namespace pfm::gdbstub

#endif  // PFM_USERSPACE_GDBSTUB_AMD64_REGS_H_
