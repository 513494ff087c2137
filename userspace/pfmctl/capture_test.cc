#include "userspace/pfmctl/capture.h"

#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"

#include <gtest/gtest.h>

namespace pfm {
namespace {

namespace json = boost::json;

const char kMaps[] = R"({"pid": 42, "time_ns": 1000, "mappings": [
  {"start": 4194304, "end": 4198400, "offset": 4096, "path": "/bin/prog",
   "writable": false, "shared": false},
  {"start": 2147287040, "end": 2147295232, "offset": 18446744073709486080, "path": "",
   "writable": true, "shared": true}]})";

// ReadMaps over `maps`; the reader's status in *status.
ProcessMaps Read(const json::value& maps, absl::Status* status) {
  ReplyReader r("session_show", maps);
  ProcessMaps out = ReadMaps(r.result());
  *status = r.status();
  return out;
}

TEST(ReadMaps, ReadsEveryField) {
  absl::Status st;
  const ProcessMaps m = Read(json::parse(kMaps), &st);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(m.pid, 42);
  EXPECT_EQ(m.time_ns, 1000u);
  ASSERT_EQ(m.mappings.size(), 2u);
  EXPECT_EQ(m.mappings[0], (Mapping{0x400000, 0x401000, 0x1000, "/bin/prog", false, false}));
  EXPECT_EQ(m.mappings[1], (Mapping{0x7ffd0000, 0x7ffd2000, 0xffffffffffff0000, "", true, true}));
}

// Each malformation, as the one INTERNAL line pfmctl would print.
TEST(ReadMaps, NamesWhatIsWrong) {
  struct Case {
    const char* pointer;
    json::value value;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"/pid", json::value("42"), "result.pid is a string, expected an integer"},
      {"/pid", json::value(int64_t{1} << 40), "result.pid is not a pid"},
      {"/time_ns", json::value(-1), "result.time_ns is the number -1, expected a "
                                    "non-negative integer"},
      {"/mappings", json::value(5), "result.mappings is the number 5, expected an array"},
      {"/mappings/0/start", json::value("0x400000"),
       "result.mappings[0].start is a string, expected a non-negative integer"},
      {"/mappings/0/end", json::value(1), "result.mappings[0] ends before it starts"},
      {"/mappings/1/path", json::value(std::string(kMaxMappingPath + 1, 'p')),
       "result.mappings[1].path is over 4096 bytes"},
      {"/mappings/1/shared", json::value(1),
       "result.mappings[1].shared is the number 1, expected a bool"},
      {"/mappings/1", json::value("x"), "result.mappings[1] is a string, expected an object"},
  };
  for (const Case& c : cases) {
    json::value v = json::parse(kMaps);
    std::error_code ec;
    json::value* at = v.find_pointer(c.pointer, ec);
    ASSERT_NE(at, nullptr) << c.pointer;
    *at = c.value;
    absl::Status st;
    Read(v, &st);
    EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << c.pointer;
    EXPECT_EQ(st.message(), std::string("pfmd reply: session_show: ") + c.message)
        << c.pointer;
  }
  for (const char* field : {"pid", "time_ns", "mappings"}) {
    json::value v = json::parse(kMaps);
    v.as_object().erase(field);
    absl::Status st;
    Read(v, &st);
    EXPECT_EQ(st.message(), absl::StrCat("pfmd reply: session_show: result.", field,
                                         " is missing, expected ",
                                         field == std::string("mappings")
                                             ? "an array"
                                             : field == std::string("pid")
                                                   ? "an integer"
                                                   : "a non-negative integer"));
  }
}

TEST(ReadMaps, RefusesMoreMappingsThanABlockCarries) {
  json::value v = json::parse(kMaps);
  json::array& a = v.as_object()["mappings"].as_array();
  const json::value one = a[0];
  a.resize(kMaxMappings + 1, one);
  absl::Status st;
  Read(v, &st);
  EXPECT_EQ(st.message(),
            "pfmd reply: session_show: result.mappings has 65537 mappings, over 65536");
}

}  // namespace
}  // namespace pfm
