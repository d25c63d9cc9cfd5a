// The node-local cache's files (cache_files.h, docs/CACHE.md).
#include "remote/cache_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "format/bytes.h"
#include "format/checksum.h"
#include "io/filesystem.h"

namespace libshard::remote {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

uint64_t EnvBytes(const char* name, uint64_t fallback) {
  const std::string v = Env(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  return (end == v.c_str() || *end != '\0') ? fallback : n;
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

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::IoError(dir + ": cannot create the cache directory: " + ec.message() +
                               " (set cache= / LIBSHARD_CACHE_DIR to a writable node-local disk)",
                           ec.value());
  return Status::OK();
}

// Fetches `key` whole into `path` unless there (tmp file + rename, so a reader never sees part).
Status FetchWhole(io::S3Client* client, const io::S3Url& object, const io::ObjectInfo& info,
                  uint64_t max_size, const std::string& path) {
  if (internal::PathExists(path)) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && uint64_t(st.st_size) == info.size) return Status::OK();
  }
  if (info.size > max_size)
    return Status::Corruption("s3://" + object.bucket + "/" + object.key + ": " +
                              std::to_string(info.size) + " bytes, more than the " +
                              std::to_string(max_size) + " such a file may have");
  std::shared_ptr<std::byte[]> buf = internal::AllocateAligned(std::max<uint64_t>(info.size, 1));
  if (buf == nullptr) return Status::ResourceExhausted(path + ": cannot allocate");
  LIBSHARD_RETURN_IF_ERROR(client->GetRange(object, 0, info.size, info.etag, buf.get()));
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  {
    LIBSHARD_ASSIGN_OR_RETURN(io::File f,
                              io::File::Open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC));
    LIBSHARD_RETURN_IF_ERROR(f.PWriteAll(buf.get(), info.size, 0));
    LIBSHARD_RETURN_IF_ERROR(f.Sync());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno(path + ": rename");
  return Status::OK();
}

Status LinkInto(const std::string& target, const std::string& link) {
  if (::link(target.c_str(), link.c_str()) != 0 && errno != EEXIST)
    return Errno(link + ": link to " + target);
  return Status::OK();
}

Status CachedShard::Init(uint64_t wanted_block) {
  LIBSHARD_ASSIGN_OR_RETURN(data, io::File::Open(data_path, O_RDWR | O_CREAT | O_CLOEXEC));
  LIBSHARD_ASSIGN_OR_RETURN(state, io::File::Open(state_path, O_RDWR | O_CREAT | O_CLOEXEC));
  LIBSHARD_ASSIGN_OR_RETURN(RangeLock lock,
                            RangeLock::Acquire(state.fd(), 0, kStateHeader, true, state_path));
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t have, state.Size());
  std::byte header[kStateHeader] = {};
  if (have < kStateHeader) {
    block_size = wanted_block;
    blocks = (size + block_size - 1) / block_size;
    std::memcpy(header, kStateMagic, 8);
    format::PutU32(header + 8, kStateVersion);
    format::PutU32(header + 12, kStateHeader);
    format::PutU64(header + 16, block_size);
    format::PutU64(header + 24, size);
    format::PutU64(header + 32, blocks);
    format::PutU64(header + 40, format::Xxh3(etag.data(), etag.size()));
    LIBSHARD_RETURN_IF_ERROR(data.Truncate(size));
    LIBSHARD_RETURN_IF_ERROR(state.Truncate(kStateHeader + blocks * kEntryBytes));
    LIBSHARD_RETURN_IF_ERROR(state.PWriteAll(header, kStateHeader, 0));
  } else {
    LIBSHARD_RETURN_IF_ERROR(state.PReadExact(header, kStateHeader, 0));
    block_size = format::GetU64(header + 16);
    blocks = format::GetU64(header + 32);
    LIBSHARD_ASSIGN_OR_RETURN(uint64_t data_size, data.Size());
    const uint32_t version = format::GetU32(header + 8);
    if (std::memcmp(header, kStateMagic, 8) != 0 || (version != 1 && version != kStateVersion) ||
        block_size == 0 || block_size % 4096 != 0 || block_size > (uint64_t{1} << 32) ||
        format::GetU64(header + 24) != size ||
        blocks != (size + block_size - 1) / block_size ||
        format::GetU64(header + 40) != format::Xxh3(etag.data(), etag.size()) ||
        have != kStateHeader + blocks * kEntryBytes || data_size != size)
      return Status::Corruption(state_path + ": not a valid cache state file for " + url +
                                " (docs/CACHE.md); delete the dataset's cache directory " +
                                std::filesystem::path(state_path).parent_path().string());
    if (version == 1) {
      // Version 1 to 2 in place, under the header lock: the entries are the same; a version 1
      // library (which reads without pins) then refuses the file instead of reading a block
      // another process may evict.
      std::byte v2[4];
      format::PutU32(v2, kStateVersion);
      LIBSHARD_RETURN_IF_ERROR(state.PWriteAll(v2, 4, 8));
      LIBSHARD_RETURN_IF_ERROR(state.Sync());
    }
  }
  struct stat st {};
  if (fstat(data.fd(), &st) != 0) return Errno(data_path + ": fstat");
  dev = st.st_dev;
  ino = st.st_ino;
  present = std::make_unique<std::atomic<uint8_t>[]>(blocks);
  return Status::OK();
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
