// libFuzzer target for the gzip path of OpenSource (readers/source_file.h): streaming inflation
// of one or more members under a small max_decompressed_bytes, then the torch zip or safetensors
// reader on the result, then every tensor read, exactly as `libshard pack` opens a `.pt.gz`.
//
// OpenSource takes a path, so the input is written to a memfd and opened through /proc/self/fd.
// Inputs that do not start with the gzip magic are skipped: the other targets cover those readers.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "readers/source_file.h"

namespace {

// The memfd holding the current input; created once, rewritten per input.
int InputFd() {
  static const int fd = [] {
    const int f = memfd_create("gzip_fuzz", MFD_CLOEXEC);
    if (f < 0) std::abort();
    return f;
  }();
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  using namespace libshard::convert;
  if (size < 2 || data[0] != 0x1f || data[1] != 0x8b) return 0;
  const int fd = InputFd();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
    std::abort();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  SourceOptions options;
  options.max_decompressed_bytes = 1 << 20;  // the bomb guard, small so bombs hit it quickly
  options.max_header_bytes = 1 << 20;
  options.max_tensor_bytes = fuzz::kMaxReadBytes;
  auto src = OpenSource(path, options);
  if (!src.ok()) return 0;
  for (size_t i = 0; i < (*src)->tensors().size(); ++i) {
    const uint64_t n = (*src)->tensors()[i].nbytes;
    if (n > options.max_tensor_bytes) __builtin_trap();
    std::vector<std::byte> buf(n);
    (*src)->ReadTensor(i, buf).IgnoreError();
  }
  return 0;
}
