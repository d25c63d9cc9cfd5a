// The AWS shared config and credentials files (~/.aws/config, ~/.aws/credentials) as data:
// "[section]" lines and "key = value" lines, a nested block ("s3 =" followed by indented
// "key = value" lines) stored as "s3.key". Untrusted input: bounded in lines and length. Bytes
// only, no system calls (fuzz/aws_ini_fuzz.cc).
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace libshard::io {

// section -> key -> value. Keys are lower-cased; comments (#, ;) and lines that are neither
// sections nor assignments are skipped. At most kMaxIniLines lines are read.
using AwsIni = std::map<std::string, std::map<std::string, std::string>>;
inline constexpr size_t kMaxIniLines = 100000;
inline constexpr size_t kMaxIniBytes = 1 << 20;  // what ReadIni reads of a file
AwsIni ParseAwsIni(std::string_view text);

}  // namespace libshard::io
