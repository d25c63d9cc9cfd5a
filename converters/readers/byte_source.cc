#include "readers/byte_source.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

namespace libshard::convert {

namespace {

Status Truncated(const std::string& file, std::string_view what, uint64_t offset, uint64_t n,
                 uint64_t size) {
  return Status::Corruption(file + ": truncated: " + std::string(what) + " needs bytes [" +
                            std::to_string(offset) + ", " + std::to_string(offset) + "+" +
                            std::to_string(n) + ") but the file has " + std::to_string(size) +
                            " bytes; the file is incomplete, re-create it");
}

bool RangeFits(uint64_t offset, uint64_t n, uint64_t size) {
  return offset <= size && n <= size - offset;
}

}  // namespace

Result<std::unique_ptr<FileByteSource>> FileByteSource::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "cannot open source " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::FromErrno(e, "cannot stat source " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + ": not a regular file");
  }
  return std::unique_ptr<FileByteSource>(
      new FileByteSource(path, fd, static_cast<uint64_t>(st.st_size)));
}

FileByteSource::~FileByteSource() { ::close(fd_); }

Status FileByteSource::ReadAt(uint64_t offset, std::span<std::byte> dst,
                              std::string_view what) const {
  if (!RangeFits(offset, dst.size(), size_))
    return Truncated(path_, what, offset, dst.size(), size_);
  size_t done = 0;
  while (done < dst.size()) {
    // Bounded chunks keep each request below the kernel's per-call limit (~2 GiB).
    size_t want = std::min<size_t>(dst.size() - done, size_t{1} << 30);
    ssize_t n = ::pread(fd_, dst.data() + done, want, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, path_ + ": reading " + std::string(what) + " at offset " +
                                          std::to_string(offset + done));
    }
    if (n == 0)  // the file shrank after open
      return Truncated(path_, what, offset, dst.size(), offset + done);
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

Status MemoryByteSource::ReadAt(uint64_t offset, std::span<std::byte> dst,
                                std::string_view what) const {
  if (!RangeFits(offset, dst.size(), data_.size()))
    return Truncated(name_ + " (inflated)", what, offset, dst.size(), data_.size());
  if (!dst.empty()) std::memcpy(dst.data(), data_.data() + offset, dst.size());
  return Status::OK();
}

Result<std::vector<std::byte>> InflateGzipFile(const std::string& path, uint64_t max_bytes) {
  LIBSHARD_ASSIGN_OR_RETURN(auto file, FileByteSource::Open(path));
  z_stream zs;
  std::memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
    return Status::Internal(path + ": inflateInit2 failed");
  struct ZGuard {
    z_stream* z;
    ~ZGuard() { inflateEnd(z); }
  } guard{&zs};

  std::vector<std::byte> out;
  // The gzip trailer's ISIZE (size mod 2^32) is only a hint; it is capped so a forged value
  // cannot reserve more than the limit allows.
  if (file->size() >= 18) {
    unsigned char tail[4];
    LIBSHARD_RETURN_IF_ERROR(file->ReadAt(file->size() - 4,
                                          std::as_writable_bytes(std::span(tail)), "gzip trailer"));
    uint64_t hint = uint64_t{tail[0]} | uint64_t{tail[1]} << 8 | uint64_t{tail[2]} << 16 |
                    uint64_t{tail[3]} << 24;
    // Deflate cannot expand beyond ~1032:1, which bounds a forged or torn trailer.
    const uint64_t plausible = file->size() * 1032 + (uint64_t{1} << 16);
    out.reserve(std::min<uint64_t>({hint, plausible, max_bytes, uint64_t{1} << 32}));
  }
  std::vector<std::byte> in(size_t{1} << 20);
  uint64_t in_off = 0;
  size_t produced = 0;
  bool stream_end = false;  // last member finished and no input is pending
  while (true) {
    if (zs.avail_in == 0) {
      if (in_off >= file->size()) break;
      size_t n = static_cast<size_t>(std::min<uint64_t>(in.size(), file->size() - in_off));
      LIBSHARD_RETURN_IF_ERROR(file->ReadAt(in_off, std::span(in.data(), n), "gzip data"));
      in_off += n;
      zs.next_in = reinterpret_cast<Bytef*>(in.data());
      zs.avail_in = static_cast<uInt>(n);
    }
    if (out.size() == produced) {
      uint64_t limit = max_bytes == UINT64_MAX ? max_bytes : max_bytes + 1;
      uint64_t new_size = out.size() + std::max<uint64_t>(out.size(), uint64_t{1} << 20);
      // Within the reserved capacity first (no reallocation; only used bytes get touched).
      if (out.capacity() > out.size()) new_size = std::min<uint64_t>(new_size, out.capacity());
      new_size = std::min(new_size, limit);
      if (new_size <= produced)
        return Status::ResourceExhausted(
            path + ": gzip inflates past the limit of " + std::to_string(max_bytes) +
            " bytes (SourceOptions::max_decompressed_bytes); refusing a possible zip bomb, or "
            "raise the limit");
      out.resize(new_size);
    }
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, UINT32_MAX));
    uInt before = zs.avail_out;
    int rc = inflate(&zs, Z_NO_FLUSH);
    produced += before - zs.avail_out;
    if (produced > max_bytes)
      return Status::ResourceExhausted(
          path + ": gzip inflates past the limit of " + std::to_string(max_bytes) +
          " bytes (SourceOptions::max_decompressed_bytes); refusing a possible zip bomb, or "
          "raise the limit");
    if (rc == Z_STREAM_END) {
      stream_end = true;
      // Another member may follow (concatenated gzip files inflate to their concatenation).
      if (zs.avail_in == 0 && in_off >= file->size()) break;
      if (inflateReset(&zs) != Z_OK) return Status::Internal(path + ": inflateReset failed");
      stream_end = false;
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) continue;  // needs more input
    if (rc != Z_OK)
      return Status::Corruption(path + ": gzip data is corrupt near compressed offset " +
                                std::to_string(in_off - zs.avail_in) + " (" +
                                (zs.msg ? zs.msg : "inflate error") + "); re-create the file");
  }
  if (!stream_end)
    return Status::Corruption(path + ": gzip stream is truncated after " +
                              std::to_string(file->size()) +
                              " compressed bytes; the file is incomplete, re-create it");
  out.resize(produced);
  return out;
}

}  // namespace libshard::convert
