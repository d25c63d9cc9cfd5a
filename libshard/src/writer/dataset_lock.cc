// DatasetLock (libshard/dataset_lock.h): the lock file DIR/.libshard.lock of FORMAT.md §2.1.
#include "libshard/dataset_lock.h"

#include <string_view>

#include "format/manifest.h"
#include "io/file_lock.h"
#include "io/filesystem.h"
#include "storage/storage_driver.h"

namespace libshard {
namespace {

// The value of `key=` in the holder's note ("pid=12\nhost=h\nsince=T\n"), or "?".
std::string NoteValue(std::string_view note, std::string_view key) {
  size_t pos = 0;
  while (pos < note.size()) {
    size_t end = note.find('\n', pos);
    if (end == std::string_view::npos) end = note.size();
    std::string_view line = note.substr(pos, end - pos);
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == '=') {
      std::string value(line.substr(key.size() + 1));
      for (char& c : value)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';  // keep one line
      return value;
    }
    pos = end + 1;
  }
  return "?";
}

}  // namespace

struct DatasetLock::Impl {
  std::string dir;
  std::string lock_path;
  io::FileLock lock;
};

DatasetLock::DatasetLock(Key, std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DatasetLock::~DatasetLock() = default;

const std::string& DatasetLock::dir() const { return impl_->dir; }

bool DatasetLock::Covers(const std::string& dir) const {
  return impl_->lock.Holds(internal::JoinPath(dir, kFileName));
}

Result<std::shared_ptr<const DatasetLock>> DatasetLock::Acquire(const std::string& location,
                                                                 bool create_directory,
                                                                 Caller caller) {
  if (location.empty()) return Status::InvalidArgument("DatasetLock: empty directory name");
  // Every writer (pack, merge, upgrade, Writer) locks its output first: the directory its
  // location's writes work in (an s3:// output's staging directory), never a local "s3:".
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<storage::StorageDriver> driver,
                            storage::OpenStorage(location));
  const std::string& dir = driver->info().work_dir;
  if (create_directory) {
    LIBSHARD_RETURN_IF_ERROR(internal::MakeDirectories(dir));
  } else if (!internal::PathExists(dir)) {
    return Status::NotFound(dir + ": no such directory");
  }
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->lock_path = internal::JoinPath(dir, kFileName);
  Result<io::FileLock> lock = io::FileLock::TryAcquire(impl->lock_path);
  if (!lock.ok()) {
    if (!io::FileLock::IsBusy(lock.status())) return lock.status();
    // The holder writes its note right after locking; an empty note means it has not yet.
    const std::string note = io::FileLock::ReadNote(impl->lock_path);
    return Status(StatusCode::kAlreadyExists,
                  dir + " is being written by another process (pid " + NoteValue(note, "pid") +
                      ", host " + NoteValue(note, "host") + ", since " +
                      NoteValue(note, "since") +
                      "); wait for it to finish, or stop it and continue its work with " +
                      std::string(ResumeAdvice(caller)) +
                      "; only one writer at a time may write a dataset (lock file " +
                      impl->lock_path + ")",
                  lock.status().sys_errno());
  }
  impl->lock = std::move(lock).value();
  // Best effort: the note only serves the next writer's message, so a failure to write it (a
  // full disk) must not stop this writer, which fails on its own first real write anyway.
  const io::ProcessIdentity me = io::ThisProcess();
  impl->lock
      .WriteNote("pid=" + std::to_string(me.pid) + "\nhost=" + me.host +
                 "\nsince=" + format::UtcTimestamp() + "\n")
      .IgnoreError();
  return std::make_shared<const DatasetLock>(Key(), std::move(impl));
}

}  // namespace libshard
