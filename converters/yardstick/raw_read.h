// RawSequentialRead: the device's sequential read limit for a set of files, measured the way fio
// would (O_DIRECT, io_uring, fixed block size and queue depth), as the yardstick that `libshard
// bench` and bench/loader_bench.cc compare the Loader against. A benchmark tool, not library API:
// it lives in the yardstick library (converters/yardstick/CMakeLists.txt), which `libshard bench`
// and the bench programs link.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libshard/status.h"

namespace libshard {

struct RawReadOptions {
  uint32_t queue_depth = 32;
  uint64_t block_size = uint64_t{1} << 20;
  bool direct = true;  // O_DIRECT where the file system allows it
};

struct RawReadResult {
  uint64_t bytes = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // user + system of the whole process during the read
  std::string engine;      // "io_uring" or "pread"
  bool direct_io = false;
  double gbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
};

// Reads every file from start to end, in order, keeping `queue_depth` blocks in flight.
Result<RawReadResult> RawSequentialRead(const std::vector<std::string>& files,
                                        const RawReadOptions& options = {});

// user + system CPU seconds of this process so far (getrusage).
double ProcessCpuSeconds();

}  // namespace libshard
