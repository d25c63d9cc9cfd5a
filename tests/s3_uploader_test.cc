// The Uploader (remote/uploader.h) in-process against the S3 front (testutil/fake_s3.h) over a
// memory store's server (objstore/memory_store.h), and against the memory store itself: single PUTs
// and multipart uploads through transient faults, and a resume that sends no part twice.
// tests/python/test_s3_write.py runs the uploads against a real S3 server.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "objstore/object_store.h"
#include "remote/uploader.h"
#include "testutil/fake_s3.h"
#include "testutil/testutil.h"

namespace libshard::remote {
namespace {

using objstore::MemoryServer;
using objstore::Fault;
using objstore::FaultRule;

class S3UploaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("AWS_ENDPOINT_URL_S3", testing::kS3Endpoint, 1);
    ::setenv("AWS_ACCESS_KEY_ID", "test", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "test", 1);
    ::setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
    ::setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
    ::setenv("LIBSHARD_S3_BACKOFF_MS", "1", 1);
    server_ = MemoryServer::Make();
    installed_ = testing::ServeS3(server_);
    big_.resize(50000);
    for (size_t i = 0; i < big_.size(); ++i) big_[i] = static_cast<char>(i * 31 + i / 97);
    testing::WriteStringToFile(dir_ / "big.bin", big_);
    testing::WriteStringToFile(dir_ / "small.bin", "small object");
    options_.part_size = 8192;  // 7 parts for big.bin
    options_.threads = 3;
  }
  void TearDown() override {
    for (const char* k :
         {"AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
          "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "LIBSHARD_S3_BACKOFF_MS"})
      ::unsetenv(k);
  }
  std::unique_ptr<Uploader> Open(bool fresh) {
    Result<std::shared_ptr<objstore::ObjectStore>> store = objstore::OpenStore("s3://bkt/out");
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return nullptr;
    Result<std::unique_ptr<Uploader>> up =
        Uploader::Open(*store, (dir_ / "stage").string(), fresh, options_);
    EXPECT_TRUE(up.ok()) << up.status().ToString();
    return up.ok() ? std::move(up).value() : nullptr;
  }

  testing::TempDir dir_;
  std::shared_ptr<MemoryServer> server_;
  std::unique_ptr<testing::S3Front> installed_;
  std::string big_;
  UploadOptions options_;
};

TEST_F(S3UploaderTest, UploadsThroughTransientFaults) {
  std::filesystem::create_directories(dir_ / "stage");
  FaultRule r;
  r.method = "PUT";
  for (Fault f : {Fault::kError, Fault::kDrop, Fault::kStall, Fault::kError}) {
    r.faults = {f};
    server_->AddFault(r);
  }
  auto up = Open(/*fresh=*/true);
  ASSERT_NE(up, nullptr);
  up->Enqueue((dir_ / "big.bin").string(), "big.bin");
  up->Enqueue((dir_ / "small.bin").string(), "small.bin");
  Status st = up->Wait();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(server_->Get("bkt", "out/big.bin"), big_);
  EXPECT_EQ(server_->Get("bkt", "out/small.bin"), "small object");
  EXPECT_EQ(server_->FaultsApplied(), 4u);
  EXPECT_EQ(server_->Requests("PUT"), 7u + 1u + 4u);    // 7 parts, 1 object, 4 retried
  EXPECT_EQ(server_->Requests("POST", "big.bin"), 2u);  // create and complete
}

TEST_F(S3UploaderTest, ResumeSendsNoPartTwice) {
  std::filesystem::create_directories(dir_ / "stage");
  {
    // Every part but the last goes up; the last fails for good: the upload stays open.
    ::setenv("LIBSHARD_S3_MAX_ATTEMPTS", "2", 1);
    FaultRule r;
    r.faults = {Fault::kError};
    r.method = "PUT";
    r.part = 7;
    r.times = -1;
    server_->AddFault(r);
    options_.threads = 1;  // parts in order: 1 to 6 are up when 7 fails
    auto up = Open(/*fresh=*/true);
    ASSERT_NE(up, nullptr);
    up->Enqueue((dir_ / "big.bin").string(), "big.bin");
    EXPECT_FALSE(up->Wait().ok());
    ::unsetenv("LIBSHARD_S3_MAX_ATTEMPTS");
  }
  EXPECT_FALSE(server_->Has("bkt", "out/big.bin"));
  server_->ClearFaults();
  server_->ResetCounts();
  options_.threads = 3;
  auto up = Open(/*fresh=*/false);
  ASSERT_NE(up, nullptr);
  up->Enqueue((dir_ / "big.bin").string(), "big.bin");
  Status st = up->Wait();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(server_->Get("bkt", "out/big.bin"), big_);
  EXPECT_EQ(up->stats().parts_skipped, 6u);
  EXPECT_EQ(up->stats().parts_uploaded, 1u);
  EXPECT_EQ(server_->Requests("PUT", "big.bin"), 1u);
}

}  // namespace
}  // namespace libshard::remote
