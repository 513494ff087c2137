#include "kernel/drivers/ptrace/branch_decoder.h"

#include <cerrno>
#include <cstring>

namespace pfm {
namespace {

// Immediate-size codes for the opcode tables.
enum Imm : uint8_t {
  kI0 = 0,   // none
  kI8,       // ib
  kI16,      // iw
  kIz,       // iz: 2 with 66h, else 4
  kIv,       // iv: 8 with REX.W, else iz
  kI24,      // iw + ib (enter)
  kMoffs,    // moffs: 8, or 4 with 67h
  kIF6,      // group 3 (F6): ib only for /0 /1 (test)
  kIF7,      // group 3 (F7): iz only for /0 /1 (test)
};

struct OpInfo {
  bool modrm;
  Imm imm;
  bool invalid;
};

// One-byte map, SDM Vol. 2 Table A-2, 64-bit mode. Prefix bytes (26 2E 36 3E
// 40-4F 64-67 F0 F2 F3) and escapes (0F C4 C5 62 8F) are handled before the
// table is consulted.
OpInfo OneByte(uint8_t op) {
  const uint8_t lo = op & 7;
  if (op < 0x40) {
    if (op == 0x06 || op == 0x07 || op == 0x0E || op == 0x16 || op == 0x17 ||
        op == 0x1E || op == 0x1F || op == 0x27 || op == 0x2F || op == 0x37 ||
        op == 0x3F)
      return {false, kI0, true};  // push/pop seg, daa/das/aaa/aas: #UD in 64
    if (lo < 4) return {true, kI0, false};  // ALU r/m forms
    if (lo == 4) return {false, kI8, false};  // ALU AL, ib
    return {false, kIz, false};               // ALU eAX, iz
  }
  if (op >= 0x50 && op <= 0x5F) return {false, kI0, false};
  if (op >= 0x70 && op <= 0x7F) return {false, kI8, false};  // jcc rel8
  if (op >= 0x84 && op <= 0x8F) return {true, kI0, false};
  if (op >= 0x90 && op <= 0x9F) return {false, kI0, op == 0x9A};
  if (op >= 0xB0 && op <= 0xB7) return {false, kI8, false};
  if (op >= 0xB8 && op <= 0xBF) return {false, kIv, false};
  if (op >= 0xD8 && op <= 0xDF) return {true, kI0, false};  // x87
  switch (op) {
    case 0x60: case 0x61: return {false, kI0, true};
    case 0x63: return {true, kI0, false};
    case 0x68: return {false, kIz, false};
    case 0x69: return {true, kIz, false};
    case 0x6A: return {false, kI8, false};
    case 0x6B: return {true, kI8, false};
    case 0x6C: case 0x6D: case 0x6E: case 0x6F: return {false, kI0, false};
    case 0x80: return {true, kI8, false};
    case 0x81: return {true, kIz, false};
    case 0x82: return {false, kI0, true};
    case 0x83: return {true, kI8, false};
    case 0xA0: case 0xA1: case 0xA2: case 0xA3: return {false, kMoffs, false};
    case 0xA8: return {false, kI8, false};
    case 0xA9: return {false, kIz, false};
    case 0xC0: case 0xC1: return {true, kI8, false};
    case 0xC2: return {false, kI16, false};
    case 0xC3: return {false, kI0, false};
    case 0xC6: return {true, kI8, false};
    case 0xC7: return {true, kIz, false};
    case 0xC8: return {false, kI24, false};
    case 0xC9: return {false, kI0, false};
    case 0xCA: return {false, kI16, false};
    case 0xCB: case 0xCC: return {false, kI0, false};
    case 0xCD: return {false, kI8, false};
    case 0xCE: return {false, kI0, true};
    case 0xCF: return {false, kI0, false};
    case 0xD0: case 0xD1: case 0xD2: case 0xD3: return {true, kI0, false};
    case 0xD4: case 0xD5: case 0xD6: return {false, kI0, true};
    case 0xD7: return {false, kI0, false};
    case 0xE0: case 0xE1: case 0xE2: case 0xE3: return {false, kI8, false};
    case 0xE4: case 0xE5: case 0xE6: case 0xE7: return {false, kI8, false};
    case 0xE8: case 0xE9: return {false, kIz, false};
    case 0xEA: return {false, kI0, true};
    case 0xEB: return {false, kI8, false};
    case 0xF6: return {true, kIF6, false};
    case 0xF7: return {true, kIF7, false};
    case 0xFE: case 0xFF: return {true, kI0, false};
    default: break;
  }
  // A4-A7, AA-AF, EC-EF, F1, F4, F5, F8-FD: no operands.
  return {false, kI0, false};
}

// Two-byte map (0F xx), SDM Vol. 2 Table A-3.
OpInfo TwoByte(uint8_t op) {
  if (op >= 0x80 && op <= 0x8F) return {false, kIz, false};  // jcc rel32
  if (op >= 0xC8 && op <= 0xCF) return {false, kI0, false};  // bswap
  if (op >= 0x30 && op <= 0x37) return {false, kI0, op == 0x36};
  switch (op) {
    case 0x04: case 0x0A: case 0x0C: case 0x24: case 0x25: case 0x26:
    case 0x27: case 0x39: case 0x3B: case 0x3C: case 0x3D: case 0x3E:
    case 0x3F: case 0x7A: case 0x7B: case 0xA6: case 0xA7:
      return {false, kI0, true};
    case 0x05: case 0x06: case 0x07: case 0x08: case 0x09: case 0x0B:
    case 0x0E: case 0x77: case 0xA0: case 0xA1: case 0xA2: case 0xA8:
    case 0xA9: case 0xAA:
      return {false, kI0, false};
    case 0x0F:  // 3DNow!: modrm then the real opcode as an ib suffix
    case 0x70: case 0x71: case 0x72: case 0x73: case 0xA4: case 0xAC:
    case 0xBA: case 0xC2: case 0xC4: case 0xC5: case 0xC6:
      return {true, kI8, false};
    default:
      return {true, kI0, false};
  }
}

// VEX/EVEX-encoded map 1 (0F) opcodes that carry an ib.
bool Map1HasImm8(uint8_t op) {
  return (op >= 0x70 && op <= 0x73) || op == 0xC2 || op == 0xC4 ||
         op == 0xC5 || op == 0xC6;
}

// For a non-branch: whether a completed single-step of it might not stop
// at rip + length, or its length might differ on some CPU. See
// DecodedInsn::sequential for the list and the reasons.
bool MayNotFallThrough(int map, uint8_t op, uint8_t modrm, bool rep) {
  if (map == 0) {
    const bool string_op = (op >= 0xA4 && op <= 0xA7) ||
                           (op >= 0xAA && op <= 0xAF) ||
                           (op >= 0x6C && op <= 0x6F);
    if (string_op && rep) return true;
    if (op >= 0x6C && op <= 0x6F) return true;  // ins/outs
    if ((op >= 0xE4 && op <= 0xE7) || (op >= 0xEC && op <= 0xEF))
      return true;  // in/out
    if ((op == 0xC6 || op == 0xC7) && modrm == 0xF8) return true;  // xabort/xbegin
    if (op == 0x90 && rep) return true;  // pause: a hypervisor may exit on it
    return op == 0x8E || op == 0x9D || op == 0xF4 || op == 0xFA ||
           op == 0xFB;  // mov sreg, popf, hlt, cli, sti
  }
  if (map == 1) {
    switch (op) {
      case 0x00: case 0x01:              // groups 6, 7 (UMIP, TSX, ...)
      case 0x06: case 0x07: case 0x08: case 0x09: case 0x0B:
      case 0x20: case 0x21: case 0x22: case 0x23:  // mov cr/dr
      case 0x30: case 0x32: case 0x35: case 0x37:  // wrmsr rdmsr sysexit getsec
      // Emulated by a hypervisor after a VM exit, which may lose the
      // single-step trap: on this project's VM a step over CPUID runs one
      // more instruction before it stops.
      case 0x31: case 0x33: case 0xA2:   // rdtsc, rdpmc, cpuid
      case 0x78: case 0x79:              // vmread/vmwrite; AMD extrq/insertq
      case 0xA1: case 0xA9: case 0xAA:   // pop fs, pop gs, rsm
      case 0xB9: case 0xFF:              // ud1, ud0
        return true;
      default:
        return false;
    }
  }
  if (map == 2 || map == 3) return false;  // 0F38, 0F3A (legacy or VEX/EVEX)
  return true;  // EVEX maps 5/6, XOP: sized, but rare enough not to trust
}

// Not sequential (above), but runs natively like any other non-branch: a
// REP string instruction or PAUSE (what a step does with them is the
// reason), CPUID, RDTSC, RDPMC (a hypervisor's emulation may lose a step
// trap, not the instruction's effect).
bool NativeOnly(int map, uint8_t op, bool rep) {
  if (map == 0) {
    const bool string_op = (op >= 0xA4 && op <= 0xA7) || (op >= 0xAA && op <= 0xAF);
    return (string_op && rep) || (op == 0x90 && rep);
  }
  return map == 1 && (op == 0xA2 || op == 0x31 || op == 0x33);
}

}  // namespace

int DecodeInsn(const uint8_t* code, size_t avail, DecodedInsn* out) {
  const size_t limit = avail < 15 ? avail : 15;
  size_t i = 0;
  bool opsize = false, addrsize = false, rex_w = false, rep = false;
  // Legacy prefixes (SDM Vol. 2 §2.1.1) in any order; a REX only counts
  // when it is the last byte before the opcode (§2.2.1).
  for (;;) {
    if (i >= limit) return avail < 15 ? -ENODATA : -EINVAL;
    const uint8_t b = code[i];
    if (b == 0x66) {
      opsize = true;
    } else if (b == 0x67) {
      addrsize = true;
    } else if (b == 0xF2 || b == 0xF3) {
      rep = true;
    } else if (b == 0xF0 || b == 0x26 || b == 0x2E || b == 0x36 ||
               b == 0x3E || b == 0x64 || b == 0x65) {
    } else if ((b & 0xF0) == 0x40) {
      rex_w = (b & 0x08) != 0;
      if (i + 1 < limit) {
        const uint8_t n = code[i + 1];
        const bool next_is_prefix =
            n == 0x66 || n == 0x67 || n == 0xF0 || n == 0xF2 || n == 0xF3 ||
            n == 0x26 || n == 0x2E || n == 0x36 || n == 0x3E || n == 0x64 ||
            n == 0x65 || (n & 0xF0) == 0x40;
        if (next_is_prefix) rex_w = false;  // ignored REX
      }
    } else {
      break;
    }
    ++i;
  }

  DecodedInsn d;
  const uint8_t op = code[i++];
  OpInfo info{};
  int map = 0;  // 0 = one-byte, 1 = 0F, 2 = 0F38, 3 = 0F3A, 8/9/10 = XOP
  uint8_t opcode = op;
  auto need = [&](size_t n) { return i + n <= limit; };
  auto missing = [&]() { return avail < 15 ? -ENODATA : -EINVAL; };

  if (op == 0x0F) {
    if (!need(1)) return missing();
    opcode = code[i++];
    if (opcode == 0x38) {
      if (!need(1)) return missing();
      opcode = code[i++];
      map = 2;
      info = {true, kI0, false};
    } else if (opcode == 0x3A) {
      if (!need(1)) return missing();
      opcode = code[i++];
      map = 3;
      info = {true, kI8, false};
    } else {
      map = 1;
      info = TwoByte(opcode);
    }
  } else if (op == 0xC5 || op == 0xC4 || op == 0x62 ||
             (op == 0x8F && need(1) && (code[i] & 0x38) != 0)) {
    // VEX (C5: 1 payload byte, map 0F; C4: 2 bytes, map in bits 4:0),
    // EVEX (62: 3 payload bytes, map in bits 2:0), XOP (8F: 2 bytes, map
    // 8/9/A). SDM Vol. 2 §2.3, §2.7; AMD APM Vol. 3 §1.8 for XOP. None of
    // these encodes a control transfer.
    size_t payload = op == 0xC5 ? 1 : op == 0x62 ? 3 : 2;
    if (!need(payload + 1)) return missing();
    if (op == 0xC5) map = 1;
    else if (op == 0xC4) map = code[i] & 0x1F;
    else if (op == 0x62) map = code[i] & 0x07;
    else map = 0x100 | (code[i] & 0x1F);
    rex_w = op == 0xC4 ? (code[i + 1] & 0x80) != 0 : false;
    i += payload;
    opcode = code[i++];
    info = {true, kI0, false};
    if (map == 1) {
      if (opcode == 0x77 && op != 0x62) info.modrm = false;  // vzeroupper/all
      if (Map1HasImm8(opcode)) info.imm = kI8;
    } else if (map == 3 || map == 0x108) {
      info.imm = kI8;
    } else if (map == 0x10A) {
      info.imm = kIz;
      opsize = false;
    } else if (map != 2 && map != 5 && map != 6 && map != 0x109) {
      return -EINVAL;  // reserved map
    }
  } else {
    info = OneByte(op);
  }
  if (info.invalid) return -EINVAL;

  uint8_t modrm = 0;
  if (info.modrm) {
    if (!need(1)) return missing();
    modrm = code[i++];
    const uint8_t mod = modrm >> 6, rm = modrm & 7;
    if (mod != 3) {
      // 64- and 32-bit addressing share this layout (SDM Vol. 2 Table 2-2,
      // 2-3): rm=4 adds a SIB; mod=0 rm=5 is RIP-relative disp32; SIB base=5
      // with mod=0 is disp32.
      size_t disp = mod == 1 ? 1 : mod == 2 ? 4 : 0;
      if (rm == 4) {
        if (!need(1)) return missing();
        const uint8_t sib = code[i++];
        if (mod == 0 && (sib & 7) == 5) disp = 4;
      } else if (mod == 0 && rm == 5) {
        disp = 4;
      }
      if (!need(disp)) return missing();
      i += disp;
    }
  }

  // REX.W wins over 66h (SDM Vol. 2 §2.2.1.2): a 64-bit operand takes an
  // imm32 (iz) or imm64 (iv), never an imm16.
  const size_t iz = opsize && !rex_w ? 2 : 4;
  size_t imm = 0;
  switch (info.imm) {
    case kI0: break;
    case kI8: imm = 1; break;
    case kI16: imm = 2; break;
    case kIz: imm = iz; break;
    case kIv: imm = rex_w ? 8 : iz; break;
    case kI24: imm = 3; break;
    case kMoffs: imm = addrsize ? 4 : 8; break;
    case kIF6: imm = ((modrm >> 3) & 7) < 2 ? 1 : 0; break;
    case kIF7: imm = ((modrm >> 3) & 7) < 2 ? iz : 0; break;
  }
  // Near branches ignore 66h in 64-bit mode on Intel (SDM Vol. 2, JMP/CALL:
  // "operand size fixed at 64 bits"): rel32 stays 4 bytes.
  const bool near_rel32 = (map == 0 && (op == 0xE8 || op == 0xE9)) ||
                          (map == 1 && opcode >= 0x80 && opcode <= 0x8F);
  if (near_rel32) imm = 4;
  if (!need(imm)) return missing();
  const size_t imm_at = i;
  i += imm;

  d.length = static_cast<uint8_t>(i);
  auto rel8 = [&]() { return static_cast<int32_t>(static_cast<int8_t>(code[imm_at])); };
  auto rel32 = [&]() {
    int32_t v;
    std::memcpy(&v, code + imm_at, 4);
    return v;
  };
  if (map == 0) {
    const uint8_t reg = (modrm >> 3) & 7;
    if ((op >= 0x70 && op <= 0x7F) || (op >= 0xE0 && op <= 0xE3)) {
      d.kind = BranchKind::kCondRel;
      d.rel = rel8();
    } else if (op == 0xEB) {
      d.kind = BranchKind::kJmpRel;
      d.rel = rel8();
    } else if (op == 0xE9) {
      d.kind = BranchKind::kJmpRel;
      d.rel = rel32();
    } else if (op == 0xE8) {
      d.kind = BranchKind::kCallRel;
      d.rel = rel32();
    } else if (op == 0xC3 || op == 0xC2) {
      d.kind = BranchKind::kRet;
    } else if (op == 0xCB || op == 0xCA) {
      d.kind = BranchKind::kFarRet;
    } else if (op == 0xCF) {
      d.kind = BranchKind::kIret;
    } else if (op == 0xCC || op == 0xCD || op == 0xF1) {
      d.kind = BranchKind::kTrap;
    } else if (op == 0xFF) {
      if (reg == 2) d.kind = BranchKind::kCallInd;
      else if (reg == 3) d.kind = BranchKind::kFarCallInd;
      else if (reg == 4) d.kind = BranchKind::kJmpInd;
      else if (reg == 5) d.kind = BranchKind::kFarJmpInd;
    }
  } else if (map == 1) {
    if (opcode >= 0x80 && opcode <= 0x8F) {
      d.kind = BranchKind::kCondRel;
      d.rel = rel32();
    } else if (opcode == 0x05 || opcode == 0x34) {
      d.kind = BranchKind::kTrap;  // syscall, sysenter
    }
  }
  d.sequential = d.kind == BranchKind::kNone &&
                 !MayNotFallThrough(map, opcode, modrm, rep);
  d.native = d.sequential || (d.kind == BranchKind::kNone && NativeOnly(map, opcode, rep));
  *out = d;
  return d.length;
}

bool MayFallThrough(BranchKind kind) {
  return kind == BranchKind::kCondRel || kind == BranchKind::kTrap;
}

bool BranchTaken(const DecodedInsn& insn, uint64_t rip, uint64_t next_rip) {
  if (insn.kind == BranchKind::kNone) return false;
  if (MayFallThrough(insn.kind)) return next_rip != rip + insn.length;
  return true;
}

const char* BranchKindName(BranchKind kind) {
  switch (kind) {
    case BranchKind::kNone: return "none";
    case BranchKind::kCondRel: return "jcc";
    case BranchKind::kJmpRel: return "jmp";
    case BranchKind::kCallRel: return "call";
    case BranchKind::kJmpInd: return "jmp*";
    case BranchKind::kCallInd: return "call*";
    case BranchKind::kFarJmpInd: return "ljmp*";
    case BranchKind::kFarCallInd: return "lcall*";
    case BranchKind::kRet: return "ret";
    case BranchKind::kFarRet: return "lret";
    case BranchKind::kIret: return "iret";
    case BranchKind::kTrap: return "trap";
  }
  return "?";
}

}  // namespace pfm
