#include "io/io_engine.h"

#include "io/pread_engine.h"
#include "io/uring_engine.h"

namespace libshard::io {

Result<std::unique_ptr<IoEngine>> CreateIoEngine(EngineType type, const EngineOptions& options) {
  if (type == EngineType::kUring) {
    LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<UringEngine> engine, UringEngine::Create(options));
    return std::unique_ptr<IoEngine>(std::move(engine));
  }
  return std::unique_ptr<IoEngine>(std::make_unique<PreadEngine>(options));
}

}  // namespace libshard::io
