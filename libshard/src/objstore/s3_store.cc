// The S3 store (object_store.h): s3://BUCKET/PREFIX on AWS S3 or an S3-compatible server: S3's
// bucket rules and the AWS configuration (io/s3_client.h: LoadS3Config), over the S3-dialect
// store (s3_dialect_store.h: the client pool and the calls).
#include <cctype>

#include "objstore/s3_dialect_store.h"

namespace libshard::objstore {
namespace {

constexpr std::string_view kScheme = "s3";

// S3's bucket naming rules: 3-63 characters of a-z, 0-9, '-', '.', beginning and ending with a
// letter or digit, no "..".
Status CheckBucket(std::string_view url, const std::string& bucket) {
  const auto bucket_char = [](unsigned char c) {
    return std::islower(c) || std::isdigit(c) || c == '-' || c == '.';
  };
  const auto alnum = [](unsigned char c) { return std::islower(c) || std::isdigit(c); };
  bool ok = bucket.size() >= 3 && bucket.size() <= 63 && alnum(bucket.front()) &&
            alnum(bucket.back()) && bucket.find("..") == std::string::npos;
  for (unsigned char c : bucket) ok = ok && bucket_char(c);
  if (ok) return Status::OK();
  return Status::InvalidArgument(std::string(url) + ": '" + bucket +
                                 "' is not a valid bucket name (3-63 characters of a-z, 0-9, "
                                 "'-', '.', beginning and ending with a letter or digit); write "
                                 "s3://BUCKET/PREFIX");
}

}  // namespace

Result<std::shared_ptr<ObjectStore>> OpenS3Store(std::string_view url) {
  LIBSHARD_ASSIGN_OR_RETURN(ObjectUrl parsed, ParseObjectUrl(url, kScheme));
  LIBSHARD_RETURN_IF_ERROR(CheckBucket(url, parsed.bucket));
  return MakeS3DialectStore(std::move(parsed), io::LoadS3Config());
}

}  // namespace libshard::objstore
