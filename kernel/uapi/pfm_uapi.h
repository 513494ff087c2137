/* SPDX-License-Identifier: MIT */
/*
 * pfm uapi: the ABI between kernel/ (the arbitration core) and userspace/.
 *
 * Plain C layouts, fixed sizes, little-endian, no pointers: everything here
 * may cross a process boundary (socket message or shared-memory ring).
 *
 * Error convention: every kernel/ entry point returns 0 or a positive count on
 * success and a negative errno on failure (-EBUSY, -ENOSPC, -EINVAL, -EPERM,
 * -ENOMEM, -EOPNOTSUPP, -ENOENT, -EAGAIN). userspace/ converts that to an
 * absl::Status at exactly one place (userspace/pfmd/errno_status.h).
 */
#ifndef PFM_KERNEL_UAPI_PFM_UAPI_H_
#define PFM_KERNEL_UAPI_PFM_UAPI_H_

#include <linux/types.h>

/* 2: the compact short-branch form gained time +-1 and predicted-flip bits
 * 3: the compact reset marker (lead byte 0x0D), so that one encoding of a
 *    batch can be copied into several rings (docs/rings.md) */
#define PFM_UAPI_VERSION 4

/* ------------------------------------------------------------------------ */
/* Raw hardware layouts (what a driver writes into a DS area).               */
/* ------------------------------------------------------------------------ */

/*
 * 64-bit BTS record. Source: Intel SDM Vol. 3B, "Branch Trace Store (BTS)":
 * three quadwords {last branch from, last branch to, flags}; flags bit 4 is
 * "branch predicted".
 */
struct pfm_bts_raw {
  __u64 from;
  __u64 to;
  __u64 flags;
};
#define PFM_BTS_RAW_PREDICTED (1ULL << 4)
/* pfm's soft BTS only (hardware leaves the bit 0, reserved): not a branch
 * but a gap in the trace of an address filter, {from: where the untraced run
 * began, to: where tracing resumed}; it becomes a PFM_REC_GAP record. */
#define PFM_BTS_RAW_GAP (1ULL << 63)

/*
 * PEBS record, format 3 (Skylake). Source: Intel SDM Vol. 3B, "PEBS Data
 * Record Format" for Skylake microarchitecture: general registers, then
 * IA32_PERF_GLOBAL_STATUS (applicable counters), data linear address, data
 * source encoding, latency, eventing IP, TX abort info, TSC. 200 bytes.
 */
struct pfm_pebs_raw {
  __u64 flags;
  __u64 ip;
  __u64 gpr[16]; /* rax rbx rcx rdx rsi rdi rbp rsp r8..r15 */
  __u64 applicable_counters;
  __u64 data_linear_address;
  __u64 data_source;
  __u64 latency;
  __u64 eventing_ip;
  __u64 tx_abort;
  __u64 tsc;
};

/*
 * 64-bit DS save area. Source: Intel SDM Vol. 3B, "DS Save Area" (64-bit
 * format): BTS base/index/absolute maximum/interrupt threshold, the same four
 * for PEBS, then the PEBS counter reset values. Addresses here are byte
 * offsets into the buffers a driver was given (the model keeps no pointers).
 */
#define PFM_DS_MAX_PEBS_COUNTERS 8

/*
 * x86-64 address space: user addresses are below 2^47 with 4-level paging
 * and below 2^56 with 5-level; kernel addresses start at 0xffff800000000000
 * (4-level) or 0xff00000000000000 (5-level); everything between is
 * non-canonical and never executes (Intel SDM Vol. 1, 3.3.7.1 "Canonical
 * Addressing"; Linux Documentation/arch/x86/x86_64/mm.rst). So one boundary
 * classifies a branch address under both paging modes: below it is user
 * mode, at or above it kernel mode.
 */
#define PFM_X86_USER_ADDR_END (1ULL << 56)
#define PFM_ADDR_IS_KERNEL(a) ((__u64)(a) >= PFM_X86_USER_ADDR_END)
struct pfm_ds_save_area {
  __u64 bts_buffer_base;
  __u64 bts_index;
  __u64 bts_absolute_maximum;
  __u64 bts_interrupt_threshold;
  __u64 pebs_buffer_base;
  __u64 pebs_index;
  __u64 pebs_absolute_maximum;
  __u64 pebs_interrupt_threshold;
  __u64 pebs_counter_reset[PFM_DS_MAX_PEBS_COUNTERS];
};

/* ------------------------------------------------------------------------ */
/* Arch-independent records (what consumers read).                           */
/* ------------------------------------------------------------------------ */

enum pfm_record_type {
  PFM_REC_PAD = 0, /* compact encoding only: rest of the chunk is padding */
  PFM_REC_BRANCH = 1,
  PFM_REC_PEBS = 2,
  PFM_REC_SWITCH_OUT = 3,
  PFM_REC_SWITCH_IN = 4,
  PFM_REC_LOST = 5,
  PFM_REC_COUNTER = 6,
  PFM_REC_THROTTLE = 7,
  PFM_REC_RESIZED = 8,
  PFM_REC_EXIT = 9, /* the traced task exited; u.exit.status */
  /* A request of the session went on (misc PFM_MISC_SCHED_ON) or off the
   * hardware of `cpu` at `time`: the arbiter's schedule, so a reader sees
   * when a multiplexed counter counted (u.sched). pid/tid: the task whose
   * context holds the request, 0 for a CPU context. Only to consumers that
   * ask (PFM_CONSUMER_SCHEDULE). */
  PFM_REC_SCHEDULE = 10,
  /* An address filter's gap (soft BTS, docs/host_drivers.md "Address
   * filters"): the task ran untraced from u.gap.from (the first address
   * outside the filter, or where it was when tracing began) and tracing
   * resumed at u.gap.to at `time`. Branches between are not recorded. */
  PFM_REC_GAP = 11,
  /* The task exec'd a new program at `time` (its maps are new: a reader
   * names the addresses that follow with the maps of after this time). */
  PFM_REC_EXEC = 12,
  PFM_REC_TYPE_MAX = 13,
};

/* misc bits, by type */
#define PFM_MISC_BRANCH_PREDICTED (1u << 0)
#define PFM_MISC_BRANCH_KERNEL_FROM (1u << 1) /* from-address is kernel mode */
#define PFM_MISC_SWITCH_PREEMPT (1u << 0)     /* involuntary switch */
#define PFM_MISC_SCHED_ON (1u << 0)           /* SCHEDULE: went on (else off) */

/*
 * The fixed encoding: every record is exactly 64 bytes, so record i of a ring
 * is at byte offset 64 * i (random access by index). time is nanoseconds on
 * the session's clock (virtual time for the sim driver, CLOCK_MONOTONIC on
 * the host); cpu, pid, tid are always present.
 */
struct pfm_record {
  __u16 type; /* enum pfm_record_type */
  __u16 cpu;
  __u32 misc; /* PFM_MISC_* */
  __u64 time;
  __u32 pid;
  __u32 tid;
  union {
    struct {
      __u64 from;
      __u64 to;
      __u64 flags; /* raw hardware flags, as recorded */
    } branch;
    struct {
      __u64 ip;
      __u64 addr;
      __u64 latency;
      __u64 data_src;
      __u32 event; /* arbiter request id that owned the counter */
      __u32 counter; /* hardware counter index */
    } pebs;
    struct {
      __u32 other_pid; /* SWITCH_OUT: next task; SWITCH_IN: previous task */
      __u32 other_tid;
    } sw;
    struct {
      __u64 count; /* records lost since the previous LOST record */
    } lost;
    struct {
      __u64 value;
      __u64 time_enabled;
      __u64 time_running;
      __u32 request; /* arbiter request id */
      __u32 _pad;
    } counter;
    struct {
      __u64 old_bytes;
      __u64 new_bytes;
    } resized;
    struct {
      __s64 status; /* wait status of the exited task */
    } exit;
    struct {
      __u64 from; /* the untraced run began here */
      __u64 to;   /* tracing resumed here */
    } gap;
    struct {
      __u32 request; /* arbiter request id */
      __u32 slot;    /* counter: GP i or 32 + fixed i; breakpoint: DR i */
    } sched;
    __u8 raw[40];
  } u;
};

#define PFM_RECORD_FIXED_SIZE 64

/* ------------------------------------------------------------------------ */
/* Consumer rings in shared memory.                                          */
/* ------------------------------------------------------------------------ */

/*
 * A ring is one memfd: a 4096-byte header page, then data_bytes of data
 * (a power of two, a multiple of PFM_RING_CHUNK). Positions (head, tail) are
 * byte counts since the ring was created; the byte at position p lives at
 * data[p & (data_bytes - 1)].
 *
 * The data is a sequence of chunks of PFM_RING_CHUNK bytes. A record never
 * straddles a chunk boundary; in the compact encoding the codec state resets
 * at every chunk start (a sync point), so a reader can start decoding at any
 * chunk, and at every reset marker inside a chunk. A PFM_REC_PAD byte (0)
 * ends a chunk early.
 *
 * Memory ordering (writer = kernel/ds, reader = client):
 *   writer: write record bytes; store-release head.
 *   reader: load-acquire head; read bytes in [tail, head); (lossless)
 *           store-release tail.  The writer load-acquires tail before
 *           reusing space.
 *   history mode: the writer owns tail too (oldest valid position) and
 *   overwrites; it store-releases tail *before* overwriting bytes below it.
 *   A reader copies [tail0, head), then load-acquires tail again as tail1 and
 *   keeps only what lies at or above tail1 (anything below may be torn).
 */
#define PFM_RING_MAGIC 0x474e5246u /* "FRNG" */
#define PFM_RING_HEADER_BYTES 4096
#define PFM_RING_CHUNK 4096

enum pfm_format { PFM_FORMAT_FIXED = 1, PFM_FORMAT_COMPACT = 2 };
enum pfm_ring_mode { PFM_RING_HISTORY = 1, PFM_RING_LOSSLESS = 2 };

#define PFM_RING_F_ENDED (1u << 0) /* no more records will be written */
#define PFM_RING_F_BLOCK (1u << 1) /* writer holds the task instead of losing */

struct pfm_ring_header {
  __u32 magic;
  __u16 version;
  __u8 format; /* enum pfm_format */
  __u8 mode;   /* enum pfm_ring_mode */
  __u32 header_bytes;
  __u32 chunk_bytes;
  __u64 data_bytes;
  /* history mode: a snapshot returns at most this many newest records (the
   * data area is larger, so dropping the oldest chunk never cuts into them);
   * 0 in lossless mode. */
  __u64 history_records;
  __u8 _pad0[32];
  /* cache line 1: written by the writer */
  __u64 head;
  __u64 records;     /* records written since creation */
  __u64 lost;        /* records lost (lossless, not block) */
  __u64 overwritten; /* records overwritten (history) */
  __u32 flags;       /* PFM_RING_F_* */
  __u32 _pad1;
  __u8 _pad2[24];
  /* cache line 2: tail (reader-owned in lossless, writer-owned in history) */
  __u64 tail;
  __u8 _pad3[56];
};

/* ------------------------------------------------------------------------ */
/* Requests.                                                                 */
/* ------------------------------------------------------------------------ */

enum pfm_context_kind { PFM_CTX_TASK = 1, PFM_CTX_CPU = 2 };
enum pfm_bts_mode { PFM_BTS_OFF = 0, PFM_BTS_HISTORY = 1, PFM_BTS_LOSSLESS = 2 };
enum pfm_filter {
  PFM_FILTER_USER = 1,
  PFM_FILTER_KERNEL = 2,
  PFM_FILTER_ALL = 3,
};

/* A consumer of a context's Debug Store stream. */
struct pfm_consumer_req {
  __u32 ctx_kind; /* enum pfm_context_kind */
  __s32 pid;      /* PFM_CTX_TASK */
  __s32 cpu;      /* PFM_CTX_CPU */
  __u32 bts;      /* enum pfm_bts_mode */
  __u32 filter;   /* enum pfm_filter */
  __u32 format;   /* enum pfm_format */
  __u32 flags;    /* PFM_CONSUMER_* */
  __s32 tid;      /* PFM_CTX_TASK: 0 = every task of the context; else
                     only this thread's records (perf's -t), and the
                     ring ends when it exits. Was padding (0) before. */
  __u64 ring_bytes;  /* data bytes of the consumer ring */
  __u64 pebs_config; /* 0 = no PEBS; else the event encoding */
  __u64 pebs_period;
};
#define PFM_CONSUMER_BLOCK (1u << 0)   /* lossless: hold the task, don't lose */
#define PFM_CONSUMER_SWITCHES (1u << 1) /* also deliver SWITCH_OUT/IN */
#define PFM_CONSUMER_SCHEDULE (1u << 2) /* also deliver the session's SCHEDULE */

enum pfm_request_kind { PFM_REQ_COUNTER = 1, PFM_REQ_BREAKPOINT = 2 };
enum pfm_bp_kind { PFM_BP_R = 1, PFM_BP_W = 2, PFM_BP_RW = 3, PFM_BP_X = 4 };

#define PFM_REQ_PINNED (1u << 0)
#define PFM_REQ_NO_MULTIPLEX (1u << 1) /* flexible in name, pinned in effect */
#define PFM_REQ_KERNEL (1u << 2)       /* kernel address / kernel mode */
#define PFM_REQ_PEBS (1u << 3)         /* needs a PEBS-capable counter */

/* A counter or debug-register request to the arbiter. */
struct pfm_pmu_req {
  __u32 kind;  /* enum pfm_request_kind */
  __u32 flags; /* PFM_REQ_* */
  __u32 ctx_kind;
  __s32 pid;
  __s32 cpu;
  __u32 bp_kind; /* enum pfm_bp_kind */
  __u64 config;  /* counter: event encoding (perf attr.config) */
  __u32 type;    /* counter: perf attr.type */
  __u32 bp_len;  /* breakpoint: 1, 2, 4, 8 */
  __u64 bp_addr;
};

#endif /* PFM_KERNEL_UAPI_PFM_UAPI_H_ */
