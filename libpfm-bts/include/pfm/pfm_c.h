/*
 * libpfm-bts C API: a small C interface over the C++ client (pfm/client.h)
 * and ring reader (pfm/ring_reader.h), for programs that are not C++.
 *
 * Names start with pfmc_ (libpfm4 owns pfm_). Every function that can fail
 * returns a status code: 0 (PFMC_OK) on success, else an absl status code
 * number (PFMC_INVALID_ARGUMENT, PFMC_PERMISSION_DENIED, ...), the same code
 * pfmd sent. The message of the calling thread's last failure is
 * pfmc_last_error() (valid until that thread's next pfmc_ call); outputs are
 * written only on success.
 *
 * Ownership: objects returned through an out-parameter belong to the caller
 * and are freed with the matching pfmc_*_close / pfmc_free. A ring stays
 * valid after its client is closed (it holds its own mapping), but the
 * sessions a client created without "detached": true end when it closes.
 *
 * Thread-safety: a pfmc_client or pfmc_ring is used by one thread at a time;
 * distinct objects may be used concurrently.
 */
#ifndef PFM_LIBPFM_BTS_INCLUDE_PFM_PFM_C_H_
#define PFM_LIBPFM_BTS_INCLUDE_PFM_PFM_C_H_

#include <stddef.h>
#include <stdint.h>

#include "kernel/uapi/pfm_uapi.h" /* struct pfm_record, PFM_REC_* */

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes (absl::StatusCode values). */
enum {
  PFMC_OK = 0,
  PFMC_CANCELLED = 1,
  PFMC_UNKNOWN = 2,
  PFMC_INVALID_ARGUMENT = 3,
  PFMC_DEADLINE_EXCEEDED = 4,
  PFMC_NOT_FOUND = 5,
  PFMC_ALREADY_EXISTS = 6,
  PFMC_PERMISSION_DENIED = 7,
  PFMC_RESOURCE_EXHAUSTED = 8,
  PFMC_FAILED_PRECONDITION = 9,
  PFMC_ABORTED = 10,
  PFMC_OUT_OF_RANGE = 11,
  PFMC_UNIMPLEMENTED = 12,
  PFMC_INTERNAL = 13,
  PFMC_UNAVAILABLE = 14,
  PFMC_DATA_LOSS = 15,
  PFMC_UNAUTHENTICATED = 16
};

typedef struct pfmc_client pfmc_client;
typedef struct pfmc_ring pfmc_ring;

/* The message of this thread's last failure ("" if none); the code's name
 * ("PERMISSION_DENIED"). Both strings are owned by the library. */
const char* pfmc_last_error(void);
const char* pfmc_code_name(int code);

/* Connects to pfmd at `socket_path`; NULL means $PFMD_SOCKET, else
 * /run/pfmd.sock. PFMC_UNAVAILABLE when nothing answers. */
int pfmc_connect(const char* socket_path, pfmc_client** out);
/* Closes the connection (non-detached sessions end). NULL is a no-op. */
void pfmc_close(pfmc_client* client);

/* Creates a session from a JSON spec, the object pfmctl sends, e.g.
 * {"pid": 1234, "bts": "lossless", "buffer_bytes": 1048576,
 *  "counters": ["instructions"], "detached": false}
 * (keys: role, pid, cpu, bts, buffer_bytes, filter, format, block,
 * pebs_event, pebs_period, counters, breakpoints, pinned, detached). */
int pfmc_session_create(pfmc_client* client, const char* spec_json,
                        uint64_t* id);
int pfmc_session_kill(pfmc_client* client, uint64_t id);
/* Any request: `op` plus the members of `args_json` (an object, or NULL).
 * *result_json is the reply's result as JSON text; free it with pfmc_free. */
int pfmc_call(pfmc_client* client, const char* op, const char* args_json,
              char** result_json);
void pfmc_free(void* p);

/* Maps a session's record ring. With `drain` nonzero pfmd first moves what
 * the hardware buffered into the ring. */
int pfmc_ring_map(pfmc_client* client, uint64_t id, int drain,
                  pfmc_ring** out);
void pfmc_ring_close(pfmc_ring* ring);
/* Lossless rings: takes up to `max` records, oldest first, into `buf` and
 * frees their space for the writer; *n says how many (0: none yet). History
 * rings always yield 0: use pfmc_ring_snapshot. PFMC_DATA_LOSS if the ring
 * holds malformed data. */
int pfmc_ring_read(pfmc_ring* ring, struct pfm_record* buf, size_t max,
                   size_t* n);
/* Any ring, without consuming: every readable record, oldest first, in a
 * new array (*recs, free with pfmc_free; NULL when *n is 0). */
int pfmc_ring_snapshot(pfmc_ring* ring, struct pfm_record** recs, size_t* n);
/* The writer's counters and whether the stream has ended (task exited). */
uint64_t pfmc_ring_records(const pfmc_ring* ring);
uint64_t pfmc_ring_lost(const pfmc_ring* ring);
int pfmc_ring_ended(const pfmc_ring* ring);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PFM_LIBPFM_BTS_INCLUDE_PFM_PFM_C_H_ */
