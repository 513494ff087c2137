#include "userspace/pfmctl/reply.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pfm {
namespace {

namespace json = boost::json;

const char* KindName(JsonKind kind) {
  switch (kind) {
    case JsonKind::kObject: return "an object";
    case JsonKind::kArray: return "an array";
    case JsonKind::kString: return "a string";
    case JsonKind::kBool: return "a bool";
    case JsonKind::kNumber: return "a number";
    case JsonKind::kInteger: return "an integer";
    case JsonKind::kUint: return "a non-negative integer";
    case JsonKind::kId: return "a positive integer";
  }
  return "?";
}

// What a value is, for "<path> is <this>, expected ...": numbers by value,
// since "is a number, expected a non-negative integer" would not say which.
std::string Describe(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return "a bool";
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_: return absl::StrCat("the number ", json::serialize(v));
    case json::kind::string: return "a string";
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "?";
}

bool Matches(const json::value& v, JsonKind kind) {
  switch (kind) {
    case JsonKind::kObject: return v.is_object();
    case JsonKind::kArray: return v.is_array();
    case JsonKind::kString: return v.is_string();
    case JsonKind::kBool: return v.is_bool();
    case JsonKind::kNumber: return v.is_number();
    case JsonKind::kInteger:
      return v.is_int64() ||
             (v.is_uint64() &&
              v.get_uint64() <= uint64_t{std::numeric_limits<int64_t>::max()});
    case JsonKind::kUint: return v.is_uint64() || (v.is_int64() && v.get_int64() >= 0);
    case JsonKind::kId: return (v.is_uint64() && v.get_uint64() > 0) ||
                               (v.is_int64() && v.get_int64() > 0);
  }
  return false;
}

// Only after Matches(v, kUint) or kId.
uint64_t AsUint(const json::value& v) {
  return v.is_uint64() ? v.get_uint64() : static_cast<uint64_t>(v.get_int64());
}

}  // namespace

std::string JsonText(const json::value* v) {
  if (v == nullptr) return "-";
  if (v->is_string()) return std::string(v->get_string());
  return json::serialize(*v);
}

absl::Status ReplyError(absl::string_view op, absl::string_view what) {
  return absl::InternalError(absl::StrCat("pfmd reply: ", op, ": ", what));
}

bool ReplyNode::Expect(JsonKind kind) const {
  if (!reader_->ok()) return false;
  if (v_ != nullptr && Matches(*v_, kind)) return true;
  std::string is;
  if (v_ == nullptr) {
    is = "missing";
  } else if (v_ == &reader_->result_ && v_->is_null()) {
    // Client::Call gives a reply without "result" a null one.
    is = "missing or null";
  } else {
    is = Describe(*v_);
  }
  reader_->Fail(path_, absl::StrCat("is ", is, ", expected ", KindName(kind)));
  return false;
}

ReplyNode ReplyNode::Member(absl::string_view key) const {
  std::string path = absl::StrCat(path_, ".", key);
  if (!Expect(JsonKind::kObject)) return ReplyNode(reader_, nullptr, std::move(path));
  return ReplyNode(reader_, v_->get_object().if_contains(boost::json::string_view(key.data(), key.size())), std::move(path));
}

std::vector<ReplyNode> ReplyNode::Elements() const {
  std::vector<ReplyNode> out;
  if (!Expect(JsonKind::kArray)) return out;
  const json::array& a = v_->get_array();
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    out.push_back(ReplyNode(reader_, &a[i], absl::StrCat(path_, "[", i, "]")));
  return out;
}

const json::object* ReplyNode::Object() const {
  return Expect(JsonKind::kObject) ? &v_->get_object() : nullptr;
}

uint64_t ReplyNode::Uint() const {
  return Expect(JsonKind::kUint) ? AsUint(*v_) : 0;
}

uint64_t ReplyNode::Id() const {
  return Expect(JsonKind::kId) ? AsUint(*v_) : 0;
}

int64_t ReplyNode::Int() const {
  if (!Expect(JsonKind::kInteger)) return 0;
  return v_->is_int64() ? v_->get_int64() : static_cast<int64_t>(v_->get_uint64());
}

double ReplyNode::Number() const {
  if (!Expect(JsonKind::kNumber)) return 0;
  if (v_->is_double()) return v_->get_double();
  if (v_->is_int64()) return static_cast<double>(v_->get_int64());
  return static_cast<double>(v_->get_uint64());
}

std::string ReplyNode::String() const {
  return Expect(JsonKind::kString) ? std::string(v_->get_string()) : "";
}

bool ReplyNode::Bool() const {
  return Expect(JsonKind::kBool) ? v_->get_bool() : false;
}

std::string ReplyNode::Text(JsonKind kind, absl::string_view if_null) const {
  if (v_ == nullptr) return "-";
  if (v_->is_null()) return std::string(if_null);
  return Expect(kind) ? JsonText(v_) : "";
}

std::string ReplyNode::Ratio() const {
  if (!present()) return "not counted";
  return absl::StrFormat("%.1f%%", 100.0 * Number());
}

void ReplyNode::Invalid(absl::string_view what) const { reader_->Fail(path_, what); }

ReplyReader::ReplyReader(absl::string_view op, const json::value& result)
    : op_(op), result_(result) {}

void ReplyReader::Fail(const std::string& path, absl::string_view what) {
  if (status_.ok())
    status_ = absl::InternalError(
        absl::StrCat("pfmd reply: ", op_, ": ", path, " ", what));
}

}  // namespace pfm
