#include "readers/zip_archive.h"

#include <algorithm>
#include <cstring>
#include <span>

namespace libshard::convert {

namespace {

constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kEocd64Sig = 0x06064b50;
constexpr uint32_t kEocd64LocatorSig = 0x07064b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint64_t kEocdSize = 22;
constexpr uint64_t kEocd64Size = 56;
constexpr uint64_t kLocatorSize = 20;
constexpr uint64_t kCentralSize = 46;
constexpr uint64_t kLocalSize = 30;

uint16_t U16(const std::byte* p) {
  return static_cast<uint16_t>(std::to_integer<uint16_t>(p[0]) |
                               std::to_integer<uint16_t>(p[1]) << 8);
}
uint32_t U32(const std::byte* p) {
  return std::to_integer<uint32_t>(p[0]) | std::to_integer<uint32_t>(p[1]) << 8 |
         std::to_integer<uint32_t>(p[2]) << 16 | std::to_integer<uint32_t>(p[3]) << 24;
}
uint64_t U64(const std::byte* p) { return uint64_t{U32(p)} | uint64_t{U32(p + 4)} << 32; }

Status Bad(const ByteSource& src, uint64_t offset, const std::string& what) {
  return Status::Corruption(src.name() + ": zip structure at byte " + std::to_string(offset) +
                            ": " + what +
                            "; the file is damaged or truncated (re-create it with torch.save)");
}

}  // namespace

Result<ZipArchive> ZipArchive::Open(const ByteSource& src, uint64_t max_directory_bytes) {
  const uint64_t size = src.size();
  if (size < kEocdSize) return Bad(src, 0, "file too small for a zip archive");
  // The EOCD is followed only by its comment (at most 65535 bytes).
  uint64_t tail_len = std::min<uint64_t>(size, kEocdSize + 65535);
  std::vector<std::byte> tail(tail_len);
  LIBSHARD_RETURN_IF_ERROR(src.ReadAt(size - tail_len, tail, "zip end records"));
  uint64_t eocd_in_tail = UINT64_MAX;
  for (uint64_t i = tail_len - kEocdSize + 1; i-- > 0;) {
    if (U32(&tail[i]) == kEocdSig &&
        i + kEocdSize + U16(&tail[i + 20]) == tail_len) {  // comment reaches the end exactly
      eocd_in_tail = i;
      break;
    }
  }
  if (eocd_in_tail == UINT64_MAX)
    return Bad(src, size, "no end-of-central-directory record (the file is truncated)");
  const uint64_t eocd_off = size - tail_len + eocd_in_tail;
  const std::byte* e = &tail[eocd_in_tail];
  uint64_t disk = U16(e + 4), cd_disk = U16(e + 6);
  uint64_t count = U16(e + 10);
  uint64_t cd_size = U32(e + 12), cd_off = U32(e + 16);

  if (eocd_off >= kLocatorSize) {
    std::byte loc[kLocatorSize];
    LIBSHARD_RETURN_IF_ERROR(src.ReadAt(eocd_off - kLocatorSize, loc, "zip64 locator"));
    if (U32(loc) == kEocd64LocatorSig) {
      uint64_t e64_off = U64(loc + 8);
      if (U32(loc + 4) != 0 || U32(loc + 16) > 1)
        return Bad(src, eocd_off - kLocatorSize, "multi-disk zip64 archive is not supported");
      if (e64_off > eocd_off - kLocatorSize || eocd_off - kLocatorSize - e64_off < kEocd64Size)
        return Bad(src, eocd_off - kLocatorSize, "zip64 end record offset out of range");
      std::byte e64[kEocd64Size];
      LIBSHARD_RETURN_IF_ERROR(src.ReadAt(e64_off, e64, "zip64 end record"));
      if (U32(e64) != kEocd64Sig) return Bad(src, e64_off, "bad zip64 end record signature");
      disk = U32(e64 + 16);
      cd_disk = U32(e64 + 20);
      count = U64(e64 + 32);
      cd_size = U64(e64 + 40);
      cd_off = U64(e64 + 48);
    }
  }
  if (disk != 0 || cd_disk != 0) return Bad(src, eocd_off, "multi-disk archive is not supported");
  if (cd_off > eocd_off || cd_size > eocd_off - cd_off)
    return Bad(src, eocd_off, "central directory [" + std::to_string(cd_off) + ", +" +
                                  std::to_string(cd_size) + ") lies outside the file");
  if (cd_size > max_directory_bytes)
    return Status::ResourceExhausted(src.name() + ": zip central directory of " +
                                     std::to_string(cd_size) + " bytes exceeds the limit of " +
                                     std::to_string(max_directory_bytes));
  if (count > cd_size / kCentralSize)
    return Bad(src, eocd_off, "entry count " + std::to_string(count) +
                                  " does not fit in the central directory");

  std::vector<std::byte> cd(cd_size);
  LIBSHARD_RETURN_IF_ERROR(src.ReadAt(cd_off, cd, "zip central directory"));
  ZipArchive zip;
  zip.entries_.reserve(count);
  uint64_t p = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (cd_size - p < kCentralSize || U32(&cd[p]) != kCentralSig)
      return Bad(src, cd_off + p, "bad central directory entry " + std::to_string(i));
    const std::byte* h = &cd[p];
    ZipEntry entry;
    entry.flags = U16(h + 8);
    entry.method = U16(h + 10);
    entry.crc32 = U32(h + 16);
    entry.compressed_size = U32(h + 20);
    entry.size = U32(h + 24);
    uint64_t name_len = U16(h + 28), extra_len = U16(h + 30), comment_len = U16(h + 32);
    uint32_t disk_start = U16(h + 34);
    entry.local_header_offset = U32(h + 42);
    if (cd_size - p - kCentralSize < name_len + extra_len + comment_len)
      return Bad(src, cd_off + p, "central directory entry " + std::to_string(i) + " overruns");
    entry.name.assign(reinterpret_cast<const char*>(h + kCentralSize), name_len);
    // Zip64 extended information: only the fields saturated in the fixed header, in this order.
    const std::byte* x = h + kCentralSize + name_len;
    for (uint64_t q = 0; q + 4 <= extra_len;) {
      uint16_t id = U16(x + q), len = U16(x + q + 2);
      if (q + 4 + len > extra_len)
        return Bad(src, cd_off + p, "extra field of '" + entry.name + "' overruns");
      if (id == 0x0001) {
        const std::byte* z = x + q + 4;
        uint64_t avail = len;
        auto take64 = [&](uint64_t& field) -> bool {
          if (avail < 8) return false;
          field = U64(z);
          z += 8;
          avail -= 8;
          return true;
        };
        if (entry.size == 0xFFFFFFFFu && !take64(entry.size))
          return Bad(src, cd_off + p, "short zip64 field in '" + entry.name + "'");
        if (entry.compressed_size == 0xFFFFFFFFu && !take64(entry.compressed_size))
          return Bad(src, cd_off + p, "short zip64 field in '" + entry.name + "'");
        if (entry.local_header_offset == 0xFFFFFFFFu && !take64(entry.local_header_offset))
          return Bad(src, cd_off + p, "short zip64 field in '" + entry.name + "'");
        if (disk_start == 0xFFFF) {
          if (avail < 4) return Bad(src, cd_off + p, "short zip64 field in '" + entry.name + "'");
          disk_start = U32(z);
        }
      }
      q += 4 + uint64_t{len};
    }
    if (disk_start != 0)
      return Bad(src, cd_off + p, "entry '" + entry.name + "' is on another disk");
    if (!zip.by_name_.emplace(entry.name, zip.entries_.size()).second)
      return Bad(src, cd_off + p, "duplicate entry name '" + entry.name + "'");
    zip.entries_.push_back(std::move(entry));
    p += kCentralSize + name_len + extra_len + comment_len;
  }
  return zip;
}

const ZipEntry* ZipArchive::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

Result<uint64_t> ZipArchive::DataOffset(const ByteSource& src, const ZipEntry& entry) const {
  if (entry.flags & 0x0001)
    return Status::Unsupported(src.name() + ": zip entry '" + entry.name +
                               "' is encrypted; torch.save never encrypts");
  if (entry.method != 0)
    return Status::Unsupported(src.name() + ": zip entry '" + entry.name +
                               "' is compressed (method " + std::to_string(entry.method) +
                               "); torch.save writes stored entries only: re-save the file with "
                               "torch.save instead of re-zipping it");
  if (entry.compressed_size != entry.size)
    return Bad(src, entry.local_header_offset,
               "stored entry '" + entry.name + "' has compressed size " +
                   std::to_string(entry.compressed_size) + " != size " +
                   std::to_string(entry.size));
  std::byte h[kLocalSize];
  LIBSHARD_RETURN_IF_ERROR(src.ReadAt(entry.local_header_offset, h, "zip local header"));
  if (U32(h) != kLocalSig)
    return Bad(src, entry.local_header_offset, "bad local header of '" + entry.name + "'");
  uint64_t name_len = U16(h + 26), extra_len = U16(h + 28);
  if (name_len != entry.name.size())
    return Bad(src, entry.local_header_offset,
               "local header name of '" + entry.name + "' differs from the central directory");
  std::string local_name(name_len, '\0');
  LIBSHARD_RETURN_IF_ERROR(src.ReadAt(entry.local_header_offset + kLocalSize,
                                      std::as_writable_bytes(std::span(local_name)),
                                      "zip local header"));
  if (local_name != entry.name)
    return Bad(src, entry.local_header_offset,
               "local header name '" + local_name + "' differs from the central directory's '" +
                   entry.name + "'");
  uint64_t data = entry.local_header_offset + kLocalSize + name_len + extra_len;
  if (data > src.size() || entry.size > src.size() - data)
    return Bad(src, data, "data of '" + entry.name + "' (" + std::to_string(entry.size) +
                              " bytes) runs past the end of the file (" +
                              std::to_string(src.size()) + " bytes): the file is truncated");
  return data;
}

}  // namespace libshard::convert
