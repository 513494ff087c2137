/*
 * Example: the C API (pfm/pfm_c.h). Same as trace_sim_task.cc, in C:
 *
 *   trace_sim_task_c --socket /tmp/pfmd.sock [--pid 1000] [--ns 5000000]
 *
 * Creates a lossless BTS session on a simulated task, advances the simulated
 * machine, reads the records from the ring and prints a summary.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pfm/pfm_c.h"

static int die(const char* what, int code) {
  fprintf(stderr, "trace_sim_task_c: %s: %s: %s\n", what, pfmc_code_name(code),
          pfmc_last_error());
  return 1;
}

int main(int argc, char** argv) {
  const char* socket = NULL;
  int pid = 1000;
  unsigned long long ns = 5000000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--socket") == 0) socket = argv[i + 1];
    else if (strcmp(argv[i], "--pid") == 0) pid = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--ns") == 0) ns = strtoull(argv[i + 1], NULL, 10);
  }
  if (socket == NULL || argc % 2 == 0) {
    fprintf(stderr, "usage: trace_sim_task_c --socket PATH [--pid N] [--ns NS]\n");
    return 2;
  }

  pfmc_client* client = NULL;
  int rc = pfmc_connect(socket, &client);
  if (rc != PFMC_OK) return die("connect", rc);

  char spec[256];
  snprintf(spec, sizeof(spec),
           "{\"pid\": %d, \"bts\": \"lossless\", \"buffer_bytes\": 4194304,"
           " \"detached\": false}",
           pid);
  uint64_t id = 0;
  if ((rc = pfmc_session_create(client, spec, &id)) != PFMC_OK)
    return die("session_create", rc);

  char args[96];
  snprintf(args, sizeof(args), "{\"action\": \"run\", \"ns\": %llu}", ns);
  if ((rc = pfmc_call(client, "sim", args, NULL)) != PFMC_OK) return die("sim run", rc);

  pfmc_ring* ring = NULL;
  if ((rc = pfmc_ring_map(client, id, 1, &ring)) != PFMC_OK) return die("ring", rc);

  /* Read in batches until the ring is empty, counting by type. */
  static struct pfm_record buf[1024];
  uint64_t total = 0, branches = 0, switches = 0, other = 0;
  uint64_t first = 0, last = 0;
  size_t n = 0;
  do {
    if ((rc = pfmc_ring_read(ring, buf, 1024, &n)) != PFMC_OK) return die("read", rc);
    for (size_t i = 0; i < n; ++i) {
      if (total + i == 0) first = buf[i].time;
      last = buf[i].time;
      if (buf[i].type == PFM_REC_BRANCH) ++branches;
      else if (buf[i].type == PFM_REC_SWITCH_IN || buf[i].type == PFM_REC_SWITCH_OUT)
        ++switches;
      else
        ++other;
    }
    total += n;
  } while (n > 0);

  printf("session %" PRIu64 " pid %d: %" PRIu64 " records, %" PRIu64 " lost\n", id, pid,
         total, pfmc_ring_lost(ring));
  printf("  branch %" PRIu64 "\n  switch %" PRIu64 "\n  other %" PRIu64 "\n", branches,
         switches, other);
  if (total > 0) printf("  time %" PRIu64 "..%" PRIu64 "\n", first, last);

  pfmc_ring_close(ring);
  if ((rc = pfmc_session_kill(client, id)) != PFMC_OK) return die("session_kill", rc);
  pfmc_close(client);
  return 0;
}
