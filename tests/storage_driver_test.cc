// Storage drivers (storage/storage_driver.h, docs/guide/object-storage.md "Storage drivers"):
// a location's driver chosen once from its scheme, the rules of object-store URLs (a "." or ".."
// or empty segment refused, keys percent-encoded per segment), what each driver tells a writer
// (libshard/storage.h), and the operations that need local files refused for an s3:// location
// before anything is made or sent. No server: every case here is decided before a request.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "io/s3_client.h"
#include "io/s3_internal.h"
#include "libshard/dataset.h"
#include "libshard/dataset_lock.h"
#include "libshard/follow.h"
#include "libshard/merge.h"
#include "libshard/storage.h"
#include "libshard/upgrade.h"
#include "libshard/writer.h"
#include "objstore/memory_store.h"
#include "objstore/object_url.h"
#include "format_test_helpers.h"
#include "storage/storage_driver.h"
#include "testutil/testutil.h"

namespace libshard::storage {
namespace {

namespace fs = std::filesystem;
using objstore::kMaxKeyPrefix;
using objstore::ObjectUrl;
using objstore::ParseObjectUrl;

// LIBSHARD_S3_STAGING pointed at a fresh directory for the test's lifetime.
class StagingEnv {
 public:
  StagingEnv() { ::setenv("LIBSHARD_S3_STAGING", dir_.path().c_str(), 1); }
  ~StagingEnv() { ::unsetenv("LIBSHARD_S3_STAGING"); }
  const fs::path& path() const { return dir_.path(); }

 private:
  testing::TempDir dir_;
};

void ExpectRefused(const Status& st, StatusCode code, const std::string& url,
                   const std::string& says) {
  EXPECT_EQ(st.code(), code) << url << ": " << st.ToString();
  EXPECT_NE(st.message().find(url), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
}

TEST(StorageDriverTest, ChosenOnceFromTheScheme) {
  StagingEnv env;
  Result<std::unique_ptr<StorageDriver>> local = OpenStorage("/data/run1");
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ((*local)->info().driver, "local");
  EXPECT_EQ((*local)->info().work_dir, "/data/run1");
  EXPECT_FALSE((*local)->info().staged);
  EXPECT_TRUE((*local)->info().local_files);
  // A relative directory, and one whose name merely contains "s3://" further on, are local.
  for (const char* path : {"run1", "data/s3://x", "./s3:"}) {
    Result<std::unique_ptr<StorageDriver>> d = OpenStorage(path);
    ASSERT_TRUE(d.ok()) << path;
    EXPECT_EQ((*d)->info().driver, "local") << path;
  }
  Result<std::unique_ptr<StorageDriver>> s3 = OpenStorage("s3://my-bucket/runs/r1/");
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_EQ((*s3)->info().driver, "s3");
  EXPECT_EQ((*s3)->location(), "s3://my-bucket/runs/r1");  // the trailing '/' dropped
  EXPECT_EQ((*s3)->info().work_dir, (env.path() / "my-bucket/runs/r1").string());
  EXPECT_TRUE((*s3)->info().staged);
  EXPECT_FALSE((*s3)->info().local_files);
  // gs:// is a store of the table: staged under its scheme's own directory.
  Result<std::unique_ptr<StorageDriver>> gs = OpenStorage("gs://my_bucket/runs/r1");
  ASSERT_TRUE(gs.ok()) << gs.status().ToString();
  EXPECT_EQ((*gs)->info().driver, "gs");
  EXPECT_EQ((*gs)->location(), "gs://my_bucket/runs/r1");
  EXPECT_EQ((*gs)->info().work_dir, (env.path() / "_gs/my_bucket/runs/r1").string());
  // A scheme no driver takes is refused, never read as a local directory "az:".
  ExpectRefused(OpenStorage("az://bucket/x").status(), StatusCode::kUnsupported, "az://bucket/x",
                "no storage driver for az://");
  EXPECT_EQ(OpenStorage("").status().code(), StatusCode::kInvalidArgument);
  // The public view is the driver's.
  Result<StorageInfo> info = DescribeStorage("s3://my-bucket");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->location, "s3://my-bucket");
  EXPECT_EQ(info->work_dir, (env.path() / "my-bucket/_root").string());
}

TEST(ObjectUrlTest, Parses) {
  Result<ObjectUrl> u = ParseObjectUrl("s3://my-bucket/a/b/c", "s3");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->bucket, "my-bucket");
  EXPECT_EQ(u->prefix, "a/b/c");
  EXPECT_EQ(u->KeyOf("manifest.json"), "a/b/c/manifest.json");
  EXPECT_EQ(u->ToString("s3"), "s3://my-bucket/a/b/c");
  u = ParseObjectUrl("s3://bucket", "s3");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->prefix, "");
  EXPECT_EQ(u->KeyOf("manifest.json"), "manifest.json");
  u = ParseObjectUrl("s3://bucket/", "s3");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->prefix, "");
  // Dots inside a segment, and keys with characters a request encodes, are fine.
  u = ParseObjectUrl("s3://bucket/v1.2/..hidden/a b+c%", "s3");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->prefix, "v1.2/..hidden/a b+c%");
}

TEST(ObjectUrlTest, DotAndEmptySegmentsAreRefusedNamingTheUrl) {
  // s3://bucket/../other would otherwise read another bucket: the HTTP client collapses "..".
  for (const char* url : {"s3://bucket/../other", "s3://bucket/a/../../other", "s3://bucket/..",
                          "s3://bucket/a/./b", "s3://bucket/.", "s3://bucket/a/.."}) {
    Result<std::unique_ptr<StorageDriver>> d = OpenStorage(url);
    ASSERT_FALSE(d.ok()) << url;
    ExpectRefused(d.status(), StatusCode::kInvalidArgument, url, "path segment");
  }
  for (const char* url : {"s3://bucket//a", "s3://bucket/a//b", "s3://bucket/a//", "s3://bucket//"}) {
    Result<std::unique_ptr<StorageDriver>> d = OpenStorage(url);
    ASSERT_FALSE(d.ok()) << url;
    ExpectRefused(d.status(), StatusCode::kInvalidArgument, url, "empty path segment");
  }
  ExpectRefused(OpenStorage("s3://bucket/a\nb").status(), StatusCode::kInvalidArgument,
                "s3://bucket/a\nb", "control character");
  const std::string long_url = "s3://bucket/" + std::string(kMaxKeyPrefix + 1, 'k');
  ExpectRefused(OpenStorage(long_url).status(), StatusCode::kInvalidArgument, long_url,
                "key prefix of");
}

TEST(ObjectUrlTest, BucketNamesFollowS3sRules) {
  for (const char* url : {"s3://", "s3:///x", "s3://AB/x", "s3://ab/x", "s3://bad_bucket/x",
                          "s3://-bucket/x", "s3://bucket-/x", "s3://my..bucket/x",
                          "s3://" "a234567890123456789012345678901234567890123456789012345678901234"}) {
    Result<std::unique_ptr<StorageDriver>> d = OpenStorage(url);
    EXPECT_FALSE(d.ok()) << url;
    if (!d.ok()) EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << url;
  }
  for (const char* url : {"s3://abc", "s3://my.bucket-1/x", "s3://0bucket9/x"})
    EXPECT_TRUE(OpenStorage(url).ok()) << url;
}

TEST(ObjectUrlTest, KeysAreEncodedPerSegment) {
  EXPECT_EQ(io::s3_internal::EncodeKey("a/b/c.lss"), "a/b/c.lss");
  EXPECT_EQ(io::s3_internal::EncodeKey("runs 1/x+y%z/é"), "runs%201/x%2By%25z/%C3%A9");
  EXPECT_EQ(io::s3_internal::EncodeKey("v1.2/..hidden/~u_-"), "v1.2/..hidden/~u_-");
  EXPECT_EQ(io::s3_internal::EncodeKey(""), "");
  io::S3Config config;
  config.endpoint = "http://127.0.0.1:9";
  config.path_style = true;
  Result<std::unique_ptr<io::S3Client>> client = io::S3Client::Create(config);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->UrlOf(io::S3Url{"bucket", "a b/c?d#e"}),
            "http://127.0.0.1:9/bucket/a%20b/c%3Fd%23e");
}

TEST(StorageDriverTest, OperationsNeedingLocalFilesAreRefusedBeforeAnythingIsMade) {
  StagingEnv env;
  testing::TempDir tmp;
  const std::string url = "s3://my-bucket/ds";
  ExpectRefused(Writer::OpenForAppend(url).status(), StatusCode::kUnsupported, url,
                "appending to an s3:// dataset is not supported");
  ExpectRefused(UpgradeIndex(url).status(), StatusCode::kUnsupported, url,
                "upgrade rewrites a local directory");
  ExpectRefused(JoinParts(url, 2).status(), StatusCode::kUnsupported, url,
                "parts are joined locally");
  const fs::path out = tmp / "merged";
  ExpectRefused(MergeDatasets(out.string(), {url}), StatusCode::kUnsupported, url,
                "merge reads local parts only");
  EXPECT_FALSE(fs::exists(out));
  // A malformed URL is refused by every entry point, naming it, before any request.
  const std::string bad = "s3://my-bucket/../other";
  ExpectRefused(Dataset::Open(bad).status(), StatusCode::kInvalidArgument, bad, "'..'");
  ExpectRefused(Writer::Create(bad, Schema{}).status(), StatusCode::kInvalidArgument, bad, "'..'");
  ExpectRefused(MergeDatasets(bad, {out.string()}), StatusCode::kInvalidArgument, bad, "'..'");
  ExpectRefused(DatasetLock::Acquire(bad).status(), StatusCode::kInvalidArgument, bad, "'..'");
  EXPECT_TRUE(fs::is_empty(env.path()));
}

TEST(StorageDriverTest, TheLockOfAUrlIsItsStagingDirectorysLock) {
  StagingEnv env;
  Result<std::shared_ptr<const DatasetLock>> lock = DatasetLock::Acquire("s3://my-bucket/ds/");
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  const fs::path staging = env.path() / "my-bucket/ds";
  EXPECT_EQ((*lock)->dir(), staging.string());
  EXPECT_TRUE((*lock)->Covers(staging.string()));
  EXPECT_TRUE(fs::exists(staging / DatasetLock::kFileName));
  // Held: a second writer of the URL, or of its staging directory, is refused at once.
  EXPECT_EQ(DatasetLock::Acquire("s3://my-bucket/ds").status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(DatasetLock::Acquire(staging.string()).status().code(), StatusCode::kAlreadyExists);
}

// The second store, end to end through the same driver: memory:// is written (staged, uploaded,
// published with the manifest last), followed (whole once its manifest is there) and read
// through the node-local cache exactly as s3:// is.
TEST(StorageDriverTest, TheMemoryStoreIsWrittenFollowedAndReadLikeAnyStore) {
  StagingEnv env;
  testing::TempDir tmp;
  const std::string url = "memory://driver-test/run1";
  DatasetOptions o;
  o.cache_dir = (tmp / "cache").string();
  Result<std::unique_ptr<StorageDriver>> d = OpenStorage(url, o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->info().driver, "memory");
  EXPECT_EQ((*d)->info().work_dir, (env.path() / "_memory/driver-test/run1").string());
  EXPECT_FALSE((*d)->info().local_files);
  Result<std::unique_ptr<DatasetFollower>> follower = DatasetFollower::Open(url, o);
  ASSERT_TRUE(follower.ok()) << follower.status().ToString();
  EXPECT_FALSE((*follower)->progress().complete);
  EXPECT_NE((*follower)->progress().waiting_for.find("manifest.json"), std::string::npos);
  {
    WriterOptions w = testing::FastOptions();
    w.shard_size = 16 << 10;
    auto writer = Writer::Create(url, testing::EagleSchema(), w);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    for (uint64_t i = 0; i < 12; ++i)
      ASSERT_TRUE((*writer)->Append(testing::StandardSample(i).input).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  EXPECT_TRUE(objstore::MemoryServer::Global()->Has("driver-test", "run1/manifest.json"));
  EXPECT_FALSE(fs::exists(env.path() / "_memory/driver-test/run1"));  // released once checked
  ASSERT_TRUE((*follower)->Poll().ok());
  EXPECT_TRUE((*follower)->progress().complete);
  Result<std::shared_ptr<Dataset>> followed = (*follower)->Snapshot();
  ASSERT_TRUE(followed.ok()) << followed.status().ToString();
  Result<std::shared_ptr<Dataset>> ds = Dataset::Open(url, o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  for (const std::shared_ptr<Dataset>& each : {*ds, *followed}) {
    ASSERT_EQ(each->size(), 12u);
    for (uint64_t i = 0; i < 12; ++i) {
      Result<Sample> s = each->Read(i);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      testing::ExpectSampleEq(*s, testing::StandardSample(i));
    }
  }
  // A second write to the same URL is refused: the dataset there is never replaced.
  EXPECT_EQ(Writer::Create(url, testing::EagleSchema()).status().code(),
            StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace libshard::storage
