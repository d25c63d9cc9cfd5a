// The node-local cache's files (cache_files.h, docs/CACHE.md).
#include "remote/cache_files.h"

#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "format/bytes.h"
#include "format/checksum.h"
#include "io/filesystem.h"
#include "remote/cache_log.h"
#include "remote/cache_verify.h"

namespace libshard::remote {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

std::string Sanitize(std::string_view s, size_t max) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= max) break;
    out.push_back(std::isalnum(c) || c == '.' || c == '-' || c == '_' ? static_cast<char>(c)
                                                                      : '_');
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

std::string EtagTag(const std::string& etag) {
  return format::Hex16(format::Xxh3(etag.data(), etag.size()));
}

Status Errno(const std::string& what, int e) { return Status::FromErrno(e, what); }

Status MakeCacheDirs(const std::string& root, const std::string& relative) {
  LIBSHARD_RETURN_IF_ERROR(MakeDirs(root));
  std::string dir = root;
  size_t from = 0;
  while (from < relative.size()) {
    size_t slash = relative.find('/', from);
    if (slash == std::string::npos) slash = relative.size();
    if (slash > from) {
      dir = internal::JoinPath(dir, relative.substr(from, slash - from));
      struct stat st {};
      if (::lstat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
        // A symlink (or a file) where the cache keeps a directory: never followed.
        if (::unlink(dir.c_str()) != 0) return Errno(dir + ": not a directory of the cache");
      }
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        return Errno(dir + ": cannot create the cache directory (set cache= / LIBSHARD_CACHE_DIR "
                           "to a writable node-local disk)");
      if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        return Status::IoError(dir + ": not a directory of the cache", ENOTDIR);
    }
    from = slash + 1;
  }
  return Status::OK();
}

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::IoError(dir + ": cannot create the cache directory: " + ec.message() +
                               " (set cache= / LIBSHARD_CACHE_DIR to a writable node-local disk)",
                           ec.value());
  return Status::OK();
}

Result<std::string> FetchChecked(objstore::ObjectStore& store, const std::string& name,
                                 const objstore::ObjectInfo& info,
                                 const std::function<Status(const std::string&)>& check) {
  const std::string where = store.UrlOf(name);
  if (info.size > kMaxIndexObject)
    return Status::Corruption(where + ": " + std::to_string(info.size) +
                              " bytes, more than the " + std::to_string(kMaxIndexObject) +
                              " such a file may have");
  Status failed;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string data;
    try {
      data.resize(info.size);
    } catch (const std::bad_alloc&) {
      return Status::ResourceExhausted(where + ": cannot allocate " + std::to_string(info.size) +
                                       " bytes");
    }
    LIBSHARD_RETURN_IF_ERROR(store.Read(name, 0, info.size, info.generation, data.data()));
    failed = check(data);
    if (failed.ok()) return data;
  }
  return Status::Corruption(where + " (" + store.KeyWhere(name) + ", ETag " + info.generation +
                            "): the object in the bucket is damaged: " +
                            WithoutLocalAdvice(failed.message()) +
                            " on two downloads; upload the dataset again from its source");
}

Result<std::string> ReadCachedFile(const std::string& path, uint64_t size) {
  LIBSHARD_ASSIGN_OR_RETURN(io::File f,
                            io::File::Open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (fstat(f.fd(), &st) != 0 || !S_ISREG(st.st_mode))
    return Status::Corruption(path + ": not a regular file");
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t have, f.Size());
  if (have != size)
    return Status::Corruption(path + ": " + std::to_string(have) + " bytes, not " +
                              std::to_string(size));
  std::string out(size, '\0');
  LIBSHARD_RETURN_IF_ERROR(f.PReadExact(out.data(), size, 0));
  return out;
}

Status WriteCachedFile(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  {
    (void)::unlink(tmp.c_str());  // a leftover of a killed process with this pid, or a symlink
    LIBSHARD_ASSIGN_OR_RETURN(
        io::File f, io::File::Open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC));
    LIBSHARD_RETURN_IF_ERROR(f.PWriteAll(data.data(), data.size(), 0));
    LIBSHARD_RETURN_IF_ERROR(f.Sync());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno(path + ": rename");
  return Status::OK();
}

Status RewriteCachedFile(const std::string& path, std::string_view data) {
  LIBSHARD_ASSIGN_OR_RETURN(io::File f, OpenCacheFile(path, O_WRONLY | O_CREAT));
  LIBSHARD_RETURN_IF_ERROR(f.Truncate(data.size()));
  LIBSHARD_RETURN_IF_ERROR(f.PWriteAll(data.data(), data.size(), 0));
  return f.Sync();
}

Status LinkInto(const std::string& target, const std::string& link) {
  if (::link(target.c_str(), link.c_str()) != 0 && errno != EEXIST)
    return Errno(link + ": link to " + target);
  return Status::OK();
}

// Opens a cache file without following a symlink. A symlink (or anything but a regular file)
// where a cache file belongs is not libshard's: it is removed (the link, never its target) and
// the file made anew, so nothing is ever written outside the cache (docs/CACHE.md §1).
Result<io::File> OpenCacheFile(const std::string& path, int flags) {
  // O_NONBLOCK: a FIFO in the file's place must not block the open (no effect on a file).
  flags |= O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  Result<io::File> f = io::File::Open(path, flags);
  struct stat st {};
  if (f.ok() && fstat(f->fd(), &st) == 0 && S_ISREG(st.st_mode)) return f;
  // io::File::Open refuses what is not a regular file (InvalidArgument); O_NOFOLLOW a symlink.
  if (!f.ok() && f.status().sys_errno() != ELOOP && f.status().sys_errno() != ENXIO &&
      f.status().sys_errno() != EISDIR && f.status().code() != StatusCode::kInvalidArgument)
    return f.status();
  if (::lstat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode) && ::unlink(path.c_str()) != 0)
    return Errno(path + ": not a regular file, and it cannot be removed");
  if (S_ISDIR(st.st_mode))
    return Status::IoError(path + ": a directory where the cache keeps a file; delete it", EISDIR);
  return io::File::Open(path, flags);
}

Status CachedShard::Init(uint64_t wanted_block) {
  LIBSHARD_ASSIGN_OR_RETURN(data, OpenCacheFile(data_path, O_RDWR | O_CREAT));
  LIBSHARD_ASSIGN_OR_RETURN(state, OpenCacheFile(state_path, O_RDWR | O_CREAT));
  LIBSHARD_ASSIGN_OR_RETURN(RangeLock lock,
                            RangeLock::Acquire(state.fd(), 0, kStateHeader, true, state_path));
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t have, state.Size());
  std::byte header[kStateHeader] = {};
  const uint64_t etag_hash = format::Xxh3(etag.data(), etag.size());
  std::optional<StateHeader> h;
  if (have >= kStateHeader) {
    LIBSHARD_RETURN_IF_ERROR(state.PReadExact(header, kStateHeader, 0));
    // A newer library's file (its own magic, a version above ours) is left alone.
    if (std::memcmp(header, kStateMagic, 8) == 0 && format::GetU32(header + 8) > kStateVersion)
      return Status::Corruption(state_path + ": not a valid cache state file for " + url +
                                " (version " + std::to_string(format::GetU32(header + 8)) +
                                ", docs/CACHE.md §2: written by a newer libshard); delete the "
                                "dataset's cache directory " +
                                std::filesystem::path(state_path).parent_path().string());
    h = ParseStateHeader({header, kStateHeader}, have);
    if (h && (h->size != size || h->etag_hash != etag_hash)) h.reset();
    if (!h)
      CacheWarning(state_path + ": a damaged cache state file (docs/CACHE.md §2); made anew, "
                   "the blocks of " + url + " are fetched again");
  }
  if (!h) {
    // New, or damaged: every block absent (the data file's bytes stay, never read as data).
    StateHeader fresh;
    fresh.block_size = wanted_block;
    fresh.size = size;
    fresh.blocks = (size + wanted_block - 1) / wanted_block;
    fresh.etag_hash = etag_hash;
    EncodeStateHeader(fresh, header);
    LIBSHARD_RETURN_IF_ERROR(data.Truncate(size));
    LIBSHARD_RETURN_IF_ERROR(state.Truncate(0));
    LIBSHARD_RETURN_IF_ERROR(state.Truncate(kStateHeader + fresh.blocks * kEntryBytes));
    LIBSHARD_RETURN_IF_ERROR(state.PWriteAll(header, kStateHeader, 0));
    h = fresh;
  } else {
    LIBSHARD_ASSIGN_OR_RETURN(uint64_t data_size, data.Size());
    if (data_size != size) {
      // The data file was replaced (a symlink removed, say) or cut: nothing in it is present.
      CacheWarning(data_path + ": the cached data file was not the one its state file records; "
                   "the blocks of " + url + " are fetched again");
      LIBSHARD_RETURN_IF_ERROR(data.Truncate(size));
      LIBSHARD_RETURN_IF_ERROR(state.Truncate(kStateHeader));
      LIBSHARD_RETURN_IF_ERROR(state.Truncate(kStateHeader + h->blocks * kEntryBytes));
    }
    if (h->version == 1) {
      // Version 1 to 2 in place, under the header lock: the entries are the same; a version 1
      // library (which reads without pins) then refuses the file instead of reading a block
      // another process may evict.
      std::byte v2[4];
      format::PutU32(v2, kStateVersion);
      LIBSHARD_RETURN_IF_ERROR(state.PWriteAll(v2, 4, 8));
      LIBSHARD_RETURN_IF_ERROR(state.Sync());
    }
  }
  block_size = h->block_size;
  blocks = h->blocks;
  struct stat st {};
  if (fstat(data.fd(), &st) != 0) return Errno(data_path + ": fstat");
  dev = st.st_dev;
  ino = st.st_ino;
  present = std::make_unique<std::atomic<uint8_t>[]>(blocks);
  return Status::OK();
}

void CachedShard::DropCachedCopy(uint64_t b) const {
  // The kernel drops only the folios wholly inside the advised range, and never a partial last
  // page. A file's page cache holds folios of up to a PMD (2 MiB with 4 KiB pages): a pwrite or
  // the readahead of the header read at open may leave one that spans blocks. So the advice
  // covers the block widened to that size, and runs to the end of the file for the last block.
  // Clean pages of neighbouring blocks go with it: no reader uses them either. A neighbour
  // being written is dirty, which the kernel never drops; its own advice follows its fdatasync.
  const long page_size = sysconf(_SC_PAGESIZE);
  const uint64_t page = page_size > 0 ? static_cast<uint64_t>(page_size) : 4096;
  const uint64_t folio_max = page * (page / 8);  // a PMD: a page of 8-byte page-table entries
  const uint64_t start = b * block_size;
  const uint64_t lo = start / folio_max * folio_max;
  const uint64_t hi = (start + BlockLength(b) + folio_max - 1) / folio_max * folio_max;
  const off_t len = hi >= size ? 0 : static_cast<off_t>(hi - lo);  // 0: to the end of the file
  (void)posix_fadvise(data.fd(), static_cast<off_t>(lo), len, POSIX_FADV_DONTNEED);
}

Result<RangeLock> PinEntry(int pin_fd, const io::File& state, uint64_t b) {
  const uint64_t entry = kStateHeader + b * kEntryBytes;
  // Waits while a process holds the entry exclusively: it is fetching or evicting the block,
  // which takes one download at most and never waits for a reader, so this cannot deadlock.
  LIBSHARD_ASSIGN_OR_RETURN(RangeLock lock,
                            RangeLock::Acquire(pin_fd, entry, kEntryBytes, false, state.path()));
  uint64_t word = 0;
  LIBSHARD_RETURN_IF_ERROR(state.PReadExact(&word, 8, entry));
  if (word != kPresent) lock.Release();
  return lock;
}

Status InvalidateEntry(CachedShard& s, uint64_t b) {
  const uint64_t entry = kStateHeader + b * kEntryBytes;
  LIBSHARD_ASSIGN_OR_RETURN(RangeLock lock, RangeLock::Acquire(s.state.fd(), entry, kEntryBytes,
                                                               true, s.state_path));
  const uint64_t zero = 0;
  LIBSHARD_RETURN_IF_ERROR(s.state.PWriteAll(&zero, 8, entry));
  if (fdatasync(s.state.fd()) != 0) return Errno(s.state_path + ": fdatasync");
  s.present[b].store(0, std::memory_order_release);
  return Status::OK();
}

Result<uint64_t> EvictEntry(int evict_fd, io::File& state, io::File& data, uint64_t b,
                            uint64_t block_size, uint64_t size) {
  const uint64_t entry = kStateHeader + b * kEntryBytes;
  if (b * block_size >= size) return uint64_t{0};
  LIBSHARD_ASSIGN_OR_RETURN(RangeLock lock,
                            RangeLock::Try(evict_fd, entry, kEntryBytes, true, state.path()));
  if (!lock.held()) return uint64_t{0};  // pinned by a reader, or being fetched or evicted
  uint64_t word = 0;
  LIBSHARD_RETURN_IF_ERROR(state.PReadExact(&word, 8, entry));
  if (word != kPresent) return uint64_t{0};
  // Absent first, durably; only then the bytes go. Killed in between: an absent block whose
  // bytes are still there, which nobody reads (CACHE.md §3).
  const uint64_t zero = 0;
  LIBSHARD_RETURN_IF_ERROR(state.PWriteAll(&zero, 8, entry));
  if (fdatasync(state.fd()) != 0) return Errno(state.path() + ": fdatasync");
  uint64_t start = b * block_size;
  const uint64_t end = std::min(size, start + block_size);
  if (b == 0) start = std::min(end, kKeptHead);
  if (end > start) LIBSHARD_RETURN_IF_ERROR(data.PunchHole(start, end - start));
  return end > start ? Allocated(end - start) : uint64_t{0};
}

}  // namespace libshard::remote
