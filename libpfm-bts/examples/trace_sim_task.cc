// Example: the C++ client API. Traces one simulated task's branches and
// prints a summary.
//
//   pfmd --driver sim --sim-paused --socket /tmp/pfmd.sock &
//   trace_sim_task --socket /tmp/pfmd.sock [--pid 1000] [--ns 5000000]
//
// Creates a lossless BTS session on the task (not detached: it ends when
// this program's connection closes), advances the simulated machine by
// --ns virtual nanoseconds, reads every record from the shared ring and
// prints how many of each type it saw.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "pfm/client.h"
#include "pfm/record_json.h"
#include "pfm/ring_reader.h"

namespace {

int Die(const std::string& what, const absl::Status& s) {
  std::cerr << "trace_sim_task: " << what << ": " << pfm::StatusCodeName(s.code())
            << ": " << s.message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket;
  int pid = 1000;
  uint64_t ns = 5000000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--socket") socket = argv[i + 1];
    else if (flag == "--pid") pid = std::atoi(argv[i + 1]);
    else if (flag == "--ns") ns = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (socket.empty() || argc % 2 == 0) {
    std::cerr << "usage: trace_sim_task --socket PATH [--pid N] [--ns NS]\n";
    return 2;
  }
  absl::StatusOr<pfm::Client> client = pfm::Client::Connect(socket);
  if (!client.ok()) return Die("connect", client.status());

  // 1. A session: the same JSON spec pfmctl sends.
  boost::json::object spec{{"pid", pid}, {"bts", "lossless"},
                           {"buffer_bytes", 4 << 20}, {"detached", false}};
  absl::StatusOr<pfm::Client::Reply> created =
      client->Call("session_create", {{"spec", spec}});
  if (!created.ok()) return Die("session_create", created.status());
  const uint64_t id = created->result.at("id").to_number<uint64_t>();

  // 2. Let the simulated task run (a host pfmd refuses: FAILED_PRECONDITION).
  absl::StatusOr<pfm::Client::Reply> ran =
      client->Call("sim", {{"action", "run"}, {"ns", ns}});
  if (!ran.ok()) return Die("sim run", ran.status());

  // 3. The ring: pfmd passes its memfd; drain moves buffered records in.
  absl::StatusOr<pfm::Client::Reply> ring_reply =
      client->Call("session_ring", {{"id", id}, {"drain", true}});
  if (!ring_reply.ok()) return Die("session_ring", ring_reply.status());
  if (ring_reply->fds.size() != 1)
    return Die("session_ring", absl::DataLossError("no ring fd in the reply"));
  absl::StatusOr<pfm::RingReader> ring =
      pfm::RingReader::Map(std::move(ring_reply->fds[0]));
  if (!ring.ok()) return Die("map", ring.status());

  // 4. Consume every record (lossless: this frees their space).
  std::vector<pfm_record> recs;
  while (ring->Consume(&recs, 4096) > 0) {
  }
  if (!ring->status().ok()) return Die("read", ring->status());
  std::map<std::string, uint64_t> by_type;
  for (const pfm_record& r : recs) ++by_type[pfm::RecordTypeName(r.type)];

  std::cout << "session " << id << " pid " << pid << ": " << recs.size()
            << " records, " << ring->lost() << " lost\n";
  for (const auto& [type, n] : by_type) std::cout << "  " << type << " " << n << "\n";
  if (!recs.empty())
    std::cout << "  time " << recs.front().time << ".." << recs.back().time << "\n";

  // 5. Done: kill explicitly (closing the connection would also end it).
  absl::StatusOr<pfm::Client::Reply> killed = client->Call("session_kill", {{"id", id}});
  if (!killed.ok()) return Die("session_kill", killed.status());
  return 0;
}
