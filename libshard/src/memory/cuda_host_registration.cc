#include "memory/cuda_host_registration.h"

#include <dlfcn.h>
#include <unistd.h>

namespace libshard::memory {
namespace {

using CudaError = int;  // cudaError_t; 0 is cudaSuccess
using HostRegisterFn = CudaError (*)(void*, size_t, unsigned int);
using HostUnregisterFn = CudaError (*)(void*);
using GetErrorStringFn = const char* (*)(CudaError);
constexpr unsigned int kCudaHostRegisterDefault = 0;

}  // namespace

bool CudaDriverPresent() {
  for (const char* path : {"/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg"}) {
    if (::access(path, F_OK) == 0) return true;
  }
  return false;
}

bool CudaHostPinning::Load() {
  if (loaded_) return library_ != nullptr;
  loaded_ = true;
  for (const char* name : {"libcudart.so", "libcudart.so.12", "libcudart.so.13", "libcudart.so.11.0"}) {
    library_ = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library_ != nullptr) break;
  }
  if (library_ == nullptr) {
    status_ = "not pinned: no CUDA runtime found (libcudart.so, .so.12, .so.13)";
    return false;
  }
  register_ = ::dlsym(library_, "cudaHostRegister");
  unregister_ = ::dlsym(library_, "cudaHostUnregister");
  error_string_ = ::dlsym(library_, "cudaGetErrorString");
  if (register_ == nullptr || unregister_ == nullptr) {
    status_ = "not pinned: libcudart lacks cudaHostRegister";
    ::dlclose(library_);
    library_ = nullptr;
    return false;
  }
  return true;
}

bool CudaHostPinning::Pin(void* base, size_t size) {
  if (failed_) return false;
  if (!Load()) {
    failed_ = true;
    return false;
  }
  const CudaError err = reinterpret_cast<HostRegisterFn>(register_)(base, size,
                                                                    kCudaHostRegisterDefault);
  if (err != 0) {
    // The errors of cudaHostRegister are the runtime's state (no driver, no device, out of
    // pinnable memory): the next range would fail the same way, so stop trying.
    const auto err_fn = reinterpret_cast<GetErrorStringFn>(error_string_);
    status_ = std::string("not pinned: cudaHostRegister failed (") +
              (err_fn != nullptr ? err_fn(err) : "error " + std::to_string(err)) + ")";
    if (!ranges_.empty()) status_ += " after " + std::to_string(ranges_.size()) + " range(s)";
    failed_ = true;
    return false;
  }
  ranges_.push_back(base);
  status_ = "pinned (cudaHostRegister)";
  return true;
}

CudaHostPinning::~CudaHostPinning() { Reset(); }

void CudaHostPinning::Reset() {
  for (void* base : ranges_) reinterpret_cast<HostUnregisterFn>(unregister_)(base);
  ranges_.clear();
  if (library_ != nullptr) ::dlclose(library_);
  library_ = register_ = unregister_ = error_string_ = nullptr;
  loaded_ = failed_ = false;
  status_ = "not pinned yet: pinned as first used";
}

}  // namespace libshard::memory
