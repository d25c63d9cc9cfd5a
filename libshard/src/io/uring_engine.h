// UringEngine: IoEngine over io_uring (liburing). Registered files and, when the kernel accepts
// them, registered (fixed) buffers over the loader arena: reads whose destination lies inside a
// registered region use IORING_OP_READ_FIXED, the others IORING_OP_READ. A poll on an eventfd
// inside the ring implements Wake(). Thread-compatible except Wake().
#pragma once

#include <liburing.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/io_engine.h"

namespace libshard::io {

class UringEngine final : public IoEngine {
 public:
  // Unsupported when io_uring is refused (ENOSYS, EPERM, io_uring_disabled).
  static Result<std::unique_ptr<UringEngine>> Create(const EngineOptions& options);
  ~UringEngine() override;
  UringEngine(const UringEngine&) = delete;
  UringEngine& operator=(const UringEngine&) = delete;

  std::string_view name() const override { return "io_uring"; }
  Status SetFiles(std::span<const int> fds, std::span<const std::string> paths) override;
  BufferRegistration RegisterBuffer(void* base, size_t size) override;
  uint32_t capacity() const override { return static_cast<uint32_t>(slots_.size()); }
  uint32_t in_flight() const override { return in_flight_; }
  Status Submit(const ReadRequest& request) override;
  Status Flush() override;
  Status Reap(std::vector<ReadCompletion>* out, bool wait, int timeout_ms,
              uint32_t want = 1) override;
  void Wake() override;
  void CancelAll() override;

 private:
  struct Slot {
    ReadRequest request;
    uint64_t done = 0;
    bool busy = false;
    bool cancelled = false;
  };
  enum class RegionState { kUnregistered, kRegistered, kFailed };
  struct Region {
    uintptr_t begin = 0;
    uintptr_t end = 0;
    RegionState state = RegionState::kRegistered;
  };
  // The registered buffer index for a read of [b, b + len), registering its chunk on first use
  // (once register_ready_ allows it); -1 for a plain read.
  int FixedBufferIndex(uintptr_t b, size_t len);

  UringEngine(uint32_t depth, std::function<bool(const void*)> register_ready);
  // Queues the remainder of slot `index` (an SQE; submitted by the next io_uring_submit).
  Status Queue(uint32_t index);
  Status ArmWakePoll();
  io_uring_sqe* GetSqe();
  // Handles one CQE; appends a completion when the request is finished.
  Status Handle(io_uring_cqe* cqe, std::vector<ReadCompletion>* out);

  io_uring ring_{};
  bool ring_ok_ = false;
  int wake_fd_ = -1;
  bool wake_armed_ = false;
  std::atomic<bool> woken_{false};
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  uint32_t in_flight_ = 0;
  std::vector<int> fds_;
  std::vector<std::string> paths_;
  std::vector<uint64_t> sizes_;
  bool files_registered_ = false;
  std::vector<Region> regions_;  // registered buffers, in registration order
  // Lazy registration only: whether a chunk may be registered yet (EngineOptions::register_ready;
  // may be empty).
  std::function<bool(const void*)> register_ready_;
};

}  // namespace libshard::io
