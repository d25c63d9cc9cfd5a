// FileLock: the move-only owner of an exclusive flock(2) on a lock file (system calls only; no
// libshard format knowledge). The lock belongs to the open file description, so it is released
// when the owner closes it, and by the kernel when the process dies (even by SIGKILL): a crashed
// writer never leaves a stale lock behind. Two FileLocks on one path conflict even inside one
// process.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "io/file.h"
#include "libshard/status.h"

namespace libshard::io {

// Who this process is, for a lock holder's note: getpid(2) and gethostname(2).
struct ProcessIdentity {
  int pid = 0;
  std::string host;  // "?" when unknown
};
ProcessIdentity ThisProcess();

class FileLock {
 public:
  FileLock() = default;
  FileLock(FileLock&&) noexcept = default;
  FileLock& operator=(FileLock&&) noexcept = default;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() = default;  // closing the descriptor releases the lock

  // Opens `path` (created 0644 when missing; O_CLOEXEC so a child never inherits the lock,
  // O_NOFOLLOW so a planted symlink is refused) and takes flock(LOCK_EX | LOCK_NB). When another
  // open file description holds the lock the call fails at once, never waits: the Status has
  // code AlreadyExists and sys_errno() EWOULDBLOCK (see IsBusy). Other failures name the path.
  static Result<FileLock> TryAcquire(const std::string& path);
  // True for the Status TryAcquire returns when the lock is held elsewhere.
  static bool IsBusy(const Status& st);

  // Replaces the lock file's content with `note` (who holds it, for the next one's message).
  [[nodiscard]] Status WriteNote(std::string_view note);
  // Up to `max_bytes` of the content of the lock file at `path`; empty when it cannot be read.
  // Never takes the lock.
  static std::string ReadNote(const std::string& path, uint64_t max_bytes = 512);

  // True when `path` names the file this lock holds (same device and inode).
  bool Holds(const std::string& path) const;

  bool valid() const { return file_.valid(); }
  const std::string& path() const { return file_.path(); }
  // Releases the lock (closes the descriptor). Idempotent.
  void Release();

 private:
  explicit FileLock(File file) : file_(std::move(file)) {}
  File file_;
};

}  // namespace libshard::io
