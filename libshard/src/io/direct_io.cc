#include "io/direct_io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <utility>

namespace libshard::io {
namespace {

constexpr uint32_t kDefaultDirectAlign = 4096;

// The O_DIRECT alignment of an open fd from statx(STATX_DIOALIGN) when available.
void ProbeDirectAlignment(int fd, OpenedFile* opened) {
  opened->memory_align = kDefaultDirectAlign;
  opened->offset_align = kDefaultDirectAlign;
#if defined(STATX_DIOALIGN)
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) != 0 && stx.stx_dio_mem_align != 0 &&
      stx.stx_dio_offset_align != 0) {
    opened->memory_align = stx.stx_dio_mem_align;
    opened->offset_align = stx.stx_dio_offset_align;
  }
#endif
}

bool RefusesDirect(int sys_errno) { return sys_errno == EINVAL || sys_errno == EOPNOTSUPP; }

// Opens with `flags` | O_DIRECT unless `mode` is kBuffered, then without it when the file system
// refuses O_DIRECT (kAuto). `what` names the operation in fallback reasons ("reads", "writes").
Result<OpenedFile> OpenWithPolicy(const std::string& path, int flags, IoMode mode,
                                  uint32_t max_align, const char* what) {
  OpenedFile opened;
  if (mode == IoMode::kBuffered) {
    opened.fallback = std::string("buffered ") + what + " requested";
    LIBSHARD_ASSIGN_OR_RETURN(opened.file, File::Open(path, flags));
    return opened;
  }
  Result<File> direct = File::Open(path, flags | O_DIRECT);
  if (direct.ok()) {
    opened.file = std::move(direct).value();
    ProbeDirectAlignment(opened.file.fd(), &opened);
    if (opened.offset_align <= max_align && opened.memory_align <= max_align) {
      opened.direct = true;
      return opened;
    }
    // The data is aligned to `max_align` only: a device that needs more is used buffered.
    const std::string needs = path + ": O_DIRECT needs " +
                              std::to_string(std::max(opened.offset_align, opened.memory_align)) +
                              "-byte alignment, more than the " + std::to_string(max_align) +
                              " bytes the " + what + " are aligned to";
    if (mode == IoMode::kDirect) return Status::Unsupported(needs);
    LIBSHARD_RETURN_IF_ERROR(opened.file.Close());
    opened = OpenedFile{};
    opened.fallback = needs + "; using buffered " + what;
  } else {
    const int e = direct.status().sys_errno();
    if (!RefusesDirect(e)) return direct.status();
    if (mode == IoMode::kDirect) {
      return Status(StatusCode::kUnsupported,
                    path + ": O_DIRECT is required but the file system refuses it (" +
                        direct.status().message() + ")",
                    e);
    }
    opened.fallback = path + ": the file system refuses O_DIRECT (" + direct.status().message() +
                      "); using buffered " + what;
  }
  // O_CREAT | O_TRUNC were applied by the refused open only if it got that far; repeat them.
  LIBSHARD_ASSIGN_OR_RETURN(opened.file, File::Open(path, flags));
  return opened;
}

}  // namespace

Result<OpenedFile> OpenForReading(const std::string& path, IoMode mode, uint32_t max_align) {
  return OpenWithPolicy(path, O_RDONLY, mode, max_align, "reads");
}

Result<OpenedFile> OpenForWriting(const std::string& path, IoMode mode, Disposition disposition) {
  const int flags = O_RDWR | (disposition == Disposition::kCreateTruncate ? O_CREAT | O_TRUNC : 0);
  return OpenWithPolicy(path, flags, mode, kDefaultDirectAlign, "writes");
}

Status WriteWithFallback(OpenedFile* file, const void* src, uint64_t length, uint64_t offset) {
  Status st = file->file.PWriteAll(src, length, offset);
  if (st.ok() || !file->direct || st.sys_errno() != EINVAL) return st;
  // The file system accepted O_DIRECT at open but refuses the write: go on buffered.
  const std::string path = file->file.path();
  LIBSHARD_RETURN_IF_ERROR(file->file.Close());
  LIBSHARD_ASSIGN_OR_RETURN(file->file, File::Open(path, O_RDWR));
  file->direct = false;
  file->fallback = path + ": the file system refuses O_DIRECT writes (" + st.message() +
                   "); using buffered writes";
  return file->file.PWriteAll(src, length, offset);
}

}  // namespace libshard::io
