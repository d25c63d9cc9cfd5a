#include "yardstick/raw_read.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>

#include "io/file.h"
#include "io/direct_io.h"
#include "io/io_engine.h"
#include "memory/prefaulter.h"

namespace libshard {

double ProcessCpuSeconds() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

Result<RawReadResult> RawSequentialRead(const std::vector<std::string>& files,
                                        const RawReadOptions& options) {
  const uint32_t depth = std::max<uint32_t>(1, options.queue_depth);
  const uint64_t block = std::max<uint64_t>(4096, (options.block_size + 4095) / 4096 * 4096);
  RawReadResult result;
  result.direct_io = options.direct;
  std::vector<io::File> opened;
  std::vector<int> fds;
  std::vector<uint64_t> sizes;
  for (const std::string& path : files) {
    LIBSHARD_ASSIGN_OR_RETURN(
        io::OpenedFile o,
        io::OpenForReading(path, options.direct ? IoMode::kAuto : IoMode::kBuffered));
    if (!o.direct) result.direct_io = false;
    io::File f = std::move(o.file);
    LIBSHARD_ASSIGN_OR_RETURN(uint64_t size, f.Size());
    fds.push_back(f.fd());
    sizes.push_back(size);
    opened.push_back(std::move(f));
  }
  io::EngineOptions eo;
  eo.queue_depth = depth;
  eo.threads = std::min<uint32_t>(depth, 8);
  // The buffer is faulted in off the submitting thread and registered with io_uring once it
  // is, as the loader does with its arena's chunks (memory/arena.h).
  std::atomic<bool> faulted_in{false};  // before the prefaulter, whose thread may still set it
  memory::Prefaulter prefaulter;
  eo.register_ready = [&faulted_in](const void*) { return faulted_in.load(); };
  LIBSHARD_ASSIGN_OR_RETURN(io::CreatedEngine engine, io::CreateIoEngine(IoEngineKind::kAuto, eo));
  io::IoEngine& e = *engine.engine;
  result.engine = std::string(e.name());
  LIBSHARD_RETURN_IF_ERROR(e.SetFiles(fds, files));
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> buffer(
      static_cast<std::byte*>(std::aligned_alloc(4096, block * depth)));
  if (buffer == nullptr) return Status::ResourceExhausted("raw read: cannot allocate buffers");
  prefaulter.Request(buffer.get(), block * depth, [&faulted_in](bool) { faulted_in.store(true); });
  e.RegisterBuffer(buffer.get(), block * depth);
  std::vector<uint32_t> free_slots;
  for (uint32_t i = 0; i < depth; ++i) free_slots.push_back(i);

  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  size_t file = 0;
  uint64_t offset = 0;
  std::vector<io::ReadCompletion> done;
  while (true) {
    while (!free_slots.empty() && file < files.size()) {
      if (offset >= sizes[file]) {
        ++file;
        offset = 0;
        continue;
      }
      const uint32_t slot = free_slots.back();
      free_slots.pop_back();
      LIBSHARD_RETURN_IF_ERROR(e.Submit(io::ReadRequest{static_cast<uint32_t>(file), offset,
                                                        block, buffer.get() + slot * block, slot}));
      offset += block;
    }
    LIBSHARD_RETURN_IF_ERROR(e.Flush());
    if (e.in_flight() == 0) break;
    done.clear();
    LIBSHARD_RETURN_IF_ERROR(e.Reap(&done, true, 1000));
    for (io::ReadCompletion& c : done) {
      LIBSHARD_RETURN_IF_ERROR(c.status);
      result.bytes += c.bytes;
      free_slots.push_back(static_cast<uint32_t>(c.tag));
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.cpu_seconds = ProcessCpuSeconds() - cpu0;
  return result;
}

}  // namespace libshard
