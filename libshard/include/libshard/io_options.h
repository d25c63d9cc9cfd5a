// How libshard reads files: the engine (io_uring or a pread thread pool) and the I/O mode
// (O_DIRECT or buffered). The Loader takes both as options (libshard/loader.h); the decisions
// they drive, with their automatic fallbacks, are made in one place inside the library.
#pragma once

#include <cstdint>

namespace libshard {

enum class IoEngineKind : uint32_t {
  kAuto = 0,     // io_uring when the kernel allows it, else the pread thread pool
  kIoUring = 1,
  kPread = 2,
};
enum class IoMode : uint32_t {
  kAuto = 0,     // O_DIRECT when the file system accepts it, else buffered
  kDirect = 1,
  kBuffered = 2,
};
// Whether the loader pins its arena for CUDA (cudaHostRegister, found at run time; libshard never
// links CUDA), each 64 MiB chunk when a read first lands in it, so start costs nothing.
enum class PinMemory : uint32_t {
  kAuto = 0,  // when a CUDA driver is installed (/proc/driver/nvidia, /dev/nvidiactl, /dev/dxg);
              // otherwise no CUDA call at all
  kOn = 1,    // try: load the CUDA runtime at the first chunk; stats().pin_status says why not
  kOff = 2,   // never: no CUDA call at all
};

}  // namespace libshard
