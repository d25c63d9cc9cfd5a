#include "memory/cuda_host_registration.h"

#include <dlfcn.h>

#include <utility>

namespace libshard::memory {
namespace {

using CudaError = int;  // cudaError_t; 0 is cudaSuccess
using HostRegisterFn = CudaError (*)(void*, size_t, unsigned int);
using HostUnregisterFn = CudaError (*)(void*);
using GetErrorStringFn = const char* (*)(CudaError);
constexpr unsigned int kCudaHostRegisterDefault = 0;

}  // namespace

CudaHostRegistration CudaHostRegistration::Register(void* base, size_t size) {
  CudaHostRegistration reg;
  void* lib = nullptr;
  for (const char* name : {"libcudart.so", "libcudart.so.12", "libcudart.so.13", "libcudart.so.11.0"}) {
    lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) {
    reg.status_ = "not pinned: no CUDA runtime found (libcudart.so, .so.12, .so.13)";
    return reg;
  }
  auto reg_fn = reinterpret_cast<HostRegisterFn>(::dlsym(lib, "cudaHostRegister"));
  auto unreg_fn = reinterpret_cast<HostUnregisterFn>(::dlsym(lib, "cudaHostUnregister"));
  auto err_fn = reinterpret_cast<GetErrorStringFn>(::dlsym(lib, "cudaGetErrorString"));
  if (reg_fn == nullptr || unreg_fn == nullptr) {
    reg.status_ = "not pinned: libcudart lacks cudaHostRegister";
    ::dlclose(lib);
    return reg;
  }
  const CudaError err = reg_fn(base, size, kCudaHostRegisterDefault);
  if (err != 0) {
    reg.status_ = std::string("not pinned: cudaHostRegister failed (") +
                  (err_fn != nullptr ? err_fn(err) : "error " + std::to_string(err)) + ")";
    ::dlclose(lib);
    return reg;
  }
  reg.library_ = lib;
  reg.unregister_ = reinterpret_cast<void*>(unreg_fn);
  reg.base_ = base;
  reg.status_ = "pinned (cudaHostRegister)";
  return reg;
}

CudaHostRegistration::CudaHostRegistration(CudaHostRegistration&& other) noexcept
    : library_(std::exchange(other.library_, nullptr)),
      unregister_(std::exchange(other.unregister_, nullptr)),
      base_(std::exchange(other.base_, nullptr)),
      status_(std::move(other.status_)) {}

CudaHostRegistration& CudaHostRegistration::operator=(CudaHostRegistration&& other) noexcept {
  if (this != &other) {
    Reset();
    library_ = std::exchange(other.library_, nullptr);
    unregister_ = std::exchange(other.unregister_, nullptr);
    base_ = std::exchange(other.base_, nullptr);
    status_ = std::move(other.status_);
  }
  return *this;
}

CudaHostRegistration::~CudaHostRegistration() { Reset(); }

void CudaHostRegistration::Reset() {
  if (base_ != nullptr) reinterpret_cast<HostUnregisterFn>(unregister_)(base_);
  if (library_ != nullptr) ::dlclose(library_);
  library_ = unregister_ = base_ = nullptr;
}

}  // namespace libshard::memory
