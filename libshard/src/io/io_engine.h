// IoEngine: asynchronous positional reads into caller-owned memory (system calls only).
//
// Contract shared by every implementation:
// - Submit() queues one read of `length` bytes at `offset` of registered file `file` into `dst`;
//   the read is issued to the kernel by the next Flush() (or sooner). `dst` must stay valid until
//   the completion for `tag` has been returned by Reap() or the engine is destroyed.
// - A completion is reported once per request: `bytes` == `length`, or fewer when end of file
//   came first (status OK), or a non-OK status naming the file and the offset. Short reads are
//   continued internally; EINTR/EAGAIN are retried.
// - Reap() returns the completions that are ready; with `wait` and none ready it blocks until
//   min(`want`, in_flight()) (at least one) are, or Wake() was called, or `timeout_ms` passed
//   (timeout_ms < 0: no limit). A `want` above 1 lets a caller with many small reads in flight
//   wake once per several completions instead of once per completion.
// - Wake() may be called from any thread; every other method from one thread (the owner).
// - The destructor cancels what it can and waits for every read the kernel still owns, so memory
//   passed to Submit() may be freed once the engine is gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/io_options.h"
#include "libshard/status.h"

namespace libshard::io {

struct ReadRequest {
  uint32_t file = 0;      // index into the files passed to SetFiles()
  uint64_t offset = 0;
  uint64_t length = 0;
  std::byte* dst = nullptr;
  uint64_t tag = 0;       // returned with the completion
};

struct ReadCompletion {
  uint64_t tag = 0;
  uint64_t bytes = 0;
  Status status;
};

struct EngineOptions {
  uint32_t queue_depth = 64;  // reads the engine keeps in flight
  uint32_t threads = 4;       // kPread: worker threads (capped by queue_depth)
  // io_uring, buffer registered lazily: whether the chunk starting at `begin` may be
  // registered now, asked on the owner thread at each read into a chunk not registered yet.
  // Registering pins the chunk's pages, faulting in (and zeroing) those not there yet on the
  // submitting thread, which then cannot submit or reap for tens of milliseconds; so the loader
  // answers yes once its arena has faulted the chunk in (memory::Arena::ChunkReady), and until
  // then reads into the chunk are plain reads, which fault in only the pages they write.
  // Optional: without it a chunk is registered on its first read.
  std::function<bool(const void* begin)> register_ready;
};

// What RegisterBuffer() did.
struct BufferRegistration {
  enum class State {
    kRegistered,         // the whole buffer, up front
    kOnFirstUse,         // in chunks, each when the first read lands in it
    kNotUsed,            // the engine has no use for registered buffers (pread)
    kAlreadyRegistered,  // a buffer was registered before: this one is not
    kFailed,             // the kernel refused: plain reads
  };
  State state = State::kNotUsed;
  int sys_errno = 0;  // kFailed: the error of io_uring_register_buffers
};
// "registered", "registered on first use", ...: for logs and stats.
std::string Describe(const BufferRegistration& registration);

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  // "io_uring" or "pread".
  virtual std::string_view name() const = 0;
  // The files that requests refer to by index. `paths` are only used in error messages. Call
  // before the first Submit(); the descriptors must outlive the engine.
  virtual Status SetFiles(std::span<const int> fds, std::span<const std::string> paths) = 0;
  // Optionally registers one memory region that most destinations lie in (io_uring fixed
  // buffers). Failure is not an error: the engine falls back to ordinary reads; the result says
  // what happened.
  virtual BufferRegistration RegisterBuffer(void* base, size_t size) = 0;
  // Requests that can be submitted before completions must be reaped.
  virtual uint32_t capacity() const = 0;
  // Reads submitted and not yet returned by Reap().
  virtual uint32_t in_flight() const = 0;

  virtual Status Submit(const ReadRequest& request) = 0;
  virtual Status Flush() = 0;
  virtual Status Reap(std::vector<ReadCompletion>* out, bool wait, int timeout_ms,
                      uint32_t want = 1) = 0;
  virtual void Wake() = 0;
  // Cancels every read in flight and waits until the kernel no longer owns any destination
  // memory; cancelled requests produce no completion.
  virtual void CancelAll() = 0;
};

// An engine made by CreateIoEngine.
struct CreatedEngine {
  std::unique_ptr<IoEngine> engine;
  IoEngineKind kind = IoEngineKind::kPread;  // the engine made: kIoUring or kPread
  Status uring_error;  // kAuto fell back to pread: why io_uring could not be used; else OK
};

// Creates the engine `kind` asks for. kIoUring fails (Unsupported when the kernel refuses
// io_uring: seccomp ENOSYS/EPERM, io_uring_disabled). kAuto tries io_uring and falls back to
// the pread pool on any failure, returning why in `uring_error`. kPread never fails.
Result<CreatedEngine> CreateIoEngine(IoEngineKind kind, const EngineOptions& options);

}  // namespace libshard::io
