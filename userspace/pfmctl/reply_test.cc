#include "userspace/pfmctl/reply.h"

#include <string>

#include <gtest/gtest.h>

namespace pfm {
namespace {

namespace json = boost::json;

std::string Message(const ReplyReader& r) { return std::string(r.status().message()); }

TEST(ReplyReaderTest, ReadsWellFormedFields) {
  const json::value v = json::parse(
      R"({"id": 7, "name": "x", "ratio": 0.5, "on": true, "pid": -1, "list": [1, 2]})");
  ReplyReader r("op", v);
  const ReplyNode res = r.result();
  EXPECT_EQ(res.Member("id").Id(), 7u);
  EXPECT_EQ(res.Member("name").String(), "x");
  EXPECT_EQ(res.Member("ratio").Ratio(), "50.0%");
  EXPECT_TRUE(res.Member("on").Bool());
  EXPECT_EQ(res.Member("pid").Int(), -1);
  EXPECT_EQ(res.Member("list").Elements().size(), 2u);
  EXPECT_EQ(res.Member("absent").Text(JsonKind::kUint), "-");
  EXPECT_EQ(res.Member("absent").Ratio(), "not counted");
  EXPECT_TRUE(r.ok()) << r.status();
}

TEST(ReplyReaderTest, NamesOpAndPathOfAWrongType) {
  const json::value v = json::parse(R"([{"id": 1}, {"id": 2}, {"id": 3}, {"id": "4"}])");
  ReplyReader r("session_list", v);
  for (const ReplyNode& s : r.result().Elements()) s.Member("id").Id();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(Message(r),
            "pfmd reply: session_list: result[3].id is a string, expected a positive "
            "integer");
}

TEST(ReplyReaderTest, KeepsTheFirstErrorAndReturnsEmptyValues) {
  const json::value v = json::parse(R"({"memory": 5})");
  ReplyReader r("status", v);
  EXPECT_EQ(r.result().Member("memory").Member("limit").Uint(), 0u);
  EXPECT_EQ(r.result().Member("machine").Member("cpus").Uint(), 0u);
  EXPECT_TRUE(r.result().Member("other").Elements().empty());
  EXPECT_EQ(Message(r),
            "pfmd reply: status: result.memory is the number 5, expected an object");
}

TEST(ReplyReaderTest, InvalidNamesThePathAndKeepsTheFirstError) {
  const json::value v = json::parse(R"({"a": {"b": 5}, "c": "x"})");
  ReplyReader r("op", v);
  r.result().Member("a").Member("b").Invalid("is over the limit");
  r.result().Member("c").Uint();
  EXPECT_EQ(Message(r), "pfmd reply: op: result.a.b is over the limit");
}

TEST(ReplyReaderTest, MissingResultIsNamed) {
  const json::value null;
  ReplyReader r("status", null);
  r.result().Member("machine");
  EXPECT_EQ(Message(r), "pfmd reply: status: result is missing or null, expected an object");
}

TEST(ReplyReaderTest, MissingFieldIsNamed) {
  const json::value v = json::parse(R"({"memory": {}})");
  ReplyReader r("status", v);
  r.result().Member("memory").Member("limit_per_uid").Uint();
  EXPECT_EQ(Message(r),
            "pfmd reply: status: result.memory.limit_per_uid is missing, expected a "
            "non-negative integer");
}

TEST(ReplyReaderTest, RefusesNumbersOutOfRange) {
  const json::value v = json::parse(R"({"a": -1, "b": 0, "c": 1.5, "d": "0.5"})");
  {
    ReplyReader r("x", v);
    r.result().Member("a").Uint();
    EXPECT_EQ(Message(r), "pfmd reply: x: result.a is the number -1, expected a "
                          "non-negative integer");
  }
  {
    ReplyReader r("x", v);
    r.result().Member("b").Id();
    EXPECT_FALSE(r.ok());
  }
  {
    ReplyReader r("x", v);
    r.result().Member("c").Int();
    EXPECT_FALSE(r.ok());
  }
  {
    ReplyReader r("x", v);
    r.result().Member("d").Ratio();
    EXPECT_EQ(Message(r), "pfmd reply: x: result.d is a string, expected a number");
  }
}

TEST(ReplyReaderTest, TextShowsValuesAsBeforeAndChecksTheirType) {
  const json::value v =
      json::parse(R"({"s": "abc", "n": 42, "b": false, "z": null, "o": {}})");
  ReplyReader r("x", v);
  const ReplyNode res = r.result();
  EXPECT_EQ(res.Member("s").Text(JsonKind::kString), "abc");
  EXPECT_EQ(res.Member("n").Text(JsonKind::kUint), "42");
  EXPECT_EQ(res.Member("b").Text(JsonKind::kBool), "false");
  EXPECT_EQ(res.Member("z").Text(JsonKind::kUint), "null");
  EXPECT_EQ(res.Member("z").Text(JsonKind::kUint, "-"), "-");
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(res.Member("o").Text(JsonKind::kString), "");
  EXPECT_EQ(Message(r), "pfmd reply: x: result.o is an object, expected a string");
}

TEST(ReplyReaderTest, JsonTextShowsAbsentAsDash) {
  const json::value s = "x";
  const json::value n = 3;
  EXPECT_EQ(JsonText(nullptr), "-");
  EXPECT_EQ(JsonText(&s), "x");
  EXPECT_EQ(JsonText(&n), "3");
}

}  // namespace
}  // namespace pfm
