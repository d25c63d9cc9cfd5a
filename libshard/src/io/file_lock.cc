#include "io/file_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

namespace libshard::io {

ProcessIdentity ThisProcess() {
  ProcessIdentity id;
  id.pid = static_cast<int>(::getpid());
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0 && host[0] != '\0') {
    id.host = host;
  } else {
    id.host = "?";
  }
  return id;
}

Result<FileLock> FileLock::TryAcquire(const std::string& path) {
  Result<File> opened = File::Open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0644);
  if (!opened.ok()) {
    if (opened.status().sys_errno() == ELOOP)
      return Status(StatusCode::kInvalidArgument,
                    path + ": is a symbolic link; a lock file must be a plain file: remove the "
                           "link and try again",
                    ELOOP);
    return opened.status();
  }
  int rc;
  do {
    rc = ::flock(opened->fd(), LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int e = errno;
    if (e == EWOULDBLOCK)
      return Status(StatusCode::kAlreadyExists, path + ": locked by another writer", e);
    return Status::FromErrno(e, "flock " + path);
  }
  return FileLock(std::move(opened).value());
}

bool FileLock::IsBusy(const Status& st) {
  return st.code() == StatusCode::kAlreadyExists && st.sys_errno() == EWOULDBLOCK;
}

Status FileLock::WriteNote(std::string_view note) {
  if (!file_.valid()) return Status::InvalidArgument("FileLock::WriteNote without a lock");
  LIBSHARD_RETURN_IF_ERROR(file_.Truncate(0));
  return file_.PWriteAll(note.data(), note.size(), 0);
}

std::string FileLock::ReadNote(const std::string& path, uint64_t max_bytes) {
  Result<File> f = File::Open(path, O_RDONLY | O_NOFOLLOW);
  if (!f.ok()) return {};
  std::string note(max_bytes, '\0');
  Result<uint64_t> n = f->PReadFull(note.data(), max_bytes, 0);
  if (!n.ok()) return {};
  note.resize(*n);
  return note;
}

bool FileLock::Holds(const std::string& path) const {
  if (!file_.valid()) return false;
  struct stat mine {}, theirs {};
  if (::fstat(file_.fd(), &mine) != 0 || ::lstat(path.c_str(), &theirs) != 0) return false;
  return mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
}

void FileLock::Release() { file_.Close().IgnoreError(); }

}  // namespace libshard::io
