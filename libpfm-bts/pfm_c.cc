#include "pfm/pfm_c.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "pfm/client.h"
#include "pfm/ring_reader.h"

struct pfmc_client {
  pfm::Client client;
};

struct pfmc_ring {
  pfm::RingReader reader;
};

namespace {

thread_local std::string g_last_error;

int Fail(const absl::Status& s) {
  g_last_error = std::string(s.message());
  return static_cast<int>(s.code());
}

int Fail(int code, std::string message) {
  g_last_error = std::move(message);
  return code;
}

int Ok() {
  g_last_error.clear();
  return PFMC_OK;
}

// Parses `text` as a JSON object (NULL = empty object).
int ParseObject(const char* text, const char* what, boost::json::object* out) {
  if (text == nullptr) {
    out->clear();
    return PFMC_OK;
  }
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  if (ec || !v.is_object())
    return Fail(PFMC_INVALID_ARGUMENT,
                std::string(what) + " is not a JSON object" +
                    (ec ? ": " + ec.message() : std::string()));
  *out = std::move(v.as_object());
  return PFMC_OK;
}

}  // namespace

extern "C" {

const char* pfmc_last_error(void) { return g_last_error.c_str(); }

const char* pfmc_code_name(int code) {
  static thread_local std::string name;
  name = pfm::StatusCodeName(static_cast<absl::StatusCode>(code));
  return name.c_str();
}

int pfmc_connect(const char* socket_path, pfmc_client** out) {
  if (out == nullptr) return Fail(PFMC_INVALID_ARGUMENT, "out is NULL");
  std::string path = socket_path ? socket_path : "";
  if (path.empty()) {
    const char* env = std::getenv(pfm::kSocketEnv);
    path = env && *env ? env : pfm::kDefaultSocket;
  }
  absl::StatusOr<pfm::Client> c = pfm::Client::Connect(path);
  if (!c.ok()) return Fail(c.status());
  *out = new (std::nothrow) pfmc_client{std::move(*c)};
  if (*out == nullptr) return Fail(PFMC_RESOURCE_EXHAUSTED, "out of memory");
  return Ok();
}

void pfmc_close(pfmc_client* client) { delete client; }

int pfmc_call(pfmc_client* client, const char* op, const char* args_json,
              char** result_json) {
  if (client == nullptr || op == nullptr)
    return Fail(PFMC_INVALID_ARGUMENT, "client and op must not be NULL");
  boost::json::object args;
  if (int rc = ParseObject(args_json, "args", &args); rc != PFMC_OK) return rc;
  absl::StatusOr<pfm::Client::Reply> r = client->client.Call(op, std::move(args));
  if (!r.ok()) return Fail(r.status());
  if (result_json != nullptr) {
    const std::string text = boost::json::serialize(r->result);
    *result_json = static_cast<char*>(std::malloc(text.size() + 1));
    if (*result_json == nullptr) return Fail(PFMC_RESOURCE_EXHAUSTED, "out of memory");
    std::memcpy(*result_json, text.c_str(), text.size() + 1);
  }
  return Ok();
}

void pfmc_free(void* p) { std::free(p); }

int pfmc_session_create(pfmc_client* client, const char* spec_json,
                        uint64_t* id) {
  if (client == nullptr || spec_json == nullptr || id == nullptr)
    return Fail(PFMC_INVALID_ARGUMENT, "client, spec_json and id must not be NULL");
  boost::json::object spec;
  if (int rc = ParseObject(spec_json, "spec_json", &spec); rc != PFMC_OK) return rc;
  absl::StatusOr<pfm::Client::Reply> r =
      client->client.Call("session_create", {{"spec", std::move(spec)}});
  if (!r.ok()) return Fail(r.status());
  const boost::json::value* v =
      r->result.is_object() ? r->result.as_object().if_contains("id") : nullptr;
  // A positive integer; anything else is a malformed reply, not an
  // exception through this C function (to_number throws on -1 or 1.5).
  uint64_t n = 0;
  if (v != nullptr && v->is_uint64()) n = v->get_uint64();
  if (v != nullptr && v->is_int64() && v->get_int64() > 0)
    n = static_cast<uint64_t>(v->get_int64());
  if (n == 0) return Fail(PFMC_DATA_LOSS, "pfmd's reply has no session id (a positive integer)");
  *id = n;
  return Ok();
}

int pfmc_session_kill(pfmc_client* client, uint64_t id) {
  if (client == nullptr) return Fail(PFMC_INVALID_ARGUMENT, "client is NULL");
  absl::StatusOr<pfm::Client::Reply> r = client->client.Call("session_kill", {{"id", id}});
  if (!r.ok()) return Fail(r.status());
  return Ok();
}

int pfmc_ring_map(pfmc_client* client, uint64_t id, int drain, pfmc_ring** out) {
  if (client == nullptr || out == nullptr)
    return Fail(PFMC_INVALID_ARGUMENT, "client and out must not be NULL");
  absl::StatusOr<pfm::Client::Reply> r =
      client->client.Call("session_ring", {{"id", id}, {"drain", drain != 0}});
  if (!r.ok()) return Fail(r.status());
  if (r->fds.size() != 1)
    return Fail(PFMC_DATA_LOSS, "pfmd did not pass the ring's file descriptor");
  absl::StatusOr<pfm::RingReader> reader = pfm::RingReader::Map(std::move(r->fds[0]));
  if (!reader.ok()) return Fail(reader.status());
  *out = new (std::nothrow) pfmc_ring{std::move(*reader)};
  if (*out == nullptr) return Fail(PFMC_RESOURCE_EXHAUSTED, "out of memory");
  return Ok();
}

void pfmc_ring_close(pfmc_ring* ring) { delete ring; }

int pfmc_ring_read(pfmc_ring* ring, struct pfm_record* buf, size_t max, size_t* n) {
  if (ring == nullptr || n == nullptr || (buf == nullptr && max > 0))
    return Fail(PFMC_INVALID_ARGUMENT, "ring, buf and n must not be NULL");
  std::vector<pfm_record> recs;
  const size_t got = ring->reader.Consume(&recs, max);
  if (got == 0 && !ring->reader.status().ok()) return Fail(ring->reader.status());
  if (got > 0) std::memcpy(buf, recs.data(), got * sizeof(pfm_record));
  *n = got;
  return Ok();
}

int pfmc_ring_snapshot(pfmc_ring* ring, struct pfm_record** recs, size_t* n) {
  if (ring == nullptr || recs == nullptr || n == nullptr)
    return Fail(PFMC_INVALID_ARGUMENT, "ring, recs and n must not be NULL");
  std::vector<pfm_record> all;
  if (absl::Status s = ring->reader.Snapshot(&all); !s.ok()) return Fail(s);
  pfm_record* out = nullptr;
  if (!all.empty()) {
    out = static_cast<pfm_record*>(std::malloc(all.size() * sizeof(pfm_record)));
    if (out == nullptr) return Fail(PFMC_RESOURCE_EXHAUSTED, "out of memory");
    std::memcpy(out, all.data(), all.size() * sizeof(pfm_record));
  }
  *recs = out;
  *n = all.size();
  return Ok();
}

uint64_t pfmc_ring_records(const pfmc_ring* ring) {
  return ring ? ring->reader.records() : 0;
}
uint64_t pfmc_ring_lost(const pfmc_ring* ring) { return ring ? ring->reader.lost() : 0; }
int pfmc_ring_ended(const pfmc_ring* ring) { return ring && ring->reader.ended() ? 1 : 0; }

}  // extern "C"
