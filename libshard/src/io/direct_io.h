// The O_DIRECT-or-buffered decision, in one place for every reader and writer of dataset files
// (the Loader's shards, the Dataset's index and shard headers, the Writer's shards and journal).
//
// IoMode::kAuto uses O_DIRECT where the file system accepts it and falls back to buffered I/O
// where it does not (EINVAL/EOPNOTSUPP at open, e.g. ramfs or tmpfs before Linux 6.6, or an
// alignment larger than the caller's buffers and offsets), and says why in `fallback`.
// IoMode::kDirect fails with Unsupported instead of falling back. IoMode::kBuffered never asks.
// Messages name the file and the reason; which user setting asked for the mode is the caller's
// context to add.
#pragma once

#include <cstdint>
#include <string>

#include "io/file.h"
#include "libshard/io_options.h"
#include "libshard/status.h"

namespace libshard::io {

// A file opened by OpenForReading or OpenForWriting, and how.
struct OpenedFile {
  File file;
  bool direct = false;        // opened with O_DIRECT
  uint32_t memory_align = 1;  // O_DIRECT: required alignment of buffers
  uint32_t offset_align = 1;  // O_DIRECT: required alignment of offsets and lengths
  std::string fallback;       // when not direct: why ("buffered reads requested", or the refusal)
  std::string align_source = "default";  // "statx" when the alignment is the kernel's
  // A network or user-space file system (statfs f_type: "nfs", "lustre", "fuse", "ceph", ...),
  // read in place like a local disk; empty for others. On these an O_DIRECT open is followed by
  // one read of the first block, since some accept O_DIRECT at open and refuse it at read.
  std::string file_system;
};

// Opens `path` read-only in `mode`. `max_align`: the alignment the caller's buffers, offsets
// and lengths always have; O_DIRECT is used only when the file system needs no more (statx
// STATX_DIOALIGN when the kernel reports it, else 4096 is assumed). Where O_DIRECT is refused
// at open (EINVAL/EOPNOTSUPP) or, on a network/FUSE file system, at the first read, kAuto reads
// buffered and `fallback` says why. LIBSHARD_IO_REFUSE_DIRECT=open|read makes any file system
// behave so (tests, diagnostics).
Result<OpenedFile> OpenForReading(const std::string& path, IoMode mode,
                                  uint32_t max_align = 4096);

enum class Disposition {
  kExisting,         // the file must exist
  kCreateTruncate,   // created, or truncated to 0 bytes when it exists (mode 0644)
};

// Opens `path` read-write in `mode` (the same fallbacks as OpenForReading, for writes that are
// whole 4 KiB-aligned extents from 4 KiB-aligned buffers when `mode` is not kBuffered).
Result<OpenedFile> OpenForWriting(const std::string& path, IoMode mode, Disposition disposition);

// PWriteAll of [src, src + length) at `offset` to `file`. When the file is open with O_DIRECT
// and the file system refuses the write itself (EINVAL: some accept O_DIRECT at open and not at
// write), reopens it buffered, records why in `file->fallback` and writes again.
[[nodiscard]] Status WriteWithFallback(OpenedFile* file, const void* src, uint64_t length,
                                       uint64_t offset);

}  // namespace libshard::io
