// S3Client (io/s3_client.h) in-process against the S3 front (testutil/fake_s3.h) over a memory
// store's server (objstore/memory_store.h): what it retries, what it refuses, and what no client
// can see (the cache's checks catch those: s3_cache_heal_test.cc).
#include "io/s3_client.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "testutil/fake_s3.h"

namespace libshard::io {
namespace {

using objstore::MemoryServer;
using objstore::Fault;
using objstore::FaultRule;

class S3ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = MemoryServer::Make();
    installed_ = testing::ServeS3(server_);
    data_.resize(100000);
    for (size_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<char>(i * 7 + i / 251);
    server_->Put("bkt", "p/obj", data_);
    S3Config c;
    c.endpoint = testing::kS3Endpoint;
    c.max_attempts = 3;
    c.backoff_ms = 1;
    c.source = "test";
    Result<std::unique_ptr<S3Client>> client = S3Client::Create(c);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client).value();
  }

  std::string Range(uint64_t offset, uint64_t length, Status* st,
                    const std::string& if_match = {}) {
    std::string out(length, '\0');
    *st = client_->GetRange(obj_, offset, length, if_match.empty() ? Etag() : if_match, out.data());
    return out;
  }
  std::string Etag() const { return server_->Generation("bkt", "p/obj"); }
  void Inject(std::vector<objstore::Fault> faults, int times = 1, std::string method = "GET") {
    FaultRule r;
    r.faults = std::move(faults);
    r.method = std::move(method);
    r.times = times;
    server_->AddFault(r);
  }

  std::shared_ptr<MemoryServer> server_;
  std::unique_ptr<testing::S3Front> installed_;
  std::unique_ptr<S3Client> client_;
  std::string data_;
  const S3Url obj_{"bkt", "p/obj"};
};

TEST_F(S3ClientTest, HeadAndRanges) {
  Result<ObjectInfo> info = client_->Head(obj_);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, data_.size());
  EXPECT_EQ(info->etag, Etag());
  Status st;
  EXPECT_EQ(Range(4096, 8192, &st), data_.substr(4096, 8192));
  EXPECT_TRUE(st.ok()) << st.ToString();
  Result<S3Client::Body> whole = client_->GetObject(obj_, 1 << 20);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->data, data_);
  EXPECT_EQ(whole->etag, Etag());
  Result<ObjectInfo> missing = client_->Head({"bkt", "p/none"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST_F(S3ClientTest, TransientFaultsAreRetried) {
  for (Fault f : {Fault::kError, Fault::kDrop, Fault::kCut, Fault::kStall,
                    Fault::kNoContentRange, Fault::kIgnoreRange}) {
    Inject({f});
    const uint64_t retries = client_->stats().retries;
    Status st;
    EXPECT_EQ(Range(8192, 4096, &st), data_.substr(8192, 4096)) << static_cast<int>(f);
    EXPECT_TRUE(st.ok()) << static_cast<int>(f) << ": " << st.ToString();
    EXPECT_GT(client_->stats().retries, retries) << static_cast<int>(f);
  }
  EXPECT_EQ(server_->FaultsApplied(), 6u);
}

TEST_F(S3ClientTest, PersistentFaultsFailNamingTheRange) {
  Inject({Fault::kError}, -1);
  Status st;
  Range(0, 4096, &st);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("bytes 0-4095"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("failed after 3 attempts"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("503 SlowDown"), std::string::npos) << st.ToString();
  server_->ClearFaults();
  Inject({Fault::kCut}, -1);
  Range(0, 4096, &st);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("bytes remaining"), std::string::npos) << st.ToString();
}

TEST_F(S3ClientTest, ReplacedObjectIsRefused) {
  const std::string old = Etag();
  server_->Put("bkt", "p/obj", data_ + "x");
  Status st;
  Range(0, 4096, &st, old);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_EQ(st.sys_errno(), ESTALE) << st.ToString();
  // A server that ignores If-Match but says which version it served: refused too.
  Inject({Fault::kIgnoreCondition});
  Range(0, 4096, &st, old);
  EXPECT_EQ(st.sys_errno(), ESTALE) << st.ToString();
  EXPECT_NE(st.message().find("replaced"), std::string::npos) << st.ToString();
}

TEST_F(S3ClientTest, WhatNoClientCanSee) {
  // A body damaged on the way, a server that ignores If-Match and hides the version, a body cut
  // short without a Content-Length: each looks like a good reply. The cache checks these
  // against the dataset's own checksums and sizes (docs/CACHE.md §7).
  Inject({Fault::kCorrupt});
  Status st;
  EXPECT_NE(Range(0, 4096, &st), data_.substr(0, 4096));
  EXPECT_TRUE(st.ok());
  Inject({Fault::kCutUnmarked});
  Result<S3Client::Body> cut = client_->GetObject(obj_, 1 << 20);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->data.size(), data_.size() / 2);
}

TEST_F(S3ClientTest, BodyLargerThanAskedIsRefused) {
  Result<S3Client::Body> body = client_->GetObject(obj_, 1000);
  EXPECT_EQ(body.status().code(), StatusCode::kCorruption);
}

TEST_F(S3ClientTest, Uploads) {
  Result<ObjectInfo> etag = client_->Put({"bkt", "p/small"}, "hello", "XUFAKrxLKna5cZ2REBfFkg==");
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(etag->etag, "\"5d41402abc4b2a76b9719d911017c592\"");  // the MD5 of "hello"
  EXPECT_EQ(server_->Get("bkt", "p/small"), "hello");
  // A Content-MD5 that does not match the body: refused by the server (400 BadDigest).
  Result<ObjectInfo> bad = client_->Put({"bkt", "p/small2"}, "hellp", "XUFAKrxLKna5cZ2REBfFkg==");
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(server_->Has("bkt", "p/small2"));

  const S3Url big{"bkt", "p/big"};
  Result<std::string> id = client_->CreateMultipartUpload(big);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  Result<ObjectInfo> p1 = client_->UploadPart(big, *id, 1, data_.substr(0, 60000));
  Result<ObjectInfo> p2 = client_->UploadPart(big, *id, 2, data_.substr(60000));
  ASSERT_TRUE(p1.ok() && p2.ok());
  Result<std::vector<S3Client::Part>> listed = client_->ListParts(big, *id);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].etag, p1->etag);
  EXPECT_EQ(p1->size, 60000u);
  EXPECT_EQ((*listed)[1].size, data_.size() - 60000);
  Result<std::vector<S3Client::Upload>> open = client_->ListMultipartUploads("bkt", "p/");
  ASSERT_TRUE(open.ok());
  ASSERT_EQ(open->size(), 1u);
  EXPECT_EQ((*open)[0].upload_id, *id);
  Result<ObjectInfo> done = client_->CompleteMultipartUpload(big, *id, *listed);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(server_->Get("bkt", "p/big"), data_);
  EXPECT_EQ(client_->ListParts(big, *id).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace libshard::io
