// libFuzzer target for the AWS shared config and credentials files (io/aws_ini.h): whatever
// ~/.aws/config and ~/.aws/credentials hold. Checks that nothing parsed is longer than the input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/aws_ini.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard::io;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const AwsIni ini = ParseAwsIni(text);
  for (const auto& [section, keys] : ini) {
    if (section.size() > size) __builtin_trap();
    for (const auto& [k, v] : keys)
      if (v.size() > size || k.empty() && v.empty()) __builtin_trap();
  }
  return 0;
}
