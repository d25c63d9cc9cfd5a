#include "readers/cache_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace libshard::convert {

Result<std::unique_ptr<LocalCacheDir>> LocalCacheDir::OpenDir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECTORY);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return Status::NotFound("source directory " + path +
                              " does not exist or is not a directory; check the path");
    return Status::FromErrno(errno, "cannot open source directory " + path);
  }
  return std::unique_ptr<LocalCacheDir>(new LocalCacheDir(path, fd));
}

LocalCacheDir::~LocalCacheDir() { ::close(fd_); }

Result<std::unique_ptr<ByteSource>> LocalCacheDir::Open(const std::string& rel) const {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<FileByteSource> f,
                            FileByteSource::OpenBeneath(fd_, rel, Name(rel)));
  return std::unique_ptr<ByteSource>(std::move(f));
}

Result<CacheFileInfo> LocalCacheDir::Stat(const std::string& rel) const {
  // Opened (not fstatat'ed) so that the same no-symlink walk applies to every component.
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> f, Open(rel));
  const auto* file = static_cast<const FileByteSource*>(f.get());
  CacheFileInfo info;
  info.size = file->size();
  struct stat st;
  if (::fstat(file->fd(), &st) != 0) return Status::FromErrno(errno, "cannot stat " + Name(rel));
  info.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return info;
}

Result<std::vector<std::string>> LocalCacheDir::List() const {
  const int fd = ::openat(fd_, ".", O_RDONLY | O_CLOEXEC | O_DIRECTORY);
  if (fd < 0) return Status::FromErrno(errno, "cannot list " + path_);
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int e = errno;
    ::close(fd);
    return Status::FromErrno(e, "cannot list " + path_);
  }
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
    errno = 0;
  }
  const int e = errno;
  ::closedir(d);
  if (e != 0) return Status::FromErrno(e, "cannot list " + path_);
  return names;
}

bool LocalCacheDir::Exists(const std::string& rel) const {
  if (!IsPlainRelativePath(rel)) return false;
  struct stat st;
  return ::fstatat(fd_, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

Result<std::unique_ptr<ByteSource>> MemoryCacheDir::Open(const std::string& rel) const {
  if (!IsPlainRelativePath(rel))
    return Status::InvalidArgument(Name(rel) + ": '" + rel +
                                   "' is not a plain relative path beneath its directory");
  auto it = files_.find(rel);
  if (it == files_.end()) return Status::NotFound("cannot open " + Name(rel) + ": no such file");
  return std::unique_ptr<ByteSource>(std::make_unique<MemoryByteSource>(Name(rel), it->second));
}

Result<CacheFileInfo> MemoryCacheDir::Stat(const std::string& rel) const {
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> f, Open(rel));
  return CacheFileInfo{f->size(), 0};
}

Result<std::vector<std::string>> MemoryCacheDir::List() const {
  std::vector<std::string> names;
  for (const auto& [rel, bytes] : files_)
    if (rel.find('/') == std::string::npos) names.push_back(rel);
  return names;
}

}  // namespace libshard::convert
