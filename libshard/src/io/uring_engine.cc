#include "io/uring_engine.h"

#include <errno.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>

#if defined(__SANITIZE_THREAD__)
#define LIBSHARD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LIBSHARD_TSAN 1
#endif
#endif
#ifdef LIBSHARD_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace libshard::io {
namespace {

// liburing maps and unmaps its rings with raw system calls, which ThreadSanitizer does not see:
// a ring mapped where a ring of another thread's engine was just unmapped looks, to it, like the
// same memory written by two threads without order. The real order (the old ring is unmapped
// before the kernel hands its addresses out again) is told to it through one synchronisation
// address: released before every unmap, acquired after every map. Nothing in other builds.
#ifdef LIBSHARD_TSAN
char g_ring_mapping_order;
void RingMapped() { __tsan_acquire(&g_ring_mapping_order); }
void RingUnmapping() { __tsan_release(&g_ring_mapping_order); }
#else
void RingMapped() {}
void RingUnmapping() {}
#endif

constexpr uint64_t kWakeTag = ~uint64_t{0};
constexpr uint64_t kCancelTag = ~uint64_t{0} - 1;
// Registered buffers are limited to 1 GiB each by the kernel; larger arenas get several.
constexpr size_t kMaxRegisteredBuffer = size_t{1} << 30;
// The loader's arena touches its memory in the same 64 MiB chunks (memory::Arena::kChunkBytes).
constexpr size_t kLazyChunk = size_t{64} << 20;

std::string ErrnoText(int e) {
  char buf[128];
  return strerror_r(e, buf, sizeof buf);
}

}  // namespace

UringEngine::UringEngine(uint32_t depth, std::function<bool(const void*)> register_ready)
    : slots_(depth), register_ready_(std::move(register_ready)) {
  free_slots_.reserve(depth);
  for (uint32_t i = depth; i > 0; --i) free_slots_.push_back(i - 1);
}

Result<std::unique_ptr<UringEngine>> UringEngine::Create(const EngineOptions& options) {
  const uint32_t depth = std::clamp<uint32_t>(options.queue_depth, 1, 4096);
  std::unique_ptr<UringEngine> engine(new UringEngine(depth, options.register_ready));
  // SQ entries: every read slot plus the wake poll and cancellations.
  const int rc = io_uring_queue_init(depth + 2, &engine->ring_, 0);
  if (rc < 0) {
    const int e = -rc;
    const std::string what = "io_uring_queue_init: " + ErrnoText(e);
    if (e == ENOSYS || e == EPERM || e == EACCES || e == EOPNOTSUPP) {
      return Status(StatusCode::kUnsupported,
                    what + " (io_uring is refused here, e.g. by seccomp; use the pread engine)", e);
    }
    return Status::IoError(what, e);
  }
  RingMapped();
  engine->ring_ok_ = true;
  engine->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (engine->wake_fd_ < 0) return Status::FromErrno(errno, "eventfd");
  LIBSHARD_RETURN_IF_ERROR(engine->ArmWakePoll());
  if (const int s = io_uring_submit(&engine->ring_); s < 0) {
    return Status::IoError("io_uring_submit: " + ErrnoText(-s), -s);
  }
  return engine;
}

UringEngine::~UringEngine() {
  if (ring_ok_) {
    CancelAll();
    RingUnmapping();
    io_uring_queue_exit(&ring_);
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status UringEngine::SetFiles(std::span<const int> fds, std::span<const std::string> paths) {
  fds_.assign(fds.begin(), fds.end());
  paths_.assign(paths.begin(), paths.end());
  paths_.resize(fds_.size());
  sizes_.assign(fds_.size(), 0);
  for (size_t i = 0; i < fds_.size(); ++i) {
    struct stat st {};
    if (::fstat(fds_[i], &st) != 0) return Status::FromErrno(errno, "fstat " + paths_[i]);
    sizes_[i] = static_cast<uint64_t>(st.st_size);
  }
  if (files_registered_) {
    io_uring_unregister_files(&ring_);
    files_registered_ = false;
  }
  // Registration saves an fget/fput per read; failure only costs that.
  if (!fds_.empty() && io_uring_register_files(&ring_, fds_.data(),
                                               static_cast<unsigned>(fds_.size())) == 0) {
    files_registered_ = true;
  }
  return Status::OK();
}

BufferRegistration UringEngine::RegisterBuffer(void* base, size_t size) {
  using State = BufferRegistration::State;
  if (!regions_.empty()) return {State::kAlreadyRegistered};
  // Registering pins (and first faults in) every page: about 1 CPU-s per GiB when done up front,
  // mostly wasted on arena pages a run never touches. So the buffer is registered sparsely, in
  // kLazyChunk pieces, each at a read that lands in it once register_ready_ allows (kernel >=
  // 5.19); nothing is touched here.
  const size_t chunks = (size + kLazyChunk - 1) / kLazyChunk;
  if (chunks <= UINT16_MAX &&
      io_uring_register_buffers_sparse(&ring_, static_cast<unsigned>(chunks)) == 0) {
    const auto b = reinterpret_cast<uintptr_t>(base);
    for (size_t k = 0; k < chunks; ++k) {
      const uintptr_t begin = b + k * kLazyChunk;
      regions_.push_back(Region{begin, begin + std::min(kLazyChunk, size - k * kLazyChunk),
                                RegionState::kUnregistered});
    }
    return {State::kOnFirstUse};
  }
  std::vector<iovec> iovs;
  for (size_t off = 0; off < size; off += kMaxRegisteredBuffer) {
    iovs.push_back(iovec{static_cast<char*>(base) + off, std::min(kMaxRegisteredBuffer, size - off)});
  }
  const int rc = io_uring_register_buffers(&ring_, iovs.data(), static_cast<unsigned>(iovs.size()));
  if (rc < 0) return {State::kFailed, -rc};
  for (const iovec& v : iovs) {
    const auto b = reinterpret_cast<uintptr_t>(v.iov_base);
    regions_.push_back(Region{b, b + v.iov_len, RegionState::kRegistered});
  }
  return {State::kRegistered};
}

int UringEngine::FixedBufferIndex(uintptr_t b, size_t len) {
  for (size_t i = 0; i < regions_.size(); ++i) {
    Region& r = regions_[i];
    if (b < r.begin || b + len > r.end) continue;
    if (r.state == RegionState::kUnregistered) {
      // Not faulted in yet: a plain read now (faulting only its own pages), registered later.
      if (register_ready_ && !register_ready_(reinterpret_cast<const void*>(r.begin))) return -1;
      iovec iov{reinterpret_cast<void*>(r.begin), r.end - r.begin};
      __u64 tag = 0;
      r.state = io_uring_register_buffers_update_tag(&ring_, static_cast<unsigned>(i), &iov, &tag,
                                                     1) == 1
                    ? RegionState::kRegistered
                    : RegionState::kFailed;  // this chunk then uses plain reads
    }
    return r.state == RegionState::kRegistered ? static_cast<int>(i) : -1;
  }
  return -1;  // not in the buffer, or across two chunks: a plain read
}

io_uring_sqe* UringEngine::GetSqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

Status UringEngine::ArmWakePoll() {
  io_uring_sqe* sqe = GetSqe();
  if (sqe == nullptr) return Status::Internal("io_uring: no SQE for the wake poll");
  io_uring_prep_poll_add(sqe, wake_fd_, POLLIN);
  io_uring_sqe_set_data64(sqe, kWakeTag);
  wake_armed_ = true;
  return Status::OK();
}

Status UringEngine::Queue(uint32_t index) {
  Slot& slot = slots_[index];
  const ReadRequest& r = slot.request;
  io_uring_sqe* sqe = GetSqe();
  if (sqe == nullptr) return Status::Internal("io_uring: submission queue full");
  std::byte* dst = r.dst + slot.done;
  const uint64_t remaining = r.length - slot.done;
  // One SQE reads at most 2 GiB - 4 KiB (the kernel's MAX_RW_COUNT); the rest is resubmitted.
  const unsigned len = static_cast<unsigned>(std::min<uint64_t>(remaining, 0x7ffff000u));
  const uint64_t off = r.offset + slot.done;
  const int fd = files_registered_ ? static_cast<int>(r.file) : fds_[r.file];
  const auto b = reinterpret_cast<uintptr_t>(dst);
  const int buf_index = FixedBufferIndex(b, len);
  if (buf_index >= 0) {
    io_uring_prep_read_fixed(sqe, fd, dst, len, off, buf_index);
  } else {
    io_uring_prep_read(sqe, fd, dst, len, off);
  }
  if (files_registered_) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(sqe, index);
  return Status::OK();
}

Status UringEngine::Submit(const ReadRequest& request) {
  if (request.file >= fds_.size()) {
    return Status::InvalidArgument("io_uring: read names file " + std::to_string(request.file) +
                                   " but only " + std::to_string(fds_.size()) + " are set");
  }
  if (free_slots_.empty()) {
    return Status::Internal("io_uring: more reads submitted than capacity()");
  }
  const uint32_t index = free_slots_.back();
  free_slots_.pop_back();
  slots_[index] = Slot{request, 0, true, false};
  ++in_flight_;
  return Queue(index);
}

Status UringEngine::Flush() {
  const int rc = io_uring_submit(&ring_);
  if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
    return Status::IoError("io_uring_submit: " + ErrnoText(-rc), -rc);
  }
  return Status::OK();
}

Status UringEngine::Handle(io_uring_cqe* cqe, std::vector<ReadCompletion>* out) {
  const uint64_t tag = io_uring_cqe_get_data64(cqe);
  const int res = cqe->res;
  if (tag == kCancelTag) return Status::OK();
  if (tag == kWakeTag) {
    uint64_t v;
    while (::read(wake_fd_, &v, sizeof v) > 0) {
    }
    wake_armed_ = false;
    return ArmWakePoll();
  }
  if (tag >= slots_.size() || !slots_[tag].busy) {
    return Status::Internal("io_uring: completion for unknown request " + std::to_string(tag));
  }
  const auto index = static_cast<uint32_t>(tag);
  Slot& slot = slots_[index];
  const ReadRequest& r = slot.request;
  auto finish = [&](Status status) {
    if (!slot.cancelled) out->push_back(ReadCompletion{r.tag, slot.done, std::move(status)});
    slot.busy = false;
    free_slots_.push_back(index);
    --in_flight_;
  };
  if (res < 0) {
    if (slot.cancelled) {
      finish(Status::OK());
    } else if (res == -EAGAIN || res == -EINTR) {
      return Queue(index);
    } else {
      finish(Status::IoError("read of " + std::to_string(r.length - slot.done) + " bytes at " +
                                 paths_[r.file] + " offset " + std::to_string(r.offset + slot.done) +
                                 " failed: " + ErrnoText(-res),
                             -res));
    }
    return Status::OK();
  }
  slot.done += static_cast<uint64_t>(res);
  const bool eof = res == 0 || r.offset + slot.done >= sizes_[r.file];
  if (slot.done >= r.length || eof || slot.cancelled) {
    finish(Status::OK());
    return Status::OK();
  }
  return Queue(index);  // short read before EOF: read the rest
}

Status UringEngine::Reap(std::vector<ReadCompletion>* out, bool wait, int timeout_ms,
                         uint32_t want) {
  const size_t before = out->size();
  bool waited = false;
  while (true) {
    io_uring_cqe* cqe = nullptr;
    unsigned head;
    unsigned seen = 0;
    Status first_error;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      Status s = Handle(cqe, out);
      if (!s.ok() && first_error.ok()) first_error = std::move(s);
      ++seen;
    }
    io_uring_cq_advance(&ring_, seen);
    LIBSHARD_RETURN_IF_ERROR(first_error);
    if (seen > 0) LIBSHARD_RETURN_IF_ERROR(Flush());  // resubmissions and the re-armed poll
    if (out->size() > before || !wait || waited) return Status::OK();
    if (woken_.exchange(false)) return Status::OK();
    // Block for `want` CQEs (reads or the wake poll), at most the reads in flight, or the
    // timeout; then collect what arrived.
    const unsigned nr = std::max<unsigned>(1, std::min<unsigned>(want, in_flight_));
    int rc;
    if (timeout_ms >= 0) {
      __kernel_timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000LL};
      rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, nr, &ts, nullptr);
    } else {
      rc = io_uring_submit_and_wait(&ring_, nr);
    }
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      return Status::IoError("io_uring wait: " + ErrnoText(-rc), -rc);
    }
    waited = true;
    if (woken_.exchange(false)) wait = false;
  }
}

void UringEngine::Wake() {
  woken_.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void UringEngine::CancelAll() {
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].busy || slots_[i].cancelled) continue;
    slots_[i].cancelled = true;
    io_uring_sqe* sqe = GetSqe();
    if (sqe == nullptr) continue;
    io_uring_prep_cancel64(sqe, i, 0);
    io_uring_sqe_set_data64(sqe, kCancelTag);
  }
  // Reads of regular files finish quickly even when they cannot be cancelled: wait for all, so
  // no destination memory is written after this returns.
  std::vector<ReadCompletion> ignored;
  while (in_flight_ > 0) {
    if (!Reap(&ignored, true, 100).ok()) break;
    ignored.clear();
  }
}

}  // namespace libshard::io
