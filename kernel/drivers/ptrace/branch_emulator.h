// Emulation of x86-64 near branches from a stopped thread's registers, for
// branch stepping (docs/host_drivers.md, "Branch stepping"): a tracer that
// stops a thread only at the branch that ends a basic block carries the
// branch out itself (next RIP, and RSP/RCX and the stack for call, ret and
// loop) instead of single-stepping it, so each branch costs one stop.
//
// Handled: jcc rel8/rel32 (the 16 conditions from RFLAGS), loop, loope,
// loopne, jrcxz; jmp rel8/rel32; call rel32; ret and ret imm16; jmp and call
// through a register or memory (ModR/M and SIB, RIP-relative, FS/GS
// segment override); any of them with the branch-hint (2E/3E, including
// NOTRACK), BND (F2) and REP (F3, "rep ret") prefixes, which do not change
// what the branch does. Not handled (CanEmulateBranch false: the tracer
// single-steps them): far transfers, iret, traps, and the forms whose
// meaning depends on a prefix that is rare in 64-bit code: 66h (16-bit
// operand, which Intel and AMD treat differently), 67h (32-bit address or
// count register), LOCK.
//
// Facts from the Intel SDM Vol. 2 (Jcc, LOOP/LOOPcc, JMP, CALL, RET; Table
// 2-2/2-3 for ModR/M and SIB; Table B-1 for the condition codes) and Vol. 1
// §3.4.3 (RFLAGS bits). Pure functions over the given state; the memory
// callbacks are the only side effects.
#ifndef PFM_KERNEL_DRIVERS_PTRACE_BRANCH_EMULATOR_H_
#define PFM_KERNEL_DRIVERS_PTRACE_BRANCH_EMULATOR_H_

#include <sys/user.h>

#include <cstddef>
#include <cstdint>

#include "kernel/drivers/ptrace/branch_decoder.h"

namespace pfm {

// The traced thread's memory: 0 or a negative errno; all or nothing.
class EmuMemory {
 public:
  virtual ~EmuMemory() = default;
  virtual int Read(uint64_t addr, void* buf, size_t n) = 0;
  virtual int Write(uint64_t addr, const void* buf, size_t n) = 0;
};

enum class EmuResult {
  kDone,         // registers (and for a call, the stack) updated
  kUnsupported,  // not a form this emulates: nothing changed
  kFault,        // a memory access failed (the instruction would fault):
                 // nothing changed
};

// Whether EmulateBranch handles the instruction `code` (n bytes, decoded as
// `d`), whatever the registers.
bool CanEmulateBranch(const uint8_t* code, size_t n, const DecodedInsn& d);

// Carries out the branch at regs->rip (whose bytes are `code`, decoded as
// `d`): sets regs->rip to where it goes, and RSP, RCX and the stack as the
// instruction would. *taken says whether control left the fall-through
// path (always for unconditional transfers).
EmuResult EmulateBranch(const uint8_t* code, size_t n, const DecodedInsn& d,
                        user_regs_struct* regs, EmuMemory* mem, bool* taken);

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_PTRACE_BRANCH_EMULATOR_H_
