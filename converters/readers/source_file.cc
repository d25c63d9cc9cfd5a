#include "readers/source_file.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "readers/byte_source.h"
#include "readers/safetensors_source.h"
#include "readers/torch_zip_source.h"

namespace libshard::convert {

namespace {

enum class Format { kZip, kGzip, kSafetensors, kLegacyTorch, kUnknown };

Format Sniff(std::span<const std::byte> head, uint64_t size) {
  auto at = [&](size_t i) { return i < head.size() ? std::to_integer<uint8_t>(head[i]) : -1; };
  if (at(0) == 'P' && at(1) == 'K' && at(2) == 3 && at(3) == 4) return Format::kZip;
  if (at(0) == 0x1f && at(1) == 0x8b) return Format::kGzip;
  if (head.size() >= 9) {
    uint64_t n = 0;
    for (int k = 7; k >= 0; --k) n = (n << 8) | std::to_integer<uint64_t>(head[k]);
    if (at(8) == '{' && n >= 2 && n <= size - 8) return Format::kSafetensors;
  }
  // Pre-1.6 torch.save: a raw pickle stream (PROTO opcode first) or a tar archive.
  if (at(0) == 0x80) return Format::kLegacyTorch;
  if (head.size() >= 262 && std::memcmp(head.data() + 257, "ustar", 5) == 0)
    return Format::kLegacyTorch;
  return Format::kUnknown;
}

Result<std::unique_ptr<SourceFile>> OpenFromBytes(std::unique_ptr<ByteSource> src,
                                                  uint64_t file_size, bool gzipped,
                                                  const SourceOptions& options) {
  std::vector<std::byte> head(std::min<uint64_t>(src->size(), 512));
  LIBSHARD_RETURN_IF_ERROR(src->ReadAt(0, head, "file header"));
  const std::string& path = src->name();
  switch (Sniff(head, src->size())) {
    case Format::kZip: {
      LIBSHARD_ASSIGN_OR_RETURN(auto f,
                                TorchZipSource::Open(std::move(src), file_size, gzipped, options));
      return std::unique_ptr<SourceFile>(std::move(f));
    }
    case Format::kSafetensors: {
      LIBSHARD_ASSIGN_OR_RETURN(
          auto f, SafetensorsSource::Open(std::move(src), file_size, gzipped, options));
      return std::unique_ptr<SourceFile>(std::move(f));
    }
    case Format::kGzip:
      return Status::Unsupported(path + ": gzip inside gzip is not supported");
    case Format::kLegacyTorch:
      return Status::Unsupported(
          path + ": legacy (pre-1.6, non-zip) torch.save format; libshard reads the zip format "
                 "only. Re-save it with a current torch: torch.save(torch.load(f), f)");
    case Format::kUnknown:
      break;
  }
  return Status::Unsupported(path + ": unknown file format (" + std::to_string(src->size()) +
                             " bytes; not a torch.save zip, a gzip, or a safetensors file)");
}

}  // namespace

uint64_t DefaultMaxDecompressedBytes(unsigned threads) {
  constexpr uint64_t kFloor = uint64_t{256} << 20;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{4} << 30;  // unknown machine: a modest guess
  const uint64_t physical = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  return std::max<uint64_t>(kFloor, physical / 4 / std::max(1u, threads));
}

Result<std::unique_ptr<SourceFile>> OpenSource(const std::string& path,
                                               const SourceOptions& options) {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<FileByteSource> file, FileByteSource::Open(path));
  return OpenSource(std::unique_ptr<ByteSource>(std::move(file)), options);
}

Result<std::unique_ptr<SourceFile>> OpenSource(std::unique_ptr<ByteSource> src,
                                               const SourceOptions& options) {
  const uint64_t file_size = src->size();
  std::byte magic[2] = {};
  if (file_size >= 2) LIBSHARD_RETURN_IF_ERROR(src->ReadAt(0, magic, "file header"));
  if (magic[0] == std::byte{0x1f} && magic[1] == std::byte{0x8b}) {
    const uint64_t limit = options.max_decompressed_bytes != 0 ? options.max_decompressed_bytes
                                                               : DefaultMaxDecompressedBytes(1);
    const std::string name = src->name();
    Result<GrowableBuffer> bytes = InflateGzip(*src, limit, options.max_decompressed_name);
    src.reset();  // the compressed file is closed before the inflated bytes are parsed
    if (!bytes.ok()) return bytes.status();
    return OpenFromBytes(std::make_unique<MemoryByteSource>(name, std::move(*bytes)), file_size,
                         true, options);
  }
  return OpenFromBytes(std::move(src), file_size, false, options);
}

}  // namespace libshard::convert
