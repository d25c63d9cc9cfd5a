// CudaHostRegistration: pins a host memory range for CUDA with cudaHostRegister, found at run
// time with dlopen("libcudart.so*") so libshard never links CUDA. Move-only; unregisters on
// destruction. When no CUDA runtime (or no device) is present, the registration is simply absent
// and status() says why.
#pragma once

#include <cstddef>
#include <string>

namespace libshard::memory {

class CudaHostRegistration {
 public:
  CudaHostRegistration() = default;
  // Tries to register [base, base + size). Never fails hard: check pinned() and status().
  static CudaHostRegistration Register(void* base, size_t size);
  CudaHostRegistration(CudaHostRegistration&& other) noexcept;
  CudaHostRegistration& operator=(CudaHostRegistration&& other) noexcept;
  CudaHostRegistration(const CudaHostRegistration&) = delete;
  CudaHostRegistration& operator=(const CudaHostRegistration&) = delete;
  ~CudaHostRegistration();

  bool pinned() const { return base_ != nullptr; }
  // "pinned (cudaHostRegister)" or why not ("no CUDA runtime found (libcudart.so...)", ...).
  const std::string& status() const { return status_; }

 private:
  void Reset();

  void* library_ = nullptr;  // dlopen handle, kept open while registered
  void* unregister_ = nullptr;  // cudaHostUnregister
  void* base_ = nullptr;
  std::string status_ = "not requested";
};

}  // namespace libshard::memory
