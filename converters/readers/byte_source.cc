#include "readers/byte_source.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <utility>

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
  // O_NONBLOCK: open() of a FIFO without a writer would block forever (the path may have been
  // replaced after the source list was made); a device may also block. For a regular file the
  // flag changes nothing, so it is left set.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Status::FromErrno(errno, "cannot open source " + path);
  return Adopt(path, fd);
}

Result<std::unique_ptr<FileByteSource>> FileByteSource::Adopt(std::string path, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::FromErrno(e, "cannot stat source " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* kind = S_ISFIFO(st.st_mode)  ? "a FIFO (named pipe)"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                                              : "not a regular file";
    return Status::InvalidArgument(path + ": source is " + kind +
                                   ", not a regular file; it was not read. Sources must be "
                                   "regular files (or symlinks to them): remove it from the "
                                   "source directory or list");
  }
  return std::unique_ptr<FileByteSource>(
      new FileByteSource(std::move(path), fd, static_cast<uint64_t>(st.st_size)));
}

bool IsPlainRelativePath(std::string_view rel) {
  if (rel.empty() || rel.size() > 4096 || rel.front() == '/') return false;
  if (rel.find('\0') != std::string_view::npos) return false;
  size_t begin = 0;
  while (begin <= rel.size()) {
    size_t end = rel.find('/', begin);
    if (end == std::string_view::npos) end = rel.size();
    const std::string_view part = rel.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") return false;
    begin = end + 1;
  }
  return true;
}

Result<std::unique_ptr<FileByteSource>> FileByteSource::OpenBeneath(int dirfd,
                                                                    const std::string& rel,
                                                                    const std::string& display) {
  if (!IsPlainRelativePath(rel))
    return Status::InvalidArgument(display + ": '" + rel +
                                   "' is not a plain relative path beneath its directory");
  int at = dirfd;
  int owned = -1;  // the directory fd opened for the previous component
  size_t begin = 0;
  while (true) {
    const size_t slash = rel.find('/', begin);
    const bool last = slash == std::string::npos;
    const std::string part = rel.substr(begin, last ? std::string::npos : slash - begin);
    const int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY |
                      (last ? O_NONBLOCK : O_DIRECTORY);
    const int fd = ::openat(at, part.c_str(), flags);
    const int e = errno;
    if (owned >= 0) ::close(owned);
    if (fd < 0) {
      if (e == ELOOP || (!last && e == ENOTDIR))
        return Status::InvalidArgument(
            display + ": '" + part + "' is a symlink or not a directory; libshard follows no "
            "symlink inside a cache directory: replace it by the file it points to");
      return Status::FromErrno(e, "cannot open " + display);
    }
    if (last) return Adopt(display, fd);
    at = owned = fd;
    begin = slash + 1;
  }
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

GrowableBuffer::~GrowableBuffer() {
  if (addr_ != nullptr) ::munmap(addr_, mapped_);
}

GrowableBuffer::GrowableBuffer(GrowableBuffer&& other) noexcept
    : addr_(std::exchange(other.addr_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

GrowableBuffer& GrowableBuffer::operator=(GrowableBuffer&& other) noexcept {
  if (this != &other) {
    if (addr_ != nullptr) ::munmap(addr_, mapped_);
    addr_ = std::exchange(other.addr_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

Status GrowableBuffer::Resize(uint64_t n) {
  static const uint64_t kPage = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (n > (uint64_t{1} << 56))
    return Status::ResourceExhausted("cannot hold " + std::to_string(n) + " bytes in memory");
  const uint64_t want = (n + kPage - 1) / kPage * kPage;
  if (want == mapped_) {
    // Bytes given up must read as zero if the buffer grows again.
    if (n < size_) std::memset(data() + n, 0, static_cast<size_t>(size_ - n));
    size_ = n;
    return Status::OK();
  }
  void* p = nullptr;
  if (want == 0) {
    ::munmap(addr_, mapped_);
  } else if (addr_ == nullptr) {
    p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  } else {
    // Moves page tables, never bytes; new pages read as zero.
    p = ::mremap(addr_, mapped_, want, MREMAP_MAYMOVE);
  }
  if (p == MAP_FAILED)
    return Status::ResourceExhausted("cannot map " + std::to_string(want) +
                                     " bytes of memory: " + std::strerror(errno));
  if (n < size_ && want > 0) {
    // Bytes past n on the last page must read as zero if the buffer grows again.
    std::memset(static_cast<std::byte*>(p) + n, 0, static_cast<size_t>(want - n));
  }
  addr_ = p;
  mapped_ = want;
  size_ = n;
  return Status::OK();
}

Result<GrowableBuffer> InflateGzipFile(const std::string& path, uint64_t max_bytes,
                                       std::string_view limit_name) {
  LIBSHARD_ASSIGN_OR_RETURN(auto file, FileByteSource::Open(path));
  return InflateGzip(*file, max_bytes, limit_name);
}

Result<GrowableBuffer> InflateGzip(const ByteSource& src, uint64_t max_bytes,
                                   std::string_view limit_name) {
  const ByteSource* file = &src;
  const std::string& path = src.name();
  z_stream zs;
  std::memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
    return Status::Internal(path + ": inflateInit2 failed");
  struct ZGuard {
    z_stream* z;
    ~ZGuard() { inflateEnd(z); }
  } guard{&zs};
  auto too_big = [&] {
    return Status::ResourceExhausted(
        path + ": gzip inflates past the limit of " + std::to_string(max_bytes) +
        " bytes; refusing a possible zip bomb. If the file is genuine, raise the limit "
        "(" + std::string(limit_name) + ")");
  };

  // The output grows in steps of at most kGzipGrowStep (mremap: no copy) and never past
  // max_bytes + 1, the one byte that proves the limit is passed. The trailer's ISIZE is not
  // trusted: it is mod 2^32 and per member.
  const uint64_t cap = max_bytes == UINT64_MAX ? max_bytes : max_bytes + 1;
  GrowableBuffer out;
  // Input is read in pieces of at most 1 MiB; a small file needs no more than its size.
  std::vector<std::byte> in(static_cast<size_t>(std::clamp<uint64_t>(file->size(), 1, uint64_t{1} << 20)));
  uint64_t in_off = 0;
  uint64_t produced = 0;
  bool stream_end = false;  // the last member finished and no input is pending
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
      if (produced >= cap) return too_big();
      const uint64_t step = std::clamp<uint64_t>(produced / 4, uint64_t{1} << 20, kGzipGrowStep);
      const uint64_t new_size = produced + std::min(step, cap - produced);
      Status grown = out.Resize(new_size);
      if (!grown.ok())
        return Status::ResourceExhausted(path + ": inflating the gzip source: " +
                                         grown.message() + " (after " + std::to_string(produced) +
                                         " bytes); lower the thread count or " +
                                         std::string(limit_name));
    }
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min<uint64_t>(out.size() - produced, UINT32_MAX));
    uInt before = zs.avail_out;
    int rc = inflate(&zs, Z_NO_FLUSH);
    produced += before - zs.avail_out;
    if (produced > max_bytes) return too_big();
    if (rc == Z_STREAM_END) {
      stream_end = true;
      // Another member may follow (concatenated gzip files inflate to their concatenation).
      if (zs.avail_in == 0 && in_off >= file->size()) break;
      if (inflateReset(&zs) != Z_OK) return Status::Internal(path + ": inflateReset failed");
      stream_end = false;
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) continue;  // needs more input
    if (rc == Z_BUF_ERROR && zs.avail_out == 0) continue;  // needs more output space
    if (rc != Z_OK)
      return Status::Corruption(path + ": gzip data is corrupt near compressed offset " +
                                std::to_string(in_off - zs.avail_in) + " (" +
                                (zs.msg ? zs.msg : "inflate error") + "); re-create the file");
  }
  if (!stream_end)
    return Status::Corruption(path + ": gzip stream is truncated after " +
                              std::to_string(file->size()) +
                              " compressed bytes; the file is incomplete, re-create it");
  LIBSHARD_RETURN_IF_ERROR(out.Resize(produced));
  return out;
}

}  // namespace libshard::convert
