// ParseByteSize (libshard_support/units.h): the one parser of byte sizes for the CLI, Python and the
// environment.
#include "libshard_support/units.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace libshard {
namespace {

constexpr uint64_t kKi = uint64_t{1} << 10;
constexpr uint64_t kMi = uint64_t{1} << 20;
constexpr uint64_t kGi = uint64_t{1} << 30;
constexpr uint64_t kTi = uint64_t{1} << 40;

uint64_t Parse(const char* text) {
  Result<uint64_t> r = ParseByteSize(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().ToString();
  return r.ok() ? *r : 0;
}

TEST(UnitsTest, PlainIntegersAreBytes) {
  EXPECT_EQ(Parse("1"), 1u);
  EXPECT_EQ(Parse("4096"), 4096u);
  EXPECT_EQ(Parse("4096B"), 4096u);
  EXPECT_EQ(Parse("18446744073709551615"), UINT64_MAX);
}

TEST(UnitsTest, SingleLettersAndIecUnitsArePowersOf1024) {
  EXPECT_EQ(Parse("512K"), 512 * kKi);
  EXPECT_EQ(Parse("512M"), 512 * kMi);
  EXPECT_EQ(Parse("4G"), 4 * kGi);
  EXPECT_EQ(Parse("2T"), 2 * kTi);
  EXPECT_EQ(Parse("64KiB"), 64 * kKi);
  EXPECT_EQ(Parse("64MiB"), 64 * kMi);
  EXPECT_EQ(Parse("4GiB"), 4 * kGi);
  EXPECT_EQ(Parse("1TiB"), kTi);
  EXPECT_EQ(Parse("64Ki"), 64 * kKi);
  EXPECT_EQ(Parse("64Mi"), 64 * kMi);
  EXPECT_EQ(Parse("4Gi"), 4 * kGi);
  EXPECT_EQ(Parse("1Ti"), kTi);
}

TEST(UnitsTest, SiUnitsArePowersOf1000) {
  EXPECT_EQ(Parse("1KB"), 1000u);
  EXPECT_EQ(Parse("100MB"), 100000000u);
  EXPECT_EQ(Parse("2GB"), 2000000000u);
  EXPECT_EQ(Parse("3TB"), 3000000000000u);
}

TEST(UnitsTest, CaseAndSpacesDoNotMatter) {
  EXPECT_EQ(Parse("512m"), 512 * kMi);
  EXPECT_EQ(Parse("4gib"), 4 * kGi);
  EXPECT_EQ(Parse("4GIB"), 4 * kGi);
  EXPECT_EQ(Parse("2gb"), 2000000000u);
  EXPECT_EQ(Parse(" 4 GiB\t"), 4 * kGi);
}

TEST(UnitsTest, FractionsRoundDownToWholeBytes) {
  EXPECT_EQ(Parse("1.5G"), 3 * (kGi / 2));
  EXPECT_EQ(Parse("0.5K"), 512u);
  EXPECT_EQ(Parse("1.0001"), 1u);
}

TEST(UnitsTest, BadInputIsInvalidArgumentQuotingIt) {
  for (const char* bad : {"", " ", "G", "GiB", "12X", "4 G i B", "0", "0.1", "-5", "+5", "1..5G",
                          ".", "4PiB", "16EiB", "99999999999999999999", "16777216T", "1e3",
                          "0x10", "4GiBs"}) {
    Result<uint64_t> r = ParseByteSize(bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "' parsed as " << *r;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("'" + std::string(bad) + "'"), std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace libshard
