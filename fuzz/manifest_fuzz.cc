// libFuzzer target for manifest.json (FORMAT.md §2.2): ParseManifest, then EncodeManifest of
// what it accepts must parse again and encode to the same text (a writer re-encodes manifests on
// append and merge).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  auto m = format::ParseManifest(std::string_view(reinterpret_cast<const char*>(data), size),
                                 "fuzz.json");
  if (!m.ok()) return 0;
  const std::string text = format::EncodeManifest(*m);
  auto again = format::ParseManifest(text, "fuzz-again.json");
  if (!again.ok() || format::EncodeManifest(*again) != text) __builtin_trap();
  return 0;
}
