#include "io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace libshard::io {
namespace {

// Linux transfers at most 0x7ffff000 bytes a call; ask for no more than 1 GiB at a time.
constexpr uint64_t kMaxChunk = uint64_t{1} << 30;

// "<path>: is a FIFO, not a regular file; ..." for a file that must be regular.
std::string NotRegularMessage(const std::string& path, mode_t mode) {
  const char* kind = S_ISFIFO(mode)   ? "a FIFO (named pipe)"
                     : S_ISDIR(mode)  ? "a directory"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                     : S_ISSOCK(mode) ? "a socket"
                                      : "a special file";
  return path + ": is " + kind + ", not a regular file; libshard reads and writes only regular "
                "files: replace it with the file it stands for";
}

}  // namespace

File::File(File&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    Close().IgnoreError();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

File::~File() { Close().IgnoreError(); }

Result<File> File::Open(const std::string& path, int flags, int mode) {
  // Everything libshard opens, other than directories, must be a regular file: a FIFO (or a
  // device) put in place of a dataset file would block open(2) or read(2) forever. O_NONBLOCK
  // makes the open itself return at once (a FIFO without a writer opens; with O_WRONLY and no
  // reader it fails with ENXIO), fstat then rejects the file, and the flag is cleared again for
  // regular files (where it has no effect on Linux anyway).
  const bool directory = (flags & O_DIRECTORY) != 0;
  const int open_flags = flags | O_CLOEXEC | (directory ? 0 : O_NONBLOCK);
  int fd;
  do {
    fd = ::open(path.c_str(), open_flags, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return Status::NotFound(path + ": no such file", e);
    struct stat st {};
    if (e == ENXIO && ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      return Status(StatusCode::kInvalidArgument, NotRegularMessage(path, st.st_mode), e);
    return Status::FromErrno(e, "open " + path);
  }
  File file(fd, path);
  if (directory) return file;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode))
    return Status::InvalidArgument(NotRegularMessage(path, st.st_mode));
  if ((flags & O_NONBLOCK) == 0) {
    const int fl = ::fcntl(fd, F_GETFL);
    if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
      return Status::FromErrno(errno, "fcntl " + path);
  }
  return file;
}

Result<uint64_t> File::Size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return Status::FromErrno(errno, "fstat " + path_);
  return static_cast<uint64_t>(st.st_size);
}

Result<uint64_t> File::PReadFull(void* dst, uint64_t length, uint64_t offset) const {
  auto* out = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < length) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(length - done, kMaxChunk));
    const ssize_t n = ::pread(fd_, out + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::FromErrno(errno, "pread " + path_ + " at offset " +
                                          std::to_string(offset + done));
    }
    if (n == 0) break;  // EOF
    done += static_cast<uint64_t>(n);
  }
  return done;
}

void File::AdviseRandomAccess() const {
  if (fd_ >= 0) (void)posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
}

Status File::PReadExact(void* dst, uint64_t length, uint64_t offset) const {
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t done, PReadFull(dst, length, offset));
  if (done < length) {
    return Status::Corruption(path_ + ": offset " + std::to_string(offset) + ": file ends after " +
                              std::to_string(done) + " of " + std::to_string(length) +
                              " bytes (truncated?)");
  }
  return Status::OK();
}

Status File::PWriteAll(const void* src, uint64_t length, uint64_t offset) {
  const auto* in = static_cast<const char*>(src);
  uint64_t done = 0;
  while (done < length) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(length - done, kMaxChunk));
    const ssize_t n = ::pwrite(fd_, in + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::FromErrno(errno, path_ + ": pwrite at offset " +
                                          std::to_string(offset + done));
    }
    done += static_cast<uint64_t>(n);
  }
  return Status::OK();
}

Status File::Sync() {
  if (::fsync(fd_) != 0) return Status::FromErrno(errno, "fsync " + path_);
  return Status::OK();
}

Status File::Truncate(uint64_t size) {
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    return Status::FromErrno(errno, "ftruncate " + path_);
  }
  return Status::OK();
}

Status File::PunchHole(uint64_t offset, uint64_t length) {
  if (length == 0) return Status::OK();
  if (::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(length)) != 0) {
    return Status::FromErrno(errno, "fallocate(PUNCH_HOLE) " + path_);
  }
  return Status::OK();
}

Status File::Close() {
  if (fd_ < 0) return Status::OK();
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 && errno != EINTR) return Status::FromErrno(errno, "close " + path_);
  return Status::OK();
}

}  // namespace libshard::io
