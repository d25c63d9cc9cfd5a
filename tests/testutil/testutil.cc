#include "testutil/testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index.h"
#include "format/legacy/index_v1.h"
#include "format/manifest.h"
#include "libshard/dataset.h"
#include "testutil/index_v1_encoder.h"
#include "writer/commit.h"

namespace libshard::testing {

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/libshard_test_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::TempDir(const std::filesystem::path& base) {
  std::string tmpl = (base / "libshard_test_XXXXXX").string();
  if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

namespace {

std::string ErrnoText(int e) { return std::string(strerror(e)); }

// True when `dir` refuses O_DIRECT: a file created there cannot be opened with O_DIRECT and the
// error is EINVAL or EOPNOTSUPP (what io::OpenForReading treats as "refused, fall back").
// Otherwise false with `*why_not` saying what happened. The probe file is removed.
bool RefusesDirect(const std::filesystem::path& dir, std::string* why_not) {
  const std::filesystem::path probe = dir / ".libshard_odirect_probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why_not = "cannot create " + probe.string() + ": " + ErrnoText(errno);
    return false;
  }
  const std::string block(4096, 'x');  // one aligned block, so a direct open has data to refer to
  const bool written =
      ::write(fd, block.data(), block.size()) == static_cast<ssize_t>(block.size());
  const int write_errno = errno;
  ::close(fd);
  if (!written) {
    ::unlink(probe.c_str());
    *why_not = "cannot write " + probe.string() + ": " + ErrnoText(write_errno);
    return false;
  }
  const int dfd = ::open(probe.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  const int open_errno = errno;
  if (dfd >= 0) ::close(dfd);
  ::unlink(probe.c_str());
  if (dfd >= 0) {
    *why_not = dir.string() + " accepts O_DIRECT";
    return false;
  }
  if (open_errno == EINVAL || open_errno == EOPNOTSUPP) return true;
  *why_not = "open(O_DIRECT) in " + dir.string() + " failed with an unrelated error: " +
             ErrnoText(open_errno);
  return false;
}

}  // namespace

// Paths with characters the kernel escapes in /proc/self/mounts (spaces, ...) are not found;
// the test directories have none.
bool IsMountPoint(const std::filesystem::path& dir) {
  std::ifstream in("/proc/self/mounts");
  std::string device, mount_point, rest;
  while (in >> device >> mount_point && std::getline(in, rest)) {
    if (mount_point == dir.string()) return true;
  }
  return false;
}

NoDirectIoDir::NoDirectIoDir() {
  // 1. tmpfs: refuses O_DIRECT before Linux 6.6; needs no privileges and no mount.
  std::string shm_why;
  auto shm = std::make_unique<TempDir>(std::filesystem::path("/dev/shm"));
  if (shm->path().empty()) {
    shm_why = "cannot create a directory under /dev/shm";
  } else if (RefusesDirect(shm->path(), &shm_why)) {
    path_ = shm->path();
    description_ = "tmpfs directory " + path_.string();
    shm_ = std::move(shm);
    return;
  } else {
    shm_why += " (tmpfs does since Linux 6.6)";
  }
  shm.reset();
  // 2. ramfs, mounted by us.
  const std::string ramfs_why = TryRamfs();
  if (ramfs_why.empty()) return;
  why_unavailable_ = "no directory on a file system that refuses O_DIRECT: " + shm_why + "; " +
                     ramfs_why;
}

std::string NoDirectIoDir::TryRamfs() {
  if (::geteuid() != 0) return "not root, so no ramfs can be mounted";
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/libshard_ramfs_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return "mkdtemp " + tmpl + ": " + ErrnoText(errno);
  mount_point_ = tmpl;
  // The reaper must exist before the mount does, so that no moment exists in which this
  // process could die and leave the mount behind.
  if (std::string why = StartReaper(); !why.empty()) return why;
  if (::mount("ramfs", mount_point_.c_str(), "ramfs", 0, nullptr) != 0) {
    return "mount -t ramfs on " + mount_point_.string() + " failed: " + ErrnoText(errno) +
           " (mounting is not permitted in this container?)";
  }
  mounted_ = true;
  std::string why_not;
  if (!RefusesDirect(mount_point_, &why_not)) return "ramfs: " + why_not;
  path_ = mount_point_;
  description_ = "ramfs mounted at " + path_.string();
  return "";
}

std::string NoDirectIoDir::StartReaper() {
  int fds[2];
  // O_CLOEXEC: programs the test execs must not hold the write end, or the reaper would wait
  // for them instead of for us.
  if (::pipe2(fds, O_CLOEXEC) != 0) return "pipe2: " + ErrnoText(errno);
  const char* dir = mount_point_.c_str();  // stays valid in the children (copied memory)
  const pid_t child = ::fork();
  if (child < 0) {
    const int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return "fork: " + ErrnoText(e);
  }
  if (child == 0) {
    // The parent may be multithreaded: only async-signal-safe calls from here on.
    // Double fork: the reaper is re-parented to init, so a tree kill of the test process
    // (ctest's timeout walks the children) cannot take the reaper with it.
    const pid_t reaper = ::fork();
    if (reaper != 0) ::_exit(reaper < 0 ? 1 : 0);
    ::setsid();  // out of the test's process group and terminal: Ctrl-C must not stop cleanup
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGTERM, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    ::signal(SIGPIPE, SIG_IGN);
    ::dup2(fds[0], 0);
    const int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
    }
    // Closes everything else, among it the pipe's write end: once every copy of the write end
    // is gone (the parent exited or closed it), read() sees EOF.
    ::close_range(3, ~0U, 0);
    char done = 0;
    ssize_t n;
    do {
      n = ::read(0, &done, 1);
    } while (n < 0 && errno == EINTR);
    if (n == 1) ::_exit(0);  // the destructor cleaned up
    ::umount2(dir, MNT_DETACH);
    ::rmdir(dir);
    ::_exit(0);
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ::close(fds[1]);
    return "fork of the cleanup process failed";
  }
  reaper_fd_ = fds[1];
  return "";
}

void NoDirectIoDir::DismissReaper() {
  if (reaper_fd_ < 0) return;
  const char done = 'x';
  (void)!::write(reaper_fd_, &done, 1);
  ::close(reaper_fd_);
  reaper_fd_ = -1;
}

NoDirectIoDir::~NoDirectIoDir() {
  std::error_code ec;
  if (mounted_) {
    // Files first: a detached mount lives on while anything in it is open, and its files would
    // keep their memory until then.
    for (const auto& entry : std::filesystem::directory_iterator(mount_point_, ec)) {
      std::filesystem::remove_all(entry.path(), ec);
    }
    if (::umount2(mount_point_.c_str(), MNT_DETACH) == 0) {
      mounted_ = false;
    } else {
      fprintf(stderr, "NoDirectIoDir: umount2 %s: %s; the cleanup process retries at exit\n",
              mount_point_.c_str(), strerror(errno));
    }
  }
  if (mounted_) {
    // Leave the reaper armed: closing without the "done" byte makes it retry now.
    ::close(reaper_fd_);
    reaper_fd_ = -1;
    return;
  }
  if (!mount_point_.empty()) std::filesystem::remove(mount_point_, ec);
  DismissReaper();
  // shm_ removes its own directory.
}

void WriteBytes(const std::filesystem::path& file, uint64_t offset, const void* data, size_t n) {
  int fd = ::open(file.c_str(), O_WRONLY);
  if (fd < 0) throw std::runtime_error("open " + file.string());
  if (::pwrite(fd, data, n, static_cast<off_t>(offset)) != static_cast<ssize_t>(n)) {
    ::close(fd);
    throw std::runtime_error("pwrite " + file.string());
  }
  ::close(fd);
}

void FlipByte(const std::filesystem::path& file, uint64_t offset, uint8_t mask) {
  int fd = ::open(file.c_str(), O_RDWR);
  if (fd < 0) throw std::runtime_error("open " + file.string());
  uint8_t b = 0;
  if (::pread(fd, &b, 1, static_cast<off_t>(offset)) != 1) {
    ::close(fd);
    throw std::runtime_error("pread " + file.string());
  }
  b ^= mask;
  if (::pwrite(fd, &b, 1, static_cast<off_t>(offset)) != 1) {
    ::close(fd);
    throw std::runtime_error("pwrite " + file.string());
  }
  ::close(fd);
}

void TruncateFile(const std::filesystem::path& file, uint64_t new_size) {
  std::filesystem::resize_file(file, new_size);
}

std::string ReadFileToString(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteStringToFile(const std::filesystem::path& file, const std::string& data) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

namespace {

// The dataset in `dir` with its index re-encoded by `encode` (samples as a writer holds them),
// under the name `index.lsi`, with version `version` in the manifest.
template <typename Encode>
void RewriteIndex(const std::filesystem::path& dir, uint32_t version, const char* what,
                  Encode encode) {
  auto ds = Dataset::Open(dir.string());
  if (!ds.ok()) throw std::runtime_error(std::string(what) + ": " + ds.status().ToString());
  std::vector<format::IndexShard> shards;
  for (const ShardInfo& s : (*ds)->shards())
    shards.push_back({std::filesystem::path(s.path).filename().string(), s.size, s.samples, s.uid});
  std::vector<format::IndexSample> samples;
  for (uint64_t i = 0; i < (*ds)->size(); ++i) {
    auto e = internal::SampleEntryFromDataset(**ds, i);
    if (!e.ok()) throw std::runtime_error(std::string(what) + ": " + e.status().ToString());
    samples.push_back(std::move(*e));
  }
  std::vector<format::FieldCodec> codecs;
  for (uint8_t c : (*ds)->field_codecs()) codecs.push_back(format::FieldCodec{c, {}});
  const std::string index = encode((*ds)->schema(), shards, samples, codecs);
  const std::filesystem::path mp = dir / format::kManifestName;
  auto m = format::ParseManifest(ReadFileToString(mp), mp.string());
  if (!m.ok()) throw std::runtime_error(std::string(what) + ": " + m.status().ToString());
  ds->reset();
  std::filesystem::remove(dir / m->index_file);
  m->index_version = version;
  m->index_file = "index.lsi";
  m->index_size = index.size();
  m->index_xxh3 = format::GetU64(format::AsBytes(index) + format::kIndexChecksumOffset);
  WriteStringToFile(dir / "index.lsi", index);
  WriteStringToFile(mp, format::EncodeManifest(*m));
}

}  // namespace

void RewriteIndexAsV3(const std::filesystem::path& dir) {
  RewriteIndex(dir, format::kIndexVersion3, "RewriteIndexAsV3",
               [](const Schema& schema, const std::vector<format::IndexShard>& shards,
                  std::vector<format::IndexSample>& samples,
                  const std::vector<format::FieldCodec>& codecs) {
                 for (format::IndexSample& s : samples) s.block_table.reset();
                 return format::EncodeIndex(schema, shards, samples, codecs);
               });
}

void RewriteIndexAsV1(const std::filesystem::path& dir) {
  auto ds = Dataset::Open(dir.string());
  if (!ds.ok()) throw std::runtime_error("RewriteIndexAsV1: " + ds.status().ToString());
  std::vector<format::IndexShard> shards;
  for (const ShardInfo& s : (*ds)->shards())
    shards.push_back({std::filesystem::path(s.path).filename().string(), s.size, s.samples, s.uid});
  std::vector<format::IndexSample> samples;
  for (uint64_t i = 0; i < (*ds)->size(); ++i) {
    auto e = internal::SampleEntryFromDataset(**ds, i);
    if (!e.ok()) throw std::runtime_error("RewriteIndexAsV1: " + e.status().ToString());
    samples.push_back(std::move(*e));
  }
  const std::string index = EncodeIndexV1((*ds)->schema(), shards, samples);
  const std::filesystem::path mp = dir / format::kManifestName;
  auto m = format::ParseManifest(ReadFileToString(mp), mp.string());
  if (!m.ok()) throw std::runtime_error("RewriteIndexAsV1: " + m.status().ToString());
  std::filesystem::remove(dir / m->index_file);
  m->index_version = 1;
  m->index_file = "index.lsi";
  m->index_size = index.size();
  m->index_xxh3 = format::GetU64(format::AsBytes(index) + format::kIndexChecksumOffset);
  WriteStringToFile(dir / "index.lsi", index);
  WriteStringToFile(mp, format::EncodeManifest(*m));
}

}  // namespace libshard::testing
