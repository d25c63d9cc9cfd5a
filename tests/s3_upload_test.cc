// The upload path's pieces that need no server: the MD5 of Content-MD5 and part ETags, and the
// staging directory of an s3:// output (tests/python/test_s3_write.py covers the uploads).
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "libshard/object_storage.h"
#include "remote/md5.h"
#include "remote/s3_writer.h"

namespace libshard::remote {
namespace {

TEST(S3UploadMd5, KnownDigests) {
  EXPECT_EQ(Md5Etag(""), "\"d41d8cd98f00b204e9800998ecf8427e\"");
  EXPECT_EQ(Md5Etag("abc"), "\"900150983cd24fb0d6963f7d28e17f72\"");
  EXPECT_EQ(Md5Base64("abc"), "kAFQmDzST7DWlj99KOF/cg==");
  // Lengths around the 56-byte padding boundary and a multi-block input.
  EXPECT_EQ(Md5Etag(std::string(55, 'x')), "\"04364420e25c512fd958a70738aa8f72\"");
  EXPECT_EQ(Md5Etag(std::string(56, 'x')), "\"668a72d5ba17f08e62dabcafad6db14b\"");
  EXPECT_EQ(Md5Etag(std::string(1000, 'a')), "\"cabe45dcc9ae5b66ba86600cca6b8ba8\"");
}

TEST(S3UploadStaging, DeterministicPerUrl) {
  ::setenv("LIBSHARD_S3_STAGING", "/tmp/stage", 1);
  Result<std::string> a = ObjectStorageStagingDir("s3://bucket-1/runs/r1");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, "/tmp/stage/bucket-1/runs/r1");
  EXPECT_EQ(*ObjectStorageStagingDir("s3://bucket-1/runs/r1/"), *a);
  EXPECT_EQ(*ObjectStorageStagingDir("s3://bucket-1"), "/tmp/stage/bucket-1/_root");
  for (const char* bad : {"s3://bucket-1/a/../b", "s3://bucket-1/a//b", "s3://B/x", "/local"}) {
    Result<std::string> r = ObjectStorageStagingDir(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  ::unsetenv("LIBSHARD_S3_STAGING");
  EXPECT_TRUE(IsObjectStorageUrl("s3://b/x"));
  EXPECT_FALSE(IsObjectStorageUrl("/data/x"));
}

}  // namespace
}  // namespace libshard::remote
