// Writer: the public entry points (Create / Resume / OpenForAppend). The location's storage
// driver says where the local writer (writer_impl.h) writes and what becomes of what it commits
// (publishing_writer.h).
#include "libshard/writer.h"

#include "writer/publishing_writer.h"
#include "writer/writer_impl.h"

namespace libshard {

using writer_internal::OpenThroughStorage;
using writer_internal::WriterImpl;

Result<std::unique_ptr<Writer>> Writer::Create(const std::string& dir, const Schema& schema,
                                               const WriterOptions& options) {
  return OpenThroughStorage(
      dir, storage::WriteKind::kCreate, options,
      [&](const std::string& local, const WriterOptions& o) {
        return WriterImpl::Create(local, schema, o);
      });
}

Result<std::unique_ptr<Writer>> Writer::Resume(const std::string& dir,
                                               const WriterOptions& options) {
  return OpenThroughStorage(dir, storage::WriteKind::kResume, options, &WriterImpl::Resume);
}

Result<std::unique_ptr<Writer>> Writer::OpenForAppend(const std::string& dir,
                                                      const WriterOptions& options) {
  return OpenThroughStorage(dir, storage::WriteKind::kAppend, options,
                            &WriterImpl::OpenForAppend);
}

}  // namespace libshard
