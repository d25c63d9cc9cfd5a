#include "io/filesystem.h"

#include "io/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

namespace libshard::internal {

namespace {

// The whole pages a map of `size` bytes holds. The kernel unmaps whole pages whatever length it is
// given; ThreadSanitizer forgets its record of the map (a write by the mapping thread) only for the
// whole pages of the length, so the page-rounded length keeps a partial last page from reading as
// written when the address is reused by a map it cannot see (liburing's rings, io/uring_engine.cc).
size_t MappedLength(size_t size) {
  static const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (size + kPage - 1) / kPage * kPage;
}

}  // namespace

MappedFile::~MappedFile() {
  if (addr_) ::munmap(addr_, MappedLength(size_));
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : addr_(std::exchange(o.addr_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (addr_) ::munmap(addr_, MappedLength(size_));
    addr_ = std::exchange(o.addr_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

Result<MappedFile> MappedFile::Map(const std::string& path) {
  LIBSHARD_ASSIGN_OR_RETURN(io::File f, io::File::Open(path, O_RDONLY));
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t size, f.Size());
  MappedFile m;
  if (size == 0) return m;
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, f.fd(), 0);
  if (addr == MAP_FAILED) return Status::FromErrno(errno, "mmap " + path);
  m.addr_ = addr;
  m.size_ = size;
  return m;
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  std::string p(dir);
  if (!p.empty() && p.back() != '/') p += '/';
  p += name;
  return p;
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Status MakeDirectories(const std::string& dir) {
  std::string cur;
  size_t pos = 0;
  while (pos <= dir.size()) {
    size_t next = dir.find('/', pos);
    if (next == std::string::npos) next = dir.size();
    cur = dir.substr(0, next);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      return Status::FromErrno(errno, "mkdir " + cur);
    pos = next + 1;
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + dir);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(dir + " is not a directory");
  return Status::OK();
}

Status SyncDirectory(const std::string& dir) {
  LIBSHARD_ASSIGN_OR_RETURN(io::File f, io::File::Open(dir, O_RDONLY | O_DIRECTORY));
  return f.Sync();
}

Status RenameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    return Status::FromErrno(errno, "rename " + from + " -> " + to);
  return Status::OK();
}

Status RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return Status::FromErrno(errno, "unlink " + path);
  return Status::OK();
}

Result<std::vector<std::string>> ListDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return Status::FromErrno(errno, "opendir " + dir);
  std::unique_ptr<DIR, int (*)(DIR*)> owner(d, &::closedir);
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view n(e->d_name);
    if (n != "." && n != "..") names.emplace_back(n);
  }
  return names;
}

Result<std::string> ReadWholeFile(const std::string& path, uint64_t max_size) {
  LIBSHARD_ASSIGN_OR_RETURN(io::File f, io::File::Open(path, O_RDONLY));
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t size, f.Size());
  if (size > max_size)
    return Status::Corruption(path + ": " + std::to_string(size) + " bytes exceeds the limit of " +
                              std::to_string(max_size));
  std::string data(size, '\0');
  LIBSHARD_RETURN_IF_ERROR(f.PReadExact(data.data(), size, 0));
  return data;
}

Status WriteFileAtomically(const std::string& dir, const std::string& name, std::string_view data,
                           bool sync) {
  const std::string path = JoinPath(dir, name);
  const std::string tmp = path + ".tmp";
  {
    LIBSHARD_ASSIGN_OR_RETURN(io::File f, io::File::Open(tmp, O_WRONLY | O_CREAT | O_TRUNC));
    LIBSHARD_RETURN_IF_ERROR(f.PWriteAll(data.data(), data.size(), 0));
    if (sync) LIBSHARD_RETURN_IF_ERROR(f.Sync());
    LIBSHARD_RETURN_IF_ERROR(f.Close());
  }
  return RenameFile(tmp, path);
}

Status LinkOrCopyFile(const std::string& from, const std::string& to, bool link, bool sync) {
  if (link && ::link(from.c_str(), to.c_str()) == 0) return Status::OK();
  LIBSHARD_ASSIGN_OR_RETURN(io::File in, io::File::Open(from, O_RDONLY));
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t size, in.Size());
  LIBSHARD_ASSIGN_OR_RETURN(io::File out, io::File::Open(to, O_WRONLY | O_CREAT | O_EXCL));
  constexpr uint64_t kChunk = 8ull << 20;
  std::vector<char> buf(static_cast<size_t>(std::min(size, kChunk)));
  for (uint64_t off = 0; off < size;) {
    const uint64_t n = std::min<uint64_t>(kChunk, size - off);
    LIBSHARD_RETURN_IF_ERROR(in.PReadExact(buf.data(), n, off));
    LIBSHARD_RETURN_IF_ERROR(out.PWriteAll(buf.data(), n, off));
    off += n;
  }
  if (sync) LIBSHARD_RETURN_IF_ERROR(out.Sync());
  return out.Close();
}

Result<uint64_t> RandomNonZeroU64() {
  for (;;) {
    uint64_t v = 0;
    const ssize_t n = ::getrandom(&v, sizeof v, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof v))
      return Status::FromErrno(n < 0 ? errno : EIO, "getrandom");
    if (v != 0) return v;
  }
}

std::shared_ptr<std::byte[]> AllocateAligned(uint64_t size, uint64_t alignment) {
  if (size > (uint64_t{1} << 62)) return nullptr;
  uint64_t rounded = (size + alignment - 1) / alignment * alignment;
  if (rounded == 0) rounded = alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (!p) return nullptr;
  return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

}  // namespace libshard::internal
