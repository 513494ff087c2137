// Checked reads of the data in pfmd's replies.
//
// pfmd is another process, so its replies are input: pfmctl never reads
// them with accessors that throw or assert. Every read of a reply's result
// goes through a ReplyReader. A missing field, or one of the wrong type,
// becomes one INTERNAL error that names the op and the path to the field:
//
//   pfmd reply: session_list: result[3].id is a string, expected a positive integer
//
// which RunPfmctl prints as "pfmctl: INTERNAL: ..." with exit status 1.
//
// Errors are sticky: the reader keeps the first, and every later read returns
// an empty value (an absent node, 0, "", no elements) without recording
// another. So a renderer reads straight through the reply and its caller
// checks status() once at the end; the caller renders into a buffer, which it
// drops when the reply was malformed, so stdout never gets half a table.
//
// Not thread-safe. Nodes point into the reply and the reader: both must
// outlive them.
#ifndef PFM_USERSPACE_PFMCTL_REPLY_H_
#define PFM_USERSPACE_PFMCTL_REPLY_H_

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pfm {

// What a field must be.
enum class JsonKind {
  kObject,
  kArray,
  kString,
  kBool,
  kNumber,   // any number
  kInteger,  // an integer (negative allowed)
  kUint,     // a non-negative integer
  kId,       // a positive integer (session ids)
};

// How pfmctl shows a JSON value as text: "-" when absent, a string's own
// characters, anything else as its JSON text ("42", "true", "null").
std::string JsonText(const boost::json::value* v);

// INTERNAL "pfmd reply: <op>: <what>", for what a reply got wrong beyond its
// JSON (e.g. the file descriptors that came with it).
absl::Status ReplyError(absl::string_view op, absl::string_view what);

class ReplyReader;

// A place in a reply: the value there (possibly absent) and the path that led
// to it ("result.memory.charged[0].bytes"). Cheap to copy.
class ReplyNode {
 public:
  // The value as it came, null when absent: to pass it on unread (--json,
  // trace headers).
  const boost::json::value* json() const { return v_; }
  // There, and not JSON null.
  bool present() const { return v_ != nullptr && !v_->is_null(); }
  const std::string& path() const { return path_; }

  // A member of this object; absent if the object has no such key. This node
  // must be an object (else an error and an absent node).
  ReplyNode Member(absl::string_view key) const;
  // This array's elements (else an error and none).
  std::vector<ReplyNode> Elements() const;
  // This object (else an error and null).
  const boost::json::object* Object() const;

  // This value as the type named (JsonKind in brackets); an error and 0 / ""
  // / false when it is absent, null or of another type.
  uint64_t Uint() const;  // kUint
  uint64_t Id() const;    // kId
  int64_t Int() const;    // kInteger
  double Number() const;  // kNumber
  std::string String() const;
  bool Bool() const;

  // For display: "-" when absent, `if_null` when JSON null, else the value as
  // JsonText shows it, which must be of `kind` (else an error and "").
  std::string Text(JsonKind kind, absl::string_view if_null = "null") const;

  // "87.5%" for a running ratio in [0, 1]; "not counted" when absent or null.
  std::string Ratio() const;

  // Records "<path> <what>" unless an error came first: for a value of the
  // right type that is still wrong ("ends before it starts").
  void Invalid(absl::string_view what) const;

 private:
  friend class ReplyReader;
  ReplyNode(ReplyReader* reader, const boost::json::value* v, std::string path)
      : reader_(reader), v_(v), path_(std::move(path)) {}
  // Records "<path> is <what v is>, expected <kind>" unless an error came
  // first; `false` for the caller to return its empty value.
  bool Expect(JsonKind kind) const;

  ReplyReader* reader_;
  const boost::json::value* v_;
  std::string path_;
};

class ReplyReader {
 public:
  // Reads the result of the request `op` (Client::Reply::result; a reply
  // without "result" has a null one).
  ReplyReader(absl::string_view op, const boost::json::value& result);
  ReplyReader(const ReplyReader&) = delete;
  ReplyReader& operator=(const ReplyReader&) = delete;

  // The result itself (path "result").
  ReplyNode result() { return ReplyNode(this, &result_, "result"); }

  // OK, or the first error: INTERNAL "pfmd reply: <op>: <path> is ...".
  const absl::Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }

 private:
  friend class ReplyNode;
  void Fail(const std::string& path, absl::string_view what);

  std::string op_;
  const boost::json::value& result_;
  absl::Status status_;
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_REPLY_H_
