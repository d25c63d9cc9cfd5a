#include "io/io_engine.h"

#include <string.h>

#include "io/pread_engine.h"
#include "io/uring_engine.h"

namespace libshard::io {

std::string Describe(const BufferRegistration& registration) {
  using State = BufferRegistration::State;
  switch (registration.state) {
    case State::kRegistered:
      return "registered";
    case State::kOnFirstUse:
      return "registered on first use";
    case State::kNotUsed:
      return "not used by the pread engine";
    case State::kAlreadyRegistered:
      return "a buffer is already registered";
    case State::kFailed: {
      char buf[128];
      return std::string("io_uring_register_buffers failed (") +
             strerror_r(registration.sys_errno, buf, sizeof buf) + "); plain reads";
    }
  }
  return "unknown";
}

Result<CreatedEngine> CreateIoEngine(IoEngineKind kind, const EngineOptions& options) {
  CreatedEngine created;
  if (kind != IoEngineKind::kPread) {
    Result<std::unique_ptr<UringEngine>> uring = UringEngine::Create(options);
    if (uring.ok()) {
      created.engine = std::move(uring).value();
      created.kind = IoEngineKind::kIoUring;
      return created;
    }
    if (kind == IoEngineKind::kIoUring) return uring.status();
    created.uring_error = uring.status();
  }
  created.engine = std::make_unique<PreadEngine>(options);
  created.kind = IoEngineKind::kPread;
  return created;
}

}  // namespace libshard::io
