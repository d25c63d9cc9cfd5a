#include "pack/file_hash.h"

#include <xxhash.h>

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "readers/byte_source.h"

namespace libshard::convert {

Result<uint64_t> HashFile(const std::string& path) {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<FileByteSource> file, FileByteSource::Open(path));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (!state) return Status::ResourceExhausted("cannot allocate an xxh3 state to hash " + path);
  XXH3_64bits_reset(state.get());
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  std::vector<std::byte> buf(static_cast<size_t>(std::min(kChunk, file->size())));
  for (uint64_t offset = 0; offset < file->size(); offset += buf.size()) {
    const std::span<std::byte> chunk(buf.data(),
                                     std::min<uint64_t>(buf.size(), file->size() - offset));
    LIBSHARD_RETURN_IF_ERROR(file->ReadAt(offset, chunk, "the provenance hash"));
    XXH3_64bits_update(state.get(), chunk.data(), chunk.size());
  }
  return static_cast<uint64_t>(XXH3_64bits_digest(state.get()));
}

}  // namespace libshard::convert
