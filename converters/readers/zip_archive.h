// The central directory of a zip archive, as torch.save writes it (caffe2 PyTorchStreamWriter via
// miniz): stored entries, 64-byte-aligned data through a local-only 'FB' padding extra field,
// general-purpose bit 3 with data descriptors (so local-header sizes and CRCs are zero and are
// never trusted), and zip64 records. Sizes, CRCs and offsets come from the central directory
// (zip64 extended information where a field is 0xFFFFFFFF); the data offset of an entry comes
// from its local header, whose extra field differs from the central one.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "libshard/status.h"
#include "readers/byte_source.h"

namespace libshard::convert {

struct ZipEntry {
  std::string name;
  uint16_t flags = 0;
  uint16_t method = 0;  // 0 = stored
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;  // uncompressed
  uint64_t local_header_offset = 0;
};

class ZipArchive {
 public:
  // Parses the end-of-central-directory records and the central directory of `src`. Bounds every
  // count and offset against the file; refuses multi-disk archives and duplicate names.
  static Result<ZipArchive> Open(const ByteSource& src, uint64_t max_directory_bytes);

  // In central-directory order.
  const std::vector<ZipEntry>& entries() const { return entries_; }
  // nullptr when absent.
  const ZipEntry* Find(const std::string& name) const;
  // Absolute offset of the entry's data in the file, read from its local header, after checking
  // that the entry is stored (not compressed, not encrypted), that the local header matches the
  // central one, and that [offset, offset + size) lies inside the file.
  Result<uint64_t> DataOffset(const ByteSource& src, const ZipEntry& entry) const;

 private:
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> by_name_;
};

}  // namespace libshard::convert
