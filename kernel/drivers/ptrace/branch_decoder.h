// x86-64 instruction length and control-transfer classification, for soft
// BTS: given the bytes at an address (up to 15), say whether the instruction
// transfers control and how long it is, so a single-step tracer can tell a
// taken branch from a fall-through by comparing the next RIP with
// rip + length.
//
// Source: Intel SDM Vol. 2, Appendix A (opcode maps) and Vol. 2 ch. 2
// (instruction format: legacy prefixes, REX, ModR/M, SIB, displacement,
// immediate; VEX/EVEX). Only 64-bit mode is decoded.
//
// Syscalls: `syscall`, `sysenter`, `int n`, `int3`, `int1` and `into` are
// classified kTrap. A trap normally returns to the next instruction and is
// then not a branch; when it does not (rt_sigreturn, signal delivery on the
// way out) the tracer records it as a taken branch {from = the trap
// instruction, to = where user mode resumed}. Kernel addresses are never
// visible to a ptrace tracer, so no record has a kernel `to`.
//
// Pure functions over a byte span; thread-safe; no allocation.
#ifndef PFM_KERNEL_DRIVERS_PTRACE_BRANCH_DECODER_H_
#define PFM_KERNEL_DRIVERS_PTRACE_BRANCH_DECODER_H_

#include <cstddef>
#include <cstdint>

namespace pfm {

enum class BranchKind : uint8_t {
  kNone = 0,     // not a control transfer
  kCondRel,      // jcc rel8/rel32, loop/loope/loopne, jrcxz: may fall through
  kJmpRel,       // jmp rel8/rel32
  kCallRel,      // call rel32
  kJmpInd,       // FF /4
  kCallInd,      // FF /2
  kFarJmpInd,    // FF /5
  kFarCallInd,   // FF /3
  kRet,          // C3, C2 iw
  kFarRet,       // CB, CA iw
  kIret,         // CF (iretq with REX.W)
  kTrap,         // syscall, sysenter, int n, int3, int1, into: see above
};

struct DecodedInsn {
  uint8_t length = 0;   // 1..15 once decoded
  BranchKind kind = BranchKind::kNone;
  int32_t rel = 0;      // displacement of kCondRel/kJmpRel/kCallRel
  // True when the instruction, if it completes in user mode, always leaves
  // RIP at rip + length and a single-step of it stops there: a tracer may
  // then compute the next RIP instead of reading it. False for every
  // control transfer and trap, and (conservatively) for anything that may
  // not: REP/REPNE string instructions (a step runs one iteration), MOV SS
  // (delays the step trap by one instruction), POPF, CLI/STI/HLT, port
  // I/O, TSX (XBEGIN/XABORT/XEND abort to a fallback), the 0F 00/0F 01
  // system groups (UMIP emulation by the kernel advances RIP itself),
  // CPUID/RDTSC/RDPMC/PAUSE (a hypervisor that emulates them after a VM
  // exit may lose the step trap: seen for CPUID on this project's VM),
  // SYSRET/SYSEXIT/RDMSR/WRMSR/GETSEC/RSM, MOV to/from CR/DR, POP FS/GS,
  // the UD0/UD1/UD2 opcodes, 0F 78/0F 79 (AMD EXTRQ/INSERTQ carry two
  // immediates there), XOP, and VEX/EVEX maps 5 and 6.
  bool sequential = false;
  // True when a non-branch may run natively inside a block that a tracer
  // lets run at full speed between branches (branch stepping): every
  // sequential instruction, and those that are not sequential only because
  // of what a single-step trap does with them: REP/REPNE string
  // instructions (natively they run to the end and fall through), PAUSE,
  // CPUID, RDTSC and RDPMC. Never for branches, traps, anything that may
  // change RIP or the trap flag by itself (POPF, MOV SS, XBEGIN, the
  // system groups) or that is undecodable.
  bool native = false;
};

// Decodes the instruction starting at code[0]; `avail` bytes are readable.
// Returns its length (1..15) and fills *out, or -EINVAL for an opcode that is
// invalid in 64-bit mode or longer than 15 bytes, or -ENODATA when `avail`
// ends before the instruction does.
int DecodeInsn(const uint8_t* code, size_t avail, DecodedInsn* out);

// Whether executing `insn` at `rip` and arriving at `next_rip` was a taken
// branch: always for unconditional transfers, never for kNone, and for
// kCondRel/kTrap when next_rip != rip + length.
bool BranchTaken(const DecodedInsn& insn, uint64_t rip, uint64_t next_rip);

// True for kinds that may fall through (kCondRel, kTrap).
bool MayFallThrough(BranchKind kind);

const char* BranchKindName(BranchKind kind);

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_PTRACE_BRANCH_DECODER_H_
