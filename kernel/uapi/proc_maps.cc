#include "kernel/uapi/proc_maps.h"

#include <algorithm>
#include <cerrno>

namespace pfm {
namespace {

constexpr std::string_view kDeletedSuffix = " (deleted)";
// How much of a malformed line an error message quotes: enough to see it,
// short of ErrorDetail's 256 bytes.
constexpr size_t kQuotedLineBytes = 160;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 1 to 16 hex digits from the front of *s (17 would overflow).
bool TakeHex(std::string_view* s, uint64_t* v) {
  uint64_t x = 0;
  size_t i = 0;
  for (; i < s->size() && i <= 16; ++i) {
    const int d = HexDigit((*s)[i]);
    if (d < 0) break;
    x = x << 4 | static_cast<uint64_t>(d);
  }
  if (i == 0 || i > 16) return false;
  *v = x;
  s->remove_prefix(i);
  return true;
}

bool TakeChar(std::string_view* s, char c) {
  if (s->empty() || s->front() != c) return false;
  s->remove_prefix(1);
  return true;
}

// A non-empty run of characters other than ' ', then one ' ' or the end.
bool SkipField(std::string_view* s) {
  const size_t n = std::min(s->find(' '), s->size());
  if (n == 0) return false;
  s->remove_prefix(n);
  return s->empty() || TakeChar(s, ' ');
}

// One line of /proc/PID/maps:
//   start-end perms offset dev inode [padding path]
// with the kernel's own spellings: hex numbers, perms "r-xp"-like. Sets
// *executable from perms and fills *m; false when the line has another
// shape.
bool ParseLine(std::string_view s, Mapping* m, bool* executable) {
  if (!TakeHex(&s, &m->start) || !TakeChar(&s, '-') || !TakeHex(&s, &m->end) ||
      !TakeChar(&s, ' ') || m->start > m->end || s.size() < 4)
    return false;
  const std::string_view perms = s.substr(0, 4);
  if ((perms[0] != 'r' && perms[0] != '-') || (perms[1] != 'w' && perms[1] != '-') ||
      (perms[2] != 'x' && perms[2] != '-') || (perms[3] != 'p' && perms[3] != 's'))
    return false;
  s.remove_prefix(4);
  if (!TakeChar(&s, ' ') || !TakeHex(&s, &m->offset) || !TakeChar(&s, ' ') ||
      !SkipField(&s) /* dev */ || !SkipField(&s) /* inode */)
    return false;
  // The kernel pads with spaces to line the paths up; a path of its own
  // may start with a space only after that padding, which it always emits.
  const size_t at = s.find_first_not_of(' ');
  s.remove_prefix(at == std::string_view::npos ? s.size() : at);
  if (s.size() > kMaxMappingPath) return false;
  m->path.assign(s.data(), s.size());
  m->writable = perms[1] == 'w';
  m->shared = perms[3] == 's';
  *executable = perms[2] == 'x';
  return true;
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
// Callers check that the bytes are there.
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

int ParseProcMaps(std::string_view text, MalformedLine malformed,
                  std::vector<Mapping>* out, ErrorDetail* d, bool* cut) {
  out->clear();
  if (cut != nullptr) *cut = false;
  int lineno = 0;
  while (!text.empty()) {
    const size_t nl = std::min(text.find('\n'), text.size());
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(std::min(nl + 1, text.size()));
    ++lineno;
    if (line.empty()) continue;
    Mapping m;
    bool executable = false;
    if (!ParseLine(line, &m, &executable)) {
      if (malformed == MalformedLine::kSkip) continue;
      out->clear();
      return SetError(d, -EINVAL, "maps line %d is malformed: '%.*s'", lineno,
                      static_cast<int>(std::min(line.size(), kQuotedLineBytes)),
                      line.data());
    }
    if (!executable) continue;
    if (out->size() == kMaxMappings) {
      if (malformed == MalformedLine::kSkip) {  // keep the first ones
        if (cut != nullptr) *cut = true;
        break;
      }
      out->clear();
      return SetError(d, -E2BIG, "more than %u executable mappings (maps line %d)",
                      kMaxMappings, lineno);
    }
    out->push_back(std::move(m));
  }
  return 0;
}

void KeepFileBacked(std::vector<Mapping>* maps) {
  maps->erase(std::remove_if(maps->begin(), maps->end(),
                             [](const Mapping& m) {
                               return m.path.empty() || m.path[0] != '/';
                             }),
              maps->end());
  for (Mapping& m : *maps) {
    const std::string_view p = m.path;
    if (p.size() > kDeletedSuffix.size() &&
        p.substr(p.size() - kDeletedSuffix.size()) == kDeletedSuffix)
      m.path.resize(p.size() - kDeletedSuffix.size());
  }
}

size_t EncodeMappings(const std::vector<Mapping>& maps, size_t max_bytes,
                      std::string* out) {
  return EncodeMappings(maps, 0, max_bytes, out);
}

size_t EncodeMappings(const std::vector<Mapping>& maps, size_t first,
                      size_t max_bytes, std::string* out) {
  const Mapping* const from = maps.data() + std::min(first, maps.size());
  const size_t left = maps.size() - static_cast<size_t>(from - maps.data());
  size_t n = 0;
  size_t bytes = kMappingsHeaderBytes;
  while (n < left && n < kMaxMappings && IsEncodableMapping(from[n])) {
    const size_t id = from[n].build_id.size();
    const size_t entry = kMappingFixedBytes + from[n].path.size() + (id > 0 ? 1 + id : 0);
    if (entry > max_bytes || bytes > max_bytes - entry) break;
    bytes += entry;
    ++n;
  }
  out->clear();
  out->reserve(bytes);
  PutU32(out, static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    const Mapping& m = from[i];
    PutU64(out, m.start);
    PutU64(out, m.end);
    PutU64(out, m.offset);
    PutU32(out, (m.writable ? kMappingWritable : 0) | (m.shared ? kMappingShared : 0) |
                    (m.build_id.empty() ? 0 : kMappingHasBuildId));
    PutU32(out, static_cast<uint32_t>(m.path.size()));
    out->append(m.path);
    if (!m.build_id.empty()) {
      out->push_back(static_cast<char>(m.build_id.size()));
      out->append(m.build_id);
    }
  }
  return n;
}

int DecodeMappings(std::string_view in, std::vector<Mapping>* out, ErrorDetail* d) {
  out->clear();
  if (in.size() < kMappingsHeaderBytes)
    return SetError(d, -EINVAL, "mappings: %zu bytes, too short for the count",
                    in.size());
  const uint32_t n = GetU32(in.data());
  size_t at = kMappingsHeaderBytes;
  if (n > kMaxMappings)
    return SetError(d, -EINVAL, "mappings: count %u is over the limit of %u", n,
                    kMaxMappings);
  // Before reserving: a count the bytes cannot hold allocates nothing.
  if (n > (in.size() - at) / kMappingFixedBytes)
    return SetError(d, -EINVAL, "mappings: count %u does not fit in %zu bytes", n,
                    in.size());
  std::vector<Mapping> v;
  v.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (in.size() - at < kMappingFixedBytes)
      return SetError(d, -EINVAL, "mappings: entry %u cut short at byte %zu", i, at);
    const char* p = in.data() + at;
    Mapping m;
    m.start = GetU64(p);
    m.end = GetU64(p + 8);
    m.offset = GetU64(p + 16);
    const uint32_t flags = GetU32(p + 24);
    const uint32_t path_len = GetU32(p + 28);
    at += kMappingFixedBytes;
    if (m.start > m.end)
      return SetError(d, -EINVAL, "mappings: entry %u ends before it starts", i);
    if ((flags & ~(kMappingWritable | kMappingShared | kMappingHasBuildId)) != 0)
      return SetError(d, -EINVAL, "mappings: entry %u has unknown flags 0x%x", i, flags);
    if (path_len > kMaxMappingPath)
      return SetError(d, -EINVAL, "mappings: entry %u's path of %u bytes is over %u", i,
                      path_len, kMaxMappingPath);
    if (in.size() - at < path_len)
      return SetError(d, -EINVAL, "mappings: entry %u's path cut short at byte %zu", i,
                      at);
    m.writable = (flags & kMappingWritable) != 0;
    m.shared = (flags & kMappingShared) != 0;
    m.path.assign(in.data() + at, path_len);
    at += path_len;
    if ((flags & kMappingHasBuildId) != 0) {
      if (in.size() - at < 1)
        return SetError(d, -EINVAL, "mappings: entry %u's build-id cut short at byte %zu", i,
                        at);
      const size_t id_len = static_cast<uint8_t>(in[at]);
      at += 1;
      // 0 would make two encodings of "no build-id".
      if (id_len == 0 || id_len > kMaxBuildIdBytes)
        return SetError(d, -EINVAL, "mappings: entry %u's build-id of %zu bytes is not 1..%zu",
                        i, id_len, kMaxBuildIdBytes);
      if (in.size() - at < id_len)
        return SetError(d, -EINVAL, "mappings: entry %u's build-id cut short at byte %zu", i,
                        at);
      m.build_id.assign(in.data() + at, id_len);
      at += id_len;
    }
    v.push_back(std::move(m));
  }
  if (at != in.size())
    return SetError(d, -EINVAL, "mappings: %zu bytes after the last entry",
                    in.size() - at);
  *out = std::move(v);
  return 0;
}

}  // namespace pfm
