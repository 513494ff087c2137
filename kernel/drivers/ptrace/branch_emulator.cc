#include "kernel/drivers/ptrace/branch_emulator.h"

#include <cstring>

namespace pfm {
namespace {

// RFLAGS bits (SDM Vol. 1 §3.4.3).
constexpr uint64_t kCF = 1ull << 0;
constexpr uint64_t kPF = 1ull << 2;
constexpr uint64_t kZF = 1ull << 6;
constexpr uint64_t kSF = 1ull << 7;
constexpr uint64_t kOF = 1ull << 11;

// The instruction's shape, as far as emulating a near branch needs it.
struct Shape {
  bool opsize = false, addrsize = false, lock = false;
  int seg = 0;  // 0, or 0x64 (FS) / 0x65 (GS)
  bool rex_b = false, rex_x = false;
  bool twobyte = false;
  uint8_t op = 0;
  size_t modrm_at = 0;  // index of the ModR/M byte (FF forms)
};

bool Parse(const uint8_t* code, size_t n, Shape* s) {
  const size_t limit = n < 15 ? n : 15;
  size_t i = 0;
  for (;; ++i) {
    if (i >= limit) return false;
    const uint8_t b = code[i];
    if ((b & 0xF0) == 0x40) {  // REX: counts only as the last byte before the opcode
      s->rex_b = (b & 1) != 0;
      s->rex_x = (b & 2) != 0;
      continue;
    }
    const bool legacy = b == 0x66 || b == 0x67 || b == 0xF0 || b == 0x64 || b == 0x65 ||
                        b == 0xF2 || b == 0xF3 || b == 0x2E || b == 0x3E ||
                        b == 0x26 || b == 0x36;
    if (!legacy) break;
    s->rex_b = s->rex_x = false;  // a REX before a legacy prefix is ignored
    if (b == 0x66) s->opsize = true;
    else if (b == 0x67) s->addrsize = true;
    else if (b == 0xF0) s->lock = true;
    else if (b == 0x64 || b == 0x65) s->seg = b;
    // F2/F3 (BND, REP), 2E/3E (hints, NOTRACK), 26/36: no effect here.
  }
  s->op = code[i++];
  if (s->op == 0x0F) {
    if (i >= limit) return false;
    s->twobyte = true;
    s->op = code[i++];
  }
  s->modrm_at = i;
  return true;
}

uint64_t Reg(const user_regs_struct& r, int n) {
  switch (n) {
    case 0: return r.rax;
    case 1: return r.rcx;
    case 2: return r.rdx;
    case 3: return r.rbx;
    case 4: return r.rsp;
    case 5: return r.rbp;
    case 6: return r.rsi;
    case 7: return r.rdi;
    case 8: return r.r8;
    case 9: return r.r9;
    case 10: return r.r10;
    case 11: return r.r11;
    case 12: return r.r12;
    case 13: return r.r13;
    case 14: return r.r14;
    default: return r.r15;
  }
}

// Condition `cc` (the low nibble of Jcc's opcode) of RFLAGS: SDM Vol. 2
// Appendix B, Table B-1.
bool Condition(int cc, uint64_t f) {
  const bool cf = f & kCF, pf = f & kPF, zf = f & kZF, sf = f & kSF, of = f & kOF;
  bool r = false;
  switch (cc >> 1) {
    case 0: r = of; break;               // O / NO
    case 1: r = cf; break;               // B / AE
    case 2: r = zf; break;               // E / NE
    case 3: r = cf || zf; break;         // BE / A
    case 4: r = sf; break;               // S / NS
    case 5: r = pf; break;               // P / NP
    case 6: r = sf != of; break;         // L / GE
    default: r = zf || sf != of; break;  // LE / G
  }
  return (cc & 1) ? !r : r;
}

enum class Form { kNo, kJcc, kLoop, kJmpRel, kCallRel, kRet, kJmpInd, kCallInd };

Form FormOf(const Shape& s, const DecodedInsn& d) {
  if (s.lock || s.opsize) return Form::kNo;
  switch (d.kind) {
    case BranchKind::kCondRel:
      if (!s.twobyte && s.op >= 0xE0 && s.op <= 0xE3)
        return s.addrsize ? Form::kNo : Form::kLoop;
      return Form::kJcc;
    case BranchKind::kJmpRel: return Form::kJmpRel;
    case BranchKind::kCallRel: return Form::kCallRel;
    case BranchKind::kRet: return Form::kRet;
    case BranchKind::kJmpInd: return Form::kJmpInd;
    case BranchKind::kCallInd: return Form::kCallInd;
    default: return Form::kNo;
  }
}

// The target of FF /2 or FF /4: a register, or 8 bytes at the effective
// address. False with *fault when the read fails, or for a form not taken.
bool IndirectTarget(const uint8_t* code, size_t n, const Shape& s, uint64_t next,
                    const user_regs_struct& r, EmuMemory* mem, uint64_t* target,
                    bool* fault) {
  *fault = false;
  size_t i = s.modrm_at;
  if (i >= n) return false;
  const uint8_t modrm = code[i++];
  const int mod = modrm >> 6, rm = modrm & 7;
  if (mod == 3) {
    *target = Reg(r, rm | (s.rex_b ? 8 : 0));
    return true;
  }
  uint64_t ea = 0;
  size_t disp_bytes = mod == 1 ? 1 : mod == 2 ? 4 : 0;
  bool rip_relative = false;
  if (rm == 4) {
    if (i >= n) return false;
    const uint8_t sib = code[i++];
    const int scale = sib >> 6;
    const int index = ((sib >> 3) & 7) | (s.rex_x ? 8 : 0);
    const int base = sib & 7;
    if (index != 4) ea += Reg(r, index) << scale;
    if (base == 5 && mod == 0) {
      disp_bytes = 4;
    } else {
      ea += Reg(r, base | (s.rex_b ? 8 : 0));
    }
  } else if (rm == 5 && mod == 0) {
    rip_relative = true;
    disp_bytes = 4;
  } else {
    ea += Reg(r, rm | (s.rex_b ? 8 : 0));
  }
  if (i + disp_bytes > n) return false;
  int64_t disp = 0;
  if (disp_bytes == 1) {
    disp = static_cast<int8_t>(code[i]);
  } else if (disp_bytes == 4) {
    int32_t v;
    std::memcpy(&v, code + i, 4);
    disp = v;
  }
  if (rip_relative) {
    if (s.addrsize) return false;
    ea = next + static_cast<uint64_t>(disp);
  } else {
    ea += static_cast<uint64_t>(disp);
    if (s.addrsize) ea &= 0xffffffffull;
  }
  if (s.seg == 0x64) ea += r.fs_base;
  if (s.seg == 0x65) ea += r.gs_base;
  uint64_t v = 0;
  if (mem->Read(ea, &v, sizeof(v)) != 0) {
    *fault = true;
    return false;
  }
  *target = v;
  return true;
}

}  // namespace

bool CanEmulateBranch(const uint8_t* code, size_t n, const DecodedInsn& d) {
  Shape s;
  if (d.length == 0 || !Parse(code, n, &s)) return false;
  const Form f = FormOf(s, d);
  if (f == Form::kNo) return false;
  if (f == Form::kJmpInd || f == Form::kCallInd) {
    if (s.modrm_at >= n) return false;
    const uint8_t modrm = code[s.modrm_at];
    // RIP-relative with a 32-bit address size is not taken.
    if (s.addrsize && (modrm >> 6) == 0 && (modrm & 7) == 5) return false;
  }
  return true;
}

EmuResult EmulateBranch(const uint8_t* code, size_t n, const DecodedInsn& d,
                        user_regs_struct* regs, EmuMemory* mem, bool* taken) {
  Shape s;
  if (d.length == 0 || !Parse(code, n, &s)) return EmuResult::kUnsupported;
  const Form f = FormOf(s, d);
  const uint64_t rip = regs->rip;
  const uint64_t next = rip + d.length;
  const uint64_t rel_target = next + static_cast<int64_t>(d.rel);
  user_regs_struct r = *regs;
  *taken = true;
  switch (f) {
    case Form::kNo:
      return EmuResult::kUnsupported;
    case Form::kJcc:
      *taken = Condition(s.op & 0xF, r.eflags);
      r.rip = *taken ? rel_target : next;
      break;
    case Form::kLoop: {
      if (s.op == 0xE3) {  // jrcxz
        *taken = r.rcx == 0;
      } else {
        r.rcx -= 1;  // loop/loope/loopne decrement RCX, flags untouched
        const bool zf = (r.eflags & kZF) != 0;
        *taken = r.rcx != 0 && (s.op == 0xE2 || (s.op == 0xE1 ? zf : !zf));
      }
      r.rip = *taken ? rel_target : next;
      break;
    }
    case Form::kJmpRel:
      r.rip = rel_target;
      break;
    case Form::kCallRel:
    case Form::kCallInd: {
      uint64_t target = rel_target;
      if (f == Form::kCallInd) {
        bool fault = false;
        if (!IndirectTarget(code, n, s, next, r, mem, &target, &fault))
          return fault ? EmuResult::kFault : EmuResult::kUnsupported;
      }
      const uint64_t sp = r.rsp - 8;
      if (mem->Write(sp, &next, sizeof(next)) != 0) return EmuResult::kFault;
      r.rsp = sp;
      r.rip = target;
      break;
    }
    case Form::kJmpInd: {
      bool fault = false;
      uint64_t target = 0;
      if (!IndirectTarget(code, n, s, next, r, mem, &target, &fault))
        return fault ? EmuResult::kFault : EmuResult::kUnsupported;
      r.rip = target;
      break;
    }
    case Form::kRet: {
      uint64_t target = 0;
      if (mem->Read(r.rsp, &target, sizeof(target)) != 0) return EmuResult::kFault;
      uint64_t pop = 8;
      if (!s.twobyte && s.op == 0xC2) {
        if (s.modrm_at + 2 > n) return EmuResult::kUnsupported;
        uint16_t imm;
        std::memcpy(&imm, code + s.modrm_at, 2);
        pop += imm;
      }
      r.rsp += pop;
      r.rip = target;
      break;
    }
  }
  *regs = r;
  return EmuResult::kDone;
}

}  // namespace pfm
