#include "pack/file_hash.h"

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "libshard/checksum.h"
#include "readers/byte_source.h"

namespace libshard::convert {

Result<uint64_t> HashFile(const std::string& path) {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<FileByteSource> file, FileByteSource::Open(path));
  Xxh3Stream hash;  // the bytes arrive chunk by chunk: the dispatching stream (checksum.h)
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  std::vector<std::byte> buf(static_cast<size_t>(std::min(kChunk, file->size())));
  for (uint64_t offset = 0; offset < file->size(); offset += buf.size()) {
    const std::span<std::byte> chunk(buf.data(),
                                     std::min<uint64_t>(buf.size(), file->size() - offset));
    LIBSHARD_RETURN_IF_ERROR(file->ReadAt(offset, chunk, "the provenance hash"));
    hash.Update(chunk);
  }
  return hash.Digest();
}

}  // namespace libshard::convert
