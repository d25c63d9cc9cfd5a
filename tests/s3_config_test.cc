// io/s3_client.h without a network: where credentials, region and endpoint come from
// (environment, then the shared credentials/config files), and the addressing style. s3:// URLs
// are the storage driver's (storage_driver_test.cc). The requests themselves are tested against
// a real S3 server in tests/python/test_s3.py.
#include "io/s3_client.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>

namespace libshard::io {
namespace {

class S3ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                          "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
                          "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "LIBSHARD_S3_ADDRESSING",
                          "LIBSHARD_S3_MAX_ATTEMPTS"})
      unsetenv(v);
    dir_ = std::filesystem::temp_directory_path() /
           ("s3_config_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    setenv("AWS_SHARED_CREDENTIALS_FILE", (dir_ / "credentials").c_str(), 1);
    setenv("AWS_CONFIG_FILE", (dir_ / "config").c_str(), 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const char* name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(S3ConfigTest, EnvironmentFirst) {
  setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
  setenv("AWS_SESSION_TOKEN", "tok", 1);
  setenv("AWS_REGION", "eu-west-3", 1);
  Write("credentials", "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = f\n");
  Result<S3Config> c = LoadS3Config();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key, "AKIAENV");
  EXPECT_EQ(c->secret_key, "envsecret");
  EXPECT_EQ(c->session_token, "tok");
  EXPECT_EQ(c->region, "eu-west-3");
  EXPECT_EQ(c->endpoint, "https://s3.eu-west-3.amazonaws.com");
  EXPECT_FALSE(c->path_style);  // AWS: virtual-host
  Result<std::unique_ptr<S3Client>> client = S3Client::Create(*c);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->UrlOf({"bkt", "p/shard 1.lss"}),
            "https://bkt.s3.eu-west-3.amazonaws.com/p/shard%201.lss");
  EXPECT_EQ((*client)->UrlOf({"a.b.c", "k"}), "https://s3.eu-west-3.amazonaws.com/a.b.c/k");
}

TEST_F(S3ConfigTest, ProfileFromTheFiles) {
  Write("credentials",
        "[default]\naws_access_key_id = AKIADEF\naws_secret_access_key = d\n"
        "[work]\naws_access_key_id = AKIAWORK\naws_secret_access_key = w\n"
        "aws_session_token = wt\n");
  Write("config",
        "[profile work]\nregion = ap-south-1\nendpoint_url = http://127.0.0.1:9000/\n"
        "s3 =\n  addressing_style = virtual\n");
  Result<S3Config> c = LoadS3Config();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->access_key, "AKIADEF");
  EXPECT_EQ(c->region, "us-east-1");
  setenv("AWS_PROFILE", "work", 1);
  c = LoadS3Config();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key, "AKIAWORK");
  EXPECT_EQ(c->session_token, "wt");
  EXPECT_EQ(c->region, "ap-south-1");
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:9000");
  EXPECT_FALSE(c->path_style);  // the profile's s3.addressing_style
  setenv("LIBSHARD_S3_ADDRESSING", "path", 1);
  c = LoadS3Config();
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->path_style);
  Result<std::unique_ptr<S3Client>> client = S3Client::Create(*c);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->UrlOf({"bkt", "k"}), "http://127.0.0.1:9000/bkt/k");
  setenv("AWS_PROFILE", "nosuch", 1);
  EXPECT_EQ(LoadS3Config().status().code(), StatusCode::kNotFound);
}

TEST_F(S3ConfigTest, CustomEndpointIsPathStyleAndBoundsAreChecked) {
  setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1", 1);
  setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2", 1);
  setenv("LIBSHARD_S3_MAX_ATTEMPTS", "100000", 1);
  // Out of its bounds: an error naming the variable, not a value clamped in silence.
  Status bad = LoadS3Config().status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("'LIBSHARD_S3_MAX_ATTEMPTS' = 100000 is out of range; use 1..100"),
            std::string::npos) << bad.ToString();
  setenv("LIBSHARD_S3_MAX_ATTEMPTS", "100", 1);
  Result<S3Config> c = LoadS3Config();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:1");
  EXPECT_TRUE(c->path_style);
  EXPECT_EQ(c->max_attempts, 100u);
  EXPECT_TRUE(c->access_key.empty());  // anonymous
  setenv("AWS_ENDPOINT_URL_S3", "127.0.0.1:1", 1);
  EXPECT_EQ(LoadS3Config().status().code(), StatusCode::kInvalidArgument);
  setenv("AWS_ACCESS_KEY_ID", "AKIA", 1);
  unsetenv("AWS_ENDPOINT_URL_S3");
  EXPECT_EQ(LoadS3Config().status().code(), StatusCode::kInvalidArgument);  // no secret
}

TEST_F(S3ConfigTest, RefusedConnectionIsRetriedBoundedAndNamed) {
  // Nothing listens on port 1 of the loopback: every try is refused at once.
  setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1", 1);
  setenv("LIBSHARD_S3_MAX_ATTEMPTS", "3", 1);
  setenv("LIBSHARD_S3_BACKOFF_MS", "1", 1);
  Result<S3Config> c = LoadS3Config();
  ASSERT_TRUE(c.ok());
  Result<std::unique_ptr<S3Client>> client = S3Client::Create(*c);
  ASSERT_TRUE(client.ok());
  char buf[16];
  Status st = (*client)->GetRange({"bkt", "k"}, 0, sizeof buf, "\"e\"", buf);
  unsetenv("LIBSHARD_S3_BACKOFF_MS");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("http://127.0.0.1:1/bkt/k bytes 0-15"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("failed after 3 attempts"), std::string::npos) << st.message();
  EXPECT_EQ((*client)->stats().requests, 3u);
}

}  // namespace
}  // namespace libshard::io
