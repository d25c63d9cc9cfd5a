// libFuzzer target for the loader state's encoding (libshard/loader_state.h, docs/ORDER.md §8):
// DecodeLoaderState of any bytes either refuses them or yields a state that ValidateLoaderState
// accepts, whose encoding decodes to the same state and encodes to the same text (a checkpoint
// saved from a resumed loader is read back as it was).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "libshard/loader_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  auto s = DecodeLoaderState(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!s.ok()) return 0;
  if (!ValidateLoaderState(*s).ok()) __builtin_trap();
  const std::string text = EncodeLoaderState(*s);
  auto again = DecodeLoaderState(text);
  if (!again.ok() || !(*again == *s) || EncodeLoaderState(*again) != text) __builtin_trap();
  (void)StartOfNextEpoch(*s);
  return 0;
}
