// The gs:// store (objstore/gcs_store.cc) without a network: its URLs and Cloud Storage's bucket
// rules, and its configuration (GS_ACCESS_KEY_ID / GS_SECRET_ACCESS_KEY, LIBSHARD_GS_ENDPOINT,
// LIBSHARD_GS_ADDRESSING, region "auto"), read apart from s3://'s (no AWS_ variable). The store's
// calls are object_store_test.cc's contract (the "gs" instance); end to end against a real
// server on loopback: tests/python/test_gs.py.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "io/s3_client.h"
#include "objstore/object_store.h"
#include "objstore/s3_dialect_store.h"

namespace libshard::objstore {
namespace {

class GcsStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
    // What s3:// would read: never gs://'s.
    setenv("AWS_ACCESS_KEY_ID", "AKIAAWS", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "aws-secret", 1);
    setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1", 1);
    setenv("AWS_REGION", "eu-west-3", 1);
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
  }
  static constexpr const char* kVars[] = {
      "GS_ACCESS_KEY_ID",      "GS_SECRET_ACCESS_KEY", "LIBSHARD_GS_ENDPOINT",
      "LIBSHARD_GS_ADDRESSING", "AWS_ACCESS_KEY_ID",   "AWS_SECRET_ACCESS_KEY",
      "AWS_ENDPOINT_URL_S3",   "AWS_REGION",           "LIBSHARD_S3_MAX_ATTEMPTS"};
};

TEST_F(GcsStoreTest, UrlsAndBucketRules) {
  Result<std::shared_ptr<ObjectStore>> s = OpenStore("gs://my-bucket/runs/r1/");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->url().scheme, "gs");
  EXPECT_EQ((*s)->url().bucket, "my-bucket");
  EXPECT_EQ((*s)->url().prefix, "runs/r1");
  EXPECT_EQ((*s)->url().ToString(), "gs://my-bucket/runs/r1");
  EXPECT_EQ((*s)->identity(), "https://storage.googleapis.com");
  // Cloud Storage's names: '_' and dotted names of up to 222 characters (parts of 1-63).
  const std::vector<std::string> good = {"a_b", "abc", "a.b.c", "my.bucket.example.com", "1-2_3",
                                         std::string(63, 'a') + "." + std::string(63, 'b')};
  for (const std::string& ok : good)
    EXPECT_TRUE(OpenStore("gs://" + ok + "/x").ok()) << ok;
  const std::vector<std::string> refused = {
      "ab",        "Abc",         "-abc",      "abc-",           "abc_",
      "a..b",      "a b",         std::string(64, 'a'), std::string(64, 'a') + ".b",
      "192.168.5.4", "goog-data", "my-google-data", "a$b"};
  for (const std::string& bad : refused) {
    Status st = OpenStore("gs://" + bad + "/x").status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("not a valid Cloud Storage bucket name"), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("gs://BUCKET/PREFIX"), std::string::npos) << st.message();
  }
  // The rules every object-store URL follows, with gs:// in the advice.
  Status dots = OpenStore("gs://b-1/a/../x").status();
  EXPECT_EQ(dots.code(), StatusCode::kInvalidArgument);
  Status empty = OpenStore("gs:///x").status();
  EXPECT_NE(empty.message().find("write gs://BUCKET/PREFIX"), std::string::npos)
      << empty.message();
}

TEST_F(GcsStoreTest, ConfigurationIsCloudStoragesOwn) {
  // No HMAC key: anonymous requests (public buckets), whatever AWS_* holds; Cloud Storage's
  // endpoint, path-style, region "auto".
  Result<io::S3Config> c = LoadGcsConfig();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->access_key.empty() && c->secret_key.empty());
  EXPECT_NE(c->source.find("anonymous"), std::string::npos);
  EXPECT_NE(c->source.find("GS_ACCESS_KEY_ID"), std::string::npos);
  EXPECT_EQ(c->endpoint, "https://storage.googleapis.com");
  EXPECT_EQ(c->region, "auto");
  EXPECT_TRUE(c->path_style);
  EXPECT_EQ(c->reload, &LoadGcsConfig);
  EXPECT_NE(c->credential_hint.find("GS_ACCESS_KEY_ID / GS_SECRET_ACCESS_KEY"), std::string::npos);
  EXPECT_NE(c->credential_hint.find("gs://"), std::string::npos);
  EXPECT_EQ(c->credential_hint.find("AWS_"), std::string::npos);
  Result<std::unique_ptr<io::S3Client>> client = io::S3Client::Create(*c);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->UrlOf({"my_bucket", "p/shard 1.lss"}),
            "https://storage.googleapis.com/my_bucket/p/shard%201.lss");

  setenv("GS_ACCESS_KEY_ID", "GOOG1EXAMPLE", 1);
  setenv("GS_SECRET_ACCESS_KEY", "hmac-secret", 1);
  setenv("LIBSHARD_GS_ENDPOINT", "http://127.0.0.1:4443/", 1);
  setenv("LIBSHARD_S3_MAX_ATTEMPTS", "3", 1);  // the client's bounds are the dialect's
  c = LoadGcsConfig();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key, "GOOG1EXAMPLE");
  EXPECT_EQ(c->secret_key, "hmac-secret");
  EXPECT_TRUE(c->session_token.empty());
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:4443");
  EXPECT_EQ(c->max_attempts, 3u);
  EXPECT_EQ(c->source, "the environment (GS_ACCESS_KEY_ID)");
  setenv("LIBSHARD_GS_ADDRESSING", "virtual", 1);
  c = LoadGcsConfig();
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->path_style);
  // The store's identity (what the cache keys on) is the endpoint.
  Result<std::shared_ptr<ObjectStore>> s = OpenStore("gs://bkt/p");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->identity(), "http://127.0.0.1:4443");
}

TEST_F(GcsStoreTest, BadSettingsNameGsAndTheVariable) {
  setenv("GS_ACCESS_KEY_ID", "GOOG1EXAMPLE", 1);
  Status st = LoadGcsConfig().status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("gs://: GS_ACCESS_KEY_ID is set but GS_SECRET_ACCESS_KEY is not"),
            std::string::npos) << st.message();
  unsetenv("GS_ACCESS_KEY_ID");
  setenv("GS_SECRET_ACCESS_KEY", "s", 1);
  st = LoadGcsConfig().status();
  EXPECT_NE(st.message().find("GS_SECRET_ACCESS_KEY is set but GS_ACCESS_KEY_ID is not"),
            std::string::npos) << st.message();
  setenv("GS_ACCESS_KEY_ID", "GOOG1EXAMPLE", 1);
  setenv("LIBSHARD_GS_ENDPOINT", "127.0.0.1:4443", 1);
  st = LoadGcsConfig().status();
  EXPECT_NE(st.message().find("'LIBSHARD_GS_ENDPOINT' = '127.0.0.1:4443' is not an endpoint: "
                              "write http://HOST[:PORT] or https://HOST[:PORT]"),
            std::string::npos) << st.message();
  unsetenv("LIBSHARD_GS_ENDPOINT");
  setenv("LIBSHARD_GS_ADDRESSING", "sideways", 1);
  st = LoadGcsConfig().status();
  EXPECT_NE(st.message().find("LIBSHARD_GS_ADDRESSING"), std::string::npos) << st.message();
  // A bad setting is the error of every call, not of opening the store (a location can be
  // described without it).
  Result<std::shared_ptr<ObjectStore>> s = OpenStore("gs://bkt/p");
  ASSERT_TRUE(s.ok());
  Status head = (*s)->Head("manifest.json").status();
  EXPECT_NE(head.message().find("LIBSHARD_GS_ADDRESSING"), std::string::npos) << head.message();
}

}  // namespace
}  // namespace libshard::objstore
