#include "pack/file_hash.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <memory>
#include <vector>

namespace libshard::convert {

Result<uint64_t> HashFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "cannot open " + path + " to hash it");
  const std::unique_ptr<const int, void (*)(const int*)> closer(&fd, [](const int* f) { ::close(*f); });
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state) return Status::ResourceExhausted("cannot allocate an xxh3 state to hash " + path);
  XXH3_64bits_reset(state.get());
  constexpr size_t kChunk = size_t{4} << 20;
  std::vector<char> buf(kChunk);
  uint64_t offset = 0;
  Status st;
  while (true) {
    const ssize_t n = ::pread(fd, buf.data(), kChunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      st = Status::FromErrno(errno, "cannot read " + path + " at offset " + std::to_string(offset));
      break;
    }
    if (n == 0) break;
    XXH3_64bits_update(state.get(), buf.data(), static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  if (!st.ok()) return st;
  return static_cast<uint64_t>(XXH3_64bits_digest(state.get()));
}

}  // namespace libshard::convert
