// ParseCompression and ParseStoreDType (libshard/writer_config.h): the one parser of the
// `compress` and `store_dtype` options, which every front end reads through the writer's option
// table (--compress / --store-dtype of `libshard pack` and capture, compress= / store_dtype= of
// libshard.Writer and libshard.pack).
#include <charconv>
#include <string>
#include <string_view>

#include "libshard_support/text.h"
#include "libshard/writer_config.h"

namespace libshard {

Result<EncodingOptions> ParseCompression(std::string_view text) {
  const std::string t = AsciiLower(TrimBlanks(text));
  EncodingOptions spec;
  if (t == "none") return spec;
  if (t == "auto" || t == "planes" || t == "planes2") {
    spec.field_codecs = t == "auto"     ? FieldCodecPolicy::kAuto
                        : t == "planes" ? FieldCodecPolicy::kPlanes
                                        : FieldCodecPolicy::kPlanes2;
    return spec;
  }
  if (t == "zstd") {
    spec.compression = Compression::kZstd;
    return spec;
  }
  if (t.rfind("zstd:", 0) == 0) {
    const std::string lvl = t.substr(5);
    int level = 0;
    auto [ptr, ec] = std::from_chars(lvl.data(), lvl.data() + lvl.size(), level);
    spec.compression = Compression::kZstd;
    spec.zstd_level = level;
    // The level's range is ValidateEncoding's (the one check); its message lists the forms here.
    if (!lvl.empty() && ec == std::errc() && ptr == lvl.data() + lvl.size() &&
        ValidateEncoding(spec, [](std::string_view row) { return std::string(row); }).ok())
      return spec;
  }
  return Status::InvalidArgument("invalid compression '" + std::string(text) +
                                 "': use none, auto, planes, planes2, zstd or zstd:LEVEL with LEVEL in " +
                                 std::to_string(kMinZstdLevel) + ".." +
                                 std::to_string(kMaxZstdLevel));
}

Result<bool> ParseStoreDType(std::string_view text) {
  const std::string t = AsciiLower(TrimBlanks(text));
  if (t.empty() || t == "none") return false;
  if (t == "float8_e4m3fn" || t == "fp8") return true;
  return Status::InvalidArgument("invalid store dtype '" + std::string(text) +
                                 "': use float8_e4m3fn (lossy fp8 hidden states) or none");
}

}  // namespace libshard
