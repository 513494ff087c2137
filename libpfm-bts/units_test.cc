#include "libpfm-bts/units.h"

#include <gtest/gtest.h>

namespace pfm {
namespace {

TEST(ParseSize, AcceptsBytesAndBinaryUnits) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("64KiB"), 64u * 1024);
  EXPECT_EQ(*ParseSize("8MiB"), 8u << 20);
  EXPECT_EQ(*ParseSize("1g"), 1u << 30);
  EXPECT_EQ(*ParseSize("16k"), 16u * 1024);
}

// KB, MB and GB mean 1000s to some tools and 1024s to others: refused,
// naming the unambiguous spelling.
TEST(ParseSize, RefusesAmbiguousDecimalLookingUnits) {
  for (const char* s : {"2KB", "2kb", "8MB", "1GB"}) {
    auto r = ParseSize(s);
    ASSERT_FALSE(r.ok()) << s;
    EXPECT_NE(r.status().message().find("ambiguous"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("iB (1024s)"), std::string::npos) << r.status();
  }
  EXPECT_EQ(ParseSize("2KB").status().message(),
            "size '2KB': 'KB' is ambiguous (1000 or 1024?); use KiB (1024s) or plain bytes");
}

TEST(ParseSize, RefusesGarbageNamingIt) {
  auto r = ParseSize("12XB");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("12XB"), std::string::npos);
  EXPECT_FALSE(ParseSize("").ok());
  EXPECT_FALSE(ParseSize("KiB").ok());
  EXPECT_FALSE(ParseSize("-5").ok());
  EXPECT_FALSE(ParseSize("99999999999999999999").ok());
  EXPECT_FALSE(ParseSize("17179869184GiB").ok());
}

TEST(FormatSize, UsesTheLargestExactUnit) {
  EXPECT_EQ(FormatSize(65536), "64KiB");
  EXPECT_EQ(FormatSize(100), "100B");
  EXPECT_EQ(FormatSize(1536 * 1024), "1536KiB");
  EXPECT_EQ(FormatSize(1500000), "1.4MiB");
}

}  // namespace
}  // namespace pfm
