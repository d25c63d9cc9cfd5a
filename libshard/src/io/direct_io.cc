#include "io/direct_io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "util/env_knobs.h"

// Kernel headers older than Linux 6.1 lack STATX_DIOALIGN (and struct statx its fields): the
// request is then made by number and the two fields read at their fixed ABI offsets.
#ifndef STATX_DIOALIGN
#define STATX_DIOALIGN 0x00002000U
#endif

namespace libshard::io {
namespace {

constexpr uint32_t kDefaultDirectAlign = 4096;
// struct statx's ABI (include/uapi/linux/stat.h): stx_mask at 0, stx_dio_mem_align at 152,
// stx_dio_offset_align at 156, 256 bytes in all.
constexpr size_t kStatxSize = 256;
constexpr size_t kStatxDioMemAlign = 152;
constexpr size_t kStatxDioOffsetAlign = 156;

// The O_DIRECT alignment of an open fd from statx(STATX_DIOALIGN) where the kernel gives it
// (Linux 6.1+; 0 fields mean the file does not support O_DIRECT or the kernel did not say), else
// 4096.
void ProbeDirectAlignment(int fd, OpenedFile* opened) {
  opened->memory_align = kDefaultDirectAlign;
  opened->offset_align = kDefaultDirectAlign;
#ifdef SYS_statx
  alignas(8) unsigned char buf[kStatxSize] = {};
  if (::syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, buf) != 0) return;
  uint32_t mask = 0, mem = 0, off = 0;
  std::memcpy(&mask, buf, sizeof(mask));
  std::memcpy(&mem, buf + kStatxDioMemAlign, sizeof(mem));
  std::memcpy(&off, buf + kStatxDioOffsetAlign, sizeof(off));
  if ((mask & STATX_DIOALIGN) != 0 && mem != 0 && off != 0) {
    opened->memory_align = mem;
    opened->offset_align = off;
    opened->align_source = "statx";
  }
#endif
}

// Network and user-space file systems by statfs f_type: where O_DIRECT may be accepted at open
// and refused (EINVAL) at the first read, so one read is tried at open (local disks never pay).
const char* SharedFileSystemName(int fd) {
  struct statfs sfs {};
  if (::fstatfs(fd, &sfs) != 0) return nullptr;
  switch (static_cast<uint64_t>(sfs.f_type)) {
    case 0x6969: return "nfs";
    case 0x0BD00BD0: return "lustre";
    case 0x65735546: return "fuse";
    case 0xFF534D42: return "cifs";
    case 0xFE534D42: return "smb2";
    case 0x00C36400: return "ceph";
    case 0x01021997: return "9p";
    case 0x47504653: return "gpfs";
    case 0x19830326: return "beegfs";
    case 0x5346414F: return "afs";
    case 0x6B414653: return "afs";
    default: return nullptr;
  }
}

// LIBSHARD_IO_REFUSE_DIRECT=open|read: behave as a file system that refuses O_DIRECT at open
// (EINVAL) or at the first read, to exercise the buffered fallback on any disk (tests,
// diagnostics). Read once per open.
std::string RefuseDirectFor() { return EnvKnobsOrDefaults().io_refuse_direct; }

// One aligned O_DIRECT read of the first block: EINVAL (or EOPNOTSUPP) means the file system
// takes O_DIRECT at open but not for reads. A short read (a small file) is fine.
int ProbeDirectRead(const OpenedFile& opened, bool force_refusal) {
  if (force_refusal) return EINVAL;
  const uint64_t align = std::max<uint64_t>({opened.memory_align, opened.offset_align, 4096});
  void* p = nullptr;
  if (::posix_memalign(&p, align, align) != 0) return 0;  // no memory to probe: assume it works
  std::unique_ptr<void, decltype(&std::free)> buf(p, &std::free);
  for (;;) {
    const ssize_t n = ::pread(opened.file.fd(), buf.get(), align, 0);
    if (n >= 0) return 0;
    if (errno != EINTR) return errno;
  }
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
  const std::string refuse = RefuseDirectFor();
  Result<File> direct = refuse == "open"
                            ? Result<File>(Status(StatusCode::kInvalidArgument,
                                                  path + ": O_DIRECT refused "
                                                         "(LIBSHARD_IO_REFUSE_DIRECT=open)",
                                                  EINVAL))
                            : File::Open(path, flags | O_DIRECT);
  if (direct.ok()) {
    opened.file = std::move(direct).value();
    ProbeDirectAlignment(opened.file.fd(), &opened);
    const char* shared = SharedFileSystemName(opened.file.fd());
    if (shared != nullptr) opened.file_system = shared;
    if (opened.offset_align <= max_align && opened.memory_align <= max_align) {
      // Reads only: a writer learns of a refused write at its first write (WriteWithFallback).
      const bool reads = (flags & O_ACCMODE) == O_RDONLY;
      if (reads && (shared != nullptr || refuse == "read")) {
        if (const int e = ProbeDirectRead(opened, refuse == "read"); RefusesDirect(e)) {
          const std::string why =
              path + ": the file system" +
              (shared != nullptr ? std::string(" (") + shared + ")" : std::string()) +
              " accepts O_DIRECT at open but refuses O_DIRECT reads (" + std::strerror(e) +
              (refuse == "read" ? ", LIBSHARD_IO_REFUSE_DIRECT=read" : "") + ")";
          if (mode == IoMode::kDirect) return Status(StatusCode::kUnsupported, why, e);
          LIBSHARD_RETURN_IF_ERROR(opened.file.Close());
          std::string fs = opened.file_system;
          opened = OpenedFile{};
          opened.file_system = std::move(fs);
          opened.fallback = why + "; using buffered " + what + ", in place";
          LIBSHARD_ASSIGN_OR_RETURN(opened.file, File::Open(path, flags));
          return opened;
        }
      }
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
