// CudaHostPinning: pins host memory ranges for CUDA with cudaHostRegister, found at run time
// with dlopen("libcudart.so*") so libshard never links CUDA. The runtime is loaded on the first
// Pin() (not before: an arena pins each chunk when it is first used, so a loader that never
// touches CUDA memory never loads CUDA), and once loading it or a registration has failed for a
// reason that holds for every range (no runtime, no driver, no device), later Pin() calls return
// false at once. Every range pinned is unregistered on destruction. Thread-compatible.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace libshard::memory {

// Whether a CUDA driver looks installed here (the NVIDIA kernel driver's /proc/driver/nvidia or
// /dev/nvidiactl, or WSL's /dev/dxg): a few stat calls, no CUDA library loaded. Resolves
// PinMemory::kAuto, so a machine without a GPU never loads the CUDA runtime to learn that.
bool CudaDriverPresent();

class CudaHostPinning {
 public:
  CudaHostPinning() = default;
  ~CudaHostPinning();
  CudaHostPinning(const CudaHostPinning&) = delete;
  CudaHostPinning& operator=(const CudaHostPinning&) = delete;

  // Tries to register [base, base + size). Never fails hard: false when not pinned, and
  // status() says why.
  bool Pin(void* base, size_t size);
  // Unregisters every range and unloads the runtime; Pin() may be called again afterwards.
  void Reset();
  // Whether a range was pinned and no registration has failed since.
  bool pinned() const { return !ranges_.empty() && !failed_; }
  size_t ranges() const { return ranges_.size(); }
  // Whether Pin() can no longer succeed (no runtime, no driver, ...).
  bool given_up() const { return failed_; }
  // "pinned (cudaHostRegister)" or why not ("not pinned: no CUDA runtime found ...", ...).
  const std::string& status() const { return status_; }

 private:
  bool Load();

  void* library_ = nullptr;    // dlopen handle, kept open while ranges are registered
  void* register_ = nullptr;   // cudaHostRegister
  void* unregister_ = nullptr; // cudaHostUnregister
  void* error_string_ = nullptr;  // cudaGetErrorString (may be null)
  bool loaded_ = false;
  bool failed_ = false;
  std::vector<void*> ranges_;  // bases of the registered ranges
  std::string status_ = "not pinned yet: pinned as first used";
};

}  // namespace libshard::memory
