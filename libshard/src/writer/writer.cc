// Writer: the public entry points (Create / Resume / OpenForAppend), which choose the local
// writer (writer_impl.h) or the s3:// one (remote/s3_writer.h).
#include "libshard/writer.h"

#include "io/s3_client.h"
#include "remote/s3_writer.h"
#include "writer/writer_impl.h"

namespace libshard {

using writer_internal::WriterImpl;

// An s3:// output is written through a local staging directory and uploaded (remote/s3_writer.h).
Result<std::unique_ptr<Writer>> Writer::Create(const std::string& dir, const Schema& schema,
                                               const WriterOptions& options) {
  if (io::IsS3Url(dir)) return remote::CreateS3Writer(dir, schema, options);
  return WriterImpl::Create(dir, schema, options);
}

Result<std::unique_ptr<Writer>> Writer::Resume(const std::string& dir,
                                               const WriterOptions& options) {
  if (io::IsS3Url(dir)) return remote::ResumeS3Writer(dir, options);
  return WriterImpl::Resume(dir, options);
}

Result<std::unique_ptr<Writer>> Writer::OpenForAppend(const std::string& dir,
                                                      const WriterOptions& options) {
  if (io::IsS3Url(dir))
    return Status::Unsupported(dir + ": appending to an s3:// dataset is not supported; write "
                               "the new samples to another prefix, or append locally and upload");
  return WriterImpl::OpenForAppend(dir, options);
}

}  // namespace libshard
