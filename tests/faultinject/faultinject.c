/* libshard_faultinject: an LD_PRELOAD shim that makes the N-th write-path system call of a
 * process fail, to test that every failure of the writer leaves either nothing that opens as a
 * dataset or the complete, correct one (tests/python/test_write_faults.py drives it).
 *
 * Wrapped: write, pwrite, pwrite64, writev, pwritev, pwritev2, fsync, fdatasync, ftruncate,
 * ftruncate64, rename, renameat, renameat2. Only calls on files under LIBSHARD_FAULT_DIR are
 * counted (a descriptor's path comes from /proc/self/fd, so Python's or the runtime's own writes
 * never count); without LIBSHARD_FAULT_DIR nothing is counted. libshard writes with pwrite(2)
 * from its own threads (io_uring serves reads only), so every write of the writer passes here.
 *
 * Environment:
 *   LIBSHARD_FAULT_DIR=PATH        count calls on files under PATH (an absolute, resolved path)
 *   LIBSHARD_FAULT_AT=N            the N-th counted call (1-based) fails; 0 or unset: none
 *   LIBSHARD_FAULT_KIND=K          enospc | eio: return -1 with that errno, without doing the call;
 *                                  kill: SIGKILL the process before the call;
 *                                  short: a write transfers half its bytes (then the caller must
 *                                  continue); other calls are not affected
 *   LIBSHARD_FAULT_STICKY=1        with enospc/eio: every counted call from N on fails (a full disk
 *                                  stays full), not only the N-th
 *   LIBSHARD_FAULT_LOG=PATH        append "N op path" for every counted call (which call is which)
 *   LIBSHARD_FAULT_COUNT_FILE=PATH at exit, write the number of counted calls there
 *
 * Not thread-hostile: the counter is atomic; the log is appended with O_APPEND, one write a line.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum Kind { kNone, kEnospc, kEio, kKill, kShort };

static char g_dir[PATH_MAX];
static size_t g_dir_len;
static long g_at;
static enum Kind g_kind = kNone;
static int g_sticky;
static int g_log_fd = -1;
static char g_count_file[PATH_MAX];
static long g_count; /* counted calls so far (atomic) */

/* The real functions, resolved once (dlsym does not write). */
static ssize_t (*real_write)(int, const void*, size_t);
static ssize_t (*real_pwrite)(int, const void*, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void*, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec*, int);
static ssize_t (*real_pwritev)(int, const struct iovec*, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec*, int, off_t, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_rename)(const char*, const char*);
static int (*real_renameat)(int, const char*, int, const char*);
static int (*real_renameat2)(int, const char*, int, const char*, unsigned);

#define RESOLVE(name) real_##name = dlsym(RTLD_NEXT, #name)

static void WriteCount(void) {
  if (!g_count_file[0] || !real_write) return;
  int fd = open(g_count_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%ld\n", __atomic_load_n(&g_count, __ATOMIC_SEQ_CST));
  if (n > 0) (void)real_write(fd, buf, (size_t)n);
  close(fd);
}

__attribute__((constructor)) static void Init(void) {
  RESOLVE(write);
  RESOLVE(pwrite);
  RESOLVE(pwrite64);
  RESOLVE(writev);
  RESOLVE(pwritev);
  RESOLVE(pwritev2);
  RESOLVE(fsync);
  RESOLVE(fdatasync);
  RESOLVE(ftruncate);
  RESOLVE(ftruncate64);
  RESOLVE(rename);
  RESOLVE(renameat);
  RESOLVE(renameat2);
  const char* dir = getenv("LIBSHARD_FAULT_DIR");
  if (dir && dir[0] == '/' && strlen(dir) < sizeof g_dir) {
    strcpy(g_dir, dir);
    g_dir_len = strlen(g_dir);
    while (g_dir_len > 1 && g_dir[g_dir_len - 1] == '/') g_dir[--g_dir_len] = '\0';
  }
  const char* at = getenv("LIBSHARD_FAULT_AT");
  g_at = at ? strtol(at, NULL, 10) : 0;
  const char* kind = getenv("LIBSHARD_FAULT_KIND");
  if (kind) {
    if (!strcmp(kind, "enospc")) g_kind = kEnospc;
    else if (!strcmp(kind, "eio")) g_kind = kEio;
    else if (!strcmp(kind, "kill")) g_kind = kKill;
    else if (!strcmp(kind, "short")) g_kind = kShort;
  }
  const char* sticky = getenv("LIBSHARD_FAULT_STICKY");
  g_sticky = sticky && sticky[0] == '1';
  const char* log = getenv("LIBSHARD_FAULT_LOG");
  if (log) g_log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const char* count = getenv("LIBSHARD_FAULT_COUNT_FILE");
  if (count && strlen(count) < sizeof g_count_file) strcpy(g_count_file, count);
}

__attribute__((destructor)) static void Fini(void) { WriteCount(); }

static int UnderDir(const char* path) {
  if (!g_dir_len || !path) return 0;
  if (strncmp(path, g_dir, g_dir_len) != 0) return 0;
  return path[g_dir_len] == '/' || path[g_dir_len] == '\0';
}

static int FdUnderDir(int fd, char* path, size_t cap) {
  if (!g_dir_len) return 0;
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, cap - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return UnderDir(path);
}

/* "a/b" relative to the working directory (or to dirfd) made absolute, for the prefix test. */
static void AbsolutePath(int dirfd, const char* path, char* out, size_t cap) {
  if (path[0] == '/') {
    snprintf(out, cap, "%s", path);
    return;
  }
  char base[PATH_MAX] = "";
  if (dirfd == AT_FDCWD) {
    if (!getcwd(base, sizeof base)) base[0] = '\0';
  } else {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t n = readlink(link, base, sizeof base - 1);
    base[n > 0 ? n : 0] = '\0';
  }
  snprintf(out, cap, "%s/%s", base, path);
}

/* Counts one call on `path`; returns the fault to inject now (kNone: do the call). */
static enum Kind Count(const char* op, const char* path) {
  const int is_write = strstr(op, "write") != NULL;
  long n = __atomic_add_fetch(&g_count, 1, __ATOMIC_SEQ_CST);
  if (g_log_fd >= 0 && real_write) {
    char line[PATH_MAX + 64];
    int len = snprintf(line, sizeof line, "%ld %s %s\n", n, op, path);
    if (len > 0) (void)real_write(g_log_fd, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
  }
  if (g_kind == kNone || g_at <= 0) return kNone;
  if (n == g_at || (g_sticky && n > g_at && (g_kind == kEnospc || g_kind == kEio))) {
    if (g_kind == kShort && !is_write) return kNone; /* only writes can be short */
    if (g_kind == kKill) {
      WriteCount();
      kill(getpid(), SIGKILL);
    }
    return g_kind;
  }
  return kNone;
}

/* Bytes a "short" write transfers: half, in whole 4 KiB blocks when the request has two or more
 * (what O_DIRECT would allow the kernel to do), else half the bytes. */
static size_t ShortLength(size_t n) {
  if (n >= 8192) return n / 2 / 4096 * 4096;
  return n / 2;
}

static int FailErrno(enum Kind k) {
  errno = k == kEnospc ? ENOSPC : EIO;
  return -1;
}

#define FD_OP(op, fd)                              \
  char path_[PATH_MAX];                            \
  enum Kind k_ = kNone;                            \
  if (FdUnderDir((fd), path_, sizeof path_)) k_ = Count(op, path_);

ssize_t write(int fd, const void* buf, size_t n) {
  FD_OP("write", fd);
  if (k_ == kShort && n > 1) return real_write(fd, buf, ShortLength(n));
  if (k_ != kNone) return FailErrno(k_);
  return real_write(fd, buf, n);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  FD_OP("pwrite", fd);
  if (k_ == kShort && n > 1) return real_pwrite(fd, buf, ShortLength(n), off);
  if (k_ != kNone) return FailErrno(k_);
  return real_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  FD_OP("pwrite", fd);
  if (k_ == kShort && n > 1) return real_pwrite64(fd, buf, ShortLength(n), off);
  if (k_ != kNone) return FailErrno(k_);
  return real_pwrite64(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  FD_OP("writev", fd);
  if (k_ == kShort && cnt > 0 && iov[0].iov_len > 1) return real_write(fd, iov[0].iov_base, ShortLength(iov[0].iov_len));
  if (k_ != kNone) return FailErrno(k_);
  return real_writev(fd, iov, cnt);
}

ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  FD_OP("pwritev", fd);
  if (k_ == kShort && cnt > 0 && iov[0].iov_len > 1) return real_pwrite(fd, iov[0].iov_base, ShortLength(iov[0].iov_len), off);
  if (k_ != kNone) return FailErrno(k_);
  return real_pwritev(fd, iov, cnt, off);
}

ssize_t pwritev2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  FD_OP("pwritev2", fd);
  if (k_ != kNone) return FailErrno(k_);
  return real_pwritev2(fd, iov, cnt, off, flags);
}

int fsync(int fd) {
  FD_OP("fsync", fd);
  if (k_ != kNone) return FailErrno(k_);
  return real_fsync(fd);
}

int fdatasync(int fd) {
  FD_OP("fdatasync", fd);
  if (k_ != kNone) return FailErrno(k_);
  return real_fdatasync(fd);
}

int ftruncate(int fd, off_t len) {
  FD_OP("ftruncate", fd);
  if (k_ != kNone) return FailErrno(k_);
  return real_ftruncate(fd, len);
}

int ftruncate64(int fd, off_t len) {
  FD_OP("ftruncate", fd);
  if (k_ != kNone) return FailErrno(k_);
  return real_ftruncate64(fd, len);
}

static enum Kind RenameOp(const char* op, int fromfd, const char* from, int tofd, const char* to) {
  char a[PATH_MAX], b[PATH_MAX];
  AbsolutePath(fromfd, from, a, sizeof a);
  AbsolutePath(tofd, to, b, sizeof b);
  if (!UnderDir(a) && !UnderDir(b)) return kNone;
  return Count(op, UnderDir(b) ? b : a);
}

int rename(const char* from, const char* to) {
  enum Kind k = RenameOp("rename", AT_FDCWD, from, AT_FDCWD, to);
  if (k != kNone) return FailErrno(k);
  return real_rename(from, to);
}

int renameat(int fromfd, const char* from, int tofd, const char* to) {
  enum Kind k = RenameOp("rename", fromfd, from, tofd, to);
  if (k != kNone) return FailErrno(k);
  return real_renameat(fromfd, from, tofd, to);
}

int renameat2(int fromfd, const char* from, int tofd, const char* to, unsigned flags) {
  enum Kind k = RenameOp("rename", fromfd, from, tofd, to);
  if (k != kNone) return FailErrno(k);
  if (real_renameat2) return real_renameat2(fromfd, from, tofd, to, flags);
  return (int)syscall(SYS_renameat2, fromfd, from, tofd, to, flags);
}
