// The object-store interface (objstore/object_store.h): the same contract checked against every
// store of the table, in-process: memory:// itself, and s3:// and gs:// (the stores of the S3
// dialect) through the S3 client and its transport against the S3 front (testutil/fake_s3.h)
// over a memory store's server. Then the
// memory store's fault rules, as the cache and upload tests use them.
#include "objstore/object_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <string>
#include <vector>

#include "objstore/md5.h"
#include "objstore/memory_store.h"
#include "testutil/fake_s3.h"

namespace libshard::objstore {
namespace {

class ObjectStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const auto& [k, v] : std::vector<std::pair<const char*, const char*>>{
             {"AWS_ENDPOINT_URL_S3", testing::kS3Endpoint},
             {"AWS_ACCESS_KEY_ID", "test"},
             {"AWS_SECRET_ACCESS_KEY", "test"},
             {"AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"},
             {"AWS_CONFIG_FILE", "/nonexistent"},
             {"LIBSHARD_GS_ENDPOINT", testing::kS3Endpoint},
             {"GS_ACCESS_KEY_ID", "test"},
             {"GS_SECRET_ACCESS_KEY", "test"},
             {"LIBSHARD_S3_MAX_ATTEMPTS", "2"},
             {"LIBSHARD_S3_BACKOFF_MS", "1"}})
      ::setenv(k, v, 1);
    if (GetParam() == "s3" || GetParam() == "gs") {
      server_ = MemoryServer::Make();
      front_ = testing::ServeS3(server_);
      Result<std::shared_ptr<ObjectStore>> s = OpenStore(GetParam() + "://bkt/ds");
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      store_ = *s;
    } else {
      server_ = MemoryServer::Make();
      Result<std::shared_ptr<ObjectStore>> s = OpenMemoryStore("memory://bkt/ds", server_);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      store_ = *s;
    }
  }
  void TearDown() override {
    for (const char* k : {"AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                          "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                          "LIBSHARD_GS_ENDPOINT", "GS_ACCESS_KEY_ID", "GS_SECRET_ACCESS_KEY",
                          "LIBSHARD_S3_MAX_ATTEMPTS", "LIBSHARD_S3_BACKOFF_MS"})
      ::unsetenv(k);
  }
  std::string ReadRange(const std::string& name, uint64_t offset, uint64_t length,
                        const std::string& if_generation, Status* st) {
    std::string out(length, '\0');
    *st = store_->Read(name, offset, length, if_generation, out.data());
    return out;
  }

  std::shared_ptr<MemoryServer> server_;
  std::unique_ptr<testing::S3Front> front_;
  std::shared_ptr<ObjectStore> store_;
};

TEST_P(ObjectStoreTest, WriteHeadReadAndRanges) {
  const std::string data = "0123456789abcdefghij";
  Result<ObjectInfo> put = store_->Write("obj", data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->generation, QuotedMd5(data));  // both stores name bytes by their MD5
  EXPECT_EQ(server_->Get("bkt", "ds/obj"), data);  // the key under the store's prefix
  Result<ObjectInfo> head = store_->Head("obj");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->size, data.size());
  EXPECT_EQ(head->generation, put->generation);
  Status st;
  EXPECT_EQ(ReadRange("obj", 3, 5, head->generation, &st), "34567");
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ReadRange("obj", 15, 5, "", &st), "fghij");
  EXPECT_TRUE(st.ok()) << st.ToString();
  Result<ObjectBody> whole = store_->ReadWhole("obj", 1 << 20);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->data, data);
  EXPECT_EQ(whole->generation, head->generation);
  EXPECT_EQ(store_->ReadWhole("obj", 4).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(store_->UrlOf("obj"), GetParam() + "://bkt/ds/obj");
  EXPECT_EQ(store_->KeyWhere("obj"), "bucket bkt, key ds/obj");
}

TEST_P(ObjectStoreTest, MissingObjectsAreNotFound) {
  EXPECT_EQ(store_->Head("none").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ReadWhole("none", 100).status().code(), StatusCode::kNotFound);
  Status st;
  ReadRange("none", 0, 4, "", &st);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->Delete("none").ok());
}

TEST_P(ObjectStoreTest, AReadOnAGenerationRefusesAReplacedObject) {
  ASSERT_TRUE(store_->Write("obj", "first version").ok());
  const std::string first = store_->Head("obj")->generation;
  ASSERT_TRUE(store_->Write("obj", "second version").ok());
  Status st;
  ReadRange("obj", 0, 5, first, &st);
  EXPECT_EQ(st.sys_errno(), ESTALE) << st.ToString();
  EXPECT_NE(st.message().find("replaced"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("bkt/ds/obj"), std::string::npos) << st.message();  // the URL
}

TEST_P(ObjectStoreTest, AWriteIfAbsentRefusesAnExistingObject) {
  WriteOptions o;
  o.if_absent = true;
  ASSERT_TRUE(store_->Write("once", "a", o).ok());
  Result<ObjectInfo> again = store_->Write("once", "b", o);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists) << again.status().ToString();
  EXPECT_EQ(server_->Get("bkt", "ds/once"), "a");
}

TEST_P(ObjectStoreTest, AWrongContentMd5IsRefused) {
  WriteOptions o;
  o.content_md5 = Md5Base64("other bytes");
  EXPECT_FALSE(store_->Write("obj", "these bytes", o).ok());
  EXPECT_FALSE(server_->Has("bkt", "ds/obj"));
  o.content_md5 = Md5Base64("these bytes");
  EXPECT_TRUE(store_->Write("obj", "these bytes", o).ok());
}

TEST_P(ObjectStoreTest, ListAndDelete) {
  for (const char* n : {"shard-00001.lss", "shard-00000.lss", "index.lsi"})
    ASSERT_TRUE(store_->Write(n, n).ok());
  server_->Put("bkt", "other/shard-00009.lss", "not under the prefix");
  server_->Put("bkt", "dsx/shard-00008.lss", "a longer prefix, not this one");
  Result<std::vector<ListEntry>> all = store_->List("");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].name, "index.lsi");
  EXPECT_EQ((*all)[1].name, "shard-00000.lss");
  EXPECT_EQ((*all)[1].size, 15u);
  EXPECT_EQ((*all)[1].generation, QuotedMd5("shard-00000.lss"));
  Result<std::vector<ListEntry>> shards = store_->List("shard-");
  ASSERT_TRUE(shards.ok());
  EXPECT_EQ(shards->size(), 2u);
  EXPECT_EQ(store_->List("", 2).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(store_->Delete("index.lsi").ok());
  EXPECT_EQ(store_->List("")->size(), 2u);
}

TEST_P(ObjectStoreTest, MultipartUploadIsInvisibleUntilCompleted) {
  Result<std::string> id = store_->BeginUpload("big");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const std::string p1(5000, 'x'), p2 = "tail";
  Result<ObjectInfo> a = store_->WritePart("big", *id, 1, p1, Md5Base64(p1));
  Result<ObjectInfo> b = store_->WritePart("big", *id, 2, p2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->generation, QuotedMd5(p1));
  EXPECT_EQ(store_->Head("big").status().code(), StatusCode::kNotFound);
  Result<std::vector<PendingUpload>> pending = store_->ListUploads();
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  ASSERT_EQ(pending->size(), 1u);
  EXPECT_EQ((*pending)[0].name, "big");
  EXPECT_EQ((*pending)[0].upload_id, *id);
  Result<std::vector<UploadPart>> parts = store_->ListParts("big", *id);
  ASSERT_TRUE(parts.ok());
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[1].size, 4u);
  Result<ObjectInfo> done = store_->CompleteUpload("big", *id, *parts);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->generation.ends_with("-2\"")) << done->generation;
  EXPECT_EQ(server_->Get("bkt", "ds/big"), p1 + p2);
  EXPECT_EQ(store_->ListParts("big", *id).status().code(), StatusCode::kNotFound);
  // An aborted upload is gone.
  Result<std::string> other = store_->BeginUpload("aborted");
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(store_->AbortUpload("aborted", *other).ok());
  EXPECT_TRUE(store_->ListUploads()->empty());
}

TEST_P(ObjectStoreTest, FaultRulesApplyToTheCallsTheyMatch) {
  const std::string data(1000, 'd');
  ASSERT_TRUE(store_->Write("obj", data).ok());
  const std::string gen = store_->Head("obj")->generation;
  FaultRule r;
  r.method = "GET";
  r.faults = {Fault::kCorrupt};
  r.arg = 10;
  server_->AddFault(r);
  Status st;
  std::string got = ReadRange("obj", 0, 100, gen, &st);
  ASSERT_TRUE(st.ok()) << st.ToString();  // no transfer check can see a flipped byte
  EXPECT_NE(got[10], 'd');
  EXPECT_EQ(server_->FaultsApplied(), 1u);
  // An error reply the S3 client retries (up to LIBSHARD_S3_MAX_ATTEMPTS=2); the store's own
  // answer for the memory store.
  r.faults = {Fault::kError};
  r.arg = UINT64_MAX;  // 503
  r.times = -1;
  server_->AddFault(r);
  ReadRange("obj", 0, 100, gen, &st);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("503"), std::string::npos) << st.message();
  server_->ClearFaults();
  // No generation, and the condition ignored: another version's bytes, and nothing tells.
  ASSERT_TRUE(store_->Write("obj", std::string(1000, 'e')).ok());
  r.faults = {Fault::kIgnoreCondition, Fault::kNoGeneration};
  r.method.clear();
  server_->AddFault(r);
  got = ReadRange("obj", 0, 4, gen, &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, "eeee");
  EXPECT_EQ(store_->Head("obj")->generation, "");
  server_->ClearFaults();
  // A replica that lags: the previous version's bytes under the current generation.
  r.faults = {Fault::kStale};
  r.method = "GET";
  r.times = 1;
  server_->AddFault(r);
  got = ReadRange("obj", 0, 4, store_->Head("obj")->generation, &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, "dddd");
  // A call cut short is an error, never short bytes.
  r.faults = {Fault::kCut};
  r.times = -1;
  server_->AddFault(r);
  ReadRange("obj", 0, 100, "", &st);
  EXPECT_FALSE(st.ok());
  server_->ClearFaults();
  // Counted: every call, and the ranged reads delivered whole.
  EXPECT_GE(server_->Requests("GET", "ds/obj"), 5u);
  EXPECT_GE(server_->RangedGets("ds/obj"), 3u);
}

INSTANTIATE_TEST_SUITE_P(Stores, ObjectStoreTest, ::testing::Values("memory", "s3", "gs"),
                         [](const auto& info) { return info.param; });

TEST(StoreTableTest, ChosenByScheme) {
  EXPECT_TRUE(HasStore("s3"));
  EXPECT_TRUE(HasStore("memory"));
  EXPECT_TRUE(HasStore("gs"));
  EXPECT_FALSE(HasStore("az"));
  EXPECT_EQ(StoreSchemes(), "s3://, gs://, memory://");
  Result<std::shared_ptr<ObjectStore>> az = OpenStore("az://bucket/x");
  EXPECT_EQ(az.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(az.status().message().find("no object store for az://"), std::string::npos);
  // Each store checks its own names: S3's bucket rules for s3://, Cloud Storage's for gs://
  // ('_' allowed), none but the URL's for memory.
  EXPECT_EQ(OpenStore("s3://Bad_Bucket/x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenStore("s3://bad_bucket/x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(OpenStore("gs://good_bucket/x").ok());
  EXPECT_EQ(OpenStore("gs://Bad_Bucket/x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(OpenStore("memory://Any_Name/x").ok());
  EXPECT_EQ(OpenStore("memory://b/../x").status().code(), StatusCode::kInvalidArgument);
  // The process's memory store: what one store writes another of the same URL reads.
  Result<std::shared_ptr<ObjectStore>> a = OpenStore("memory://shared-bucket/p");
  Result<std::shared_ptr<ObjectStore>> b = OpenStore("memory://shared-bucket/p");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Write("x", "seen").ok());
  EXPECT_EQ((*b)->ReadWhole("x", 10)->data, "seen");
  EXPECT_EQ(MemoryServer::Global()->Get("shared-bucket", "p/x"), "seen");
}

}  // namespace
}  // namespace libshard::objstore
