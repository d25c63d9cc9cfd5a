// The upload path's pieces that need no server: the MD5 of Content-MD5 and part ETags, the
// comparison of a reply's ETag with what was sent, and the staging directory of an s3:// output
// (tests/python/test_s3_write.py covers the uploads against a server).
#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "libshard/storage.h"
#include "objstore/md5.h"
#include "objstore/etag_check.h"
#include "remote/upload_verify.h"

namespace libshard::remote {
namespace {

using namespace libshard::objstore;  // NOLINT: the MD5 and ETag checks under test

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
  auto staging = [](const char* url) -> std::string {
    Result<StorageInfo> info = DescribeStorage(url);
    EXPECT_TRUE(info.ok()) << url << ": " << info.status().ToString();
    return info.ok() ? info->work_dir : std::string();
  };
  EXPECT_EQ(staging("s3://bucket-1/runs/r1"), "/tmp/stage/bucket-1/runs/r1");
  EXPECT_EQ(staging("s3://bucket-1/runs/r1/"), "/tmp/stage/bucket-1/runs/r1");
  EXPECT_EQ(staging("s3://bucket-1"), "/tmp/stage/bucket-1/_root");
  for (const char* bad : {"s3://bucket-1/a/../b", "s3://bucket-1/a//b", "s3://B/x"}) {
    Result<StorageInfo> r = DescribeStorage(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  ::unsetenv("LIBSHARD_S3_STAGING");
}

Md5Digest DigestOf(std::string_view data) { return Md5(data); }

TEST(S3UploadCheck, EtagOfMd5AndMultipart) {
  EXPECT_EQ(EtagOfMd5(DigestOf("abc")), Md5Etag("abc"));
  // S3's multipart ETag: the MD5 of the parts' binary digests, "-N" (verified against moto's and
  // AWS's documented construction: md5(md5(p1) || md5(p2)) = this for p1 = "abc", p2 = "de").
  const Md5Digest a = DigestOf("abc"), b = DigestOf("de");
  std::string both(reinterpret_cast<const char*>(a.data()), 16);
  both.append(reinterpret_cast<const char*>(b.data()), 16);
  const std::string inner = Md5Etag(both);
  EXPECT_EQ(MultipartEtag({a, b}), inner.substr(0, inner.size() - 1) + "-2\"");
}

TEST(S3UploadCheck, ComparesTheReplyWithWhatWasSent) {
  const std::string sent = EtagOfMd5(DigestOf("the bytes sent"));
  const std::string other = EtagOfMd5(DigestOf("the bytes stored"));
  EXPECT_EQ(CheckEtag(sent, sent, ""), EtagCheck::kMatch);
  EXPECT_EQ(CheckEtag(sent, sent, "AES256"), EtagCheck::kMatch);  // SSE-S3 keeps MD5 ETags
  EXPECT_EQ(CheckEtag(other, sent, ""), EtagCheck::kMismatch);
  // Spelled without quotes, upper-case, weak: still the same ETag.
  std::string bare = sent.substr(1, 32);
  for (char& c : bare) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(CheckEtag(bare, sent, ""), EtagCheck::kMatch);
  EXPECT_EQ(CheckEtag("W/" + sent, sent, ""), EtagCheck::kMatch);
  EXPECT_TRUE(SameEtag(bare, sent));
  // ETags that are no MD5s prove nothing either way.
  EXPECT_EQ(CheckEtag(other, sent, "aws:kms"), EtagCheck::kUnverifiable);
  EXPECT_EQ(CheckEtag(other, sent, "aws:kms:dsse"), EtagCheck::kUnverifiable);
  EXPECT_EQ(CheckEtag(other, sent, "SSE-C"), EtagCheck::kUnverifiable);
  EXPECT_EQ(CheckEtag("\"ABwcsNIEIx/3TXD+37wkhu1YIh8AgUg/++I5bsBm9MiQotlGsT\"", sent, ""),
            EtagCheck::kUnverifiable);
  EXPECT_EQ(CheckEtag("", sent, ""), EtagCheck::kUnverifiable);
  // A multipart ETag is of the MD5 form too: compared.
  const std::string multi = MultipartEtag({DigestOf("x"), DigestOf("y")});
  EXPECT_EQ(CheckEtag(multi, multi, ""), EtagCheck::kMatch);
  EXPECT_EQ(CheckEtag(MultipartEtag({DigestOf("x"), DigestOf("z")}), multi, ""),
            EtagCheck::kMismatch);
  EXPECT_EQ(CheckEtag(multi.substr(0, 33) + "-\"", multi, ""), EtagCheck::kUnverifiable);
}

// SendChecked against a server that damages the first `damaged` bodies it gets: in-process, the
// send being a function that stores what "arrived" and answers its MD5 as S3 does.
struct DamagingServer {
  int damaged = 0;
  int received = 0;
  std::string stored;
  Result<objstore::ObjectInfo> Put(std::string_view data, const std::string& content_md5) {
    ++received;
    stored = std::string(data);
    if (received <= damaged) stored[stored.size() / 2] ^= 0x20;
    return objstore::ObjectInfo{stored.size(), Md5Etag(stored), ""};
  }
};

TEST(S3UploadCheck, DamagedBodiesAreSentAgain) {
  const std::string data(100000, 'q');
  DamagingServer server;
  server.damaged = 2;
  std::string md5_sent;
  Result<CheckedSend> r = SendChecked(data, /*check=*/true, 8, "PUT s3://b/p/x",
                                      [&](const std::string& md5) {
                                        md5_sent = md5;
                                        return server.Put(data, md5);
                                      });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(server.received, 3);
  EXPECT_EQ(server.stored, data);
  EXPECT_EQ(r->mismatches, 2u);
  EXPECT_TRUE(r->verified);
  EXPECT_EQ(md5_sent, Md5Base64(data));
  EXPECT_EQ(EtagOfMd5(r->digest), Md5Etag(data));
}

TEST(S3UploadCheck, DamageInEveryAttemptIsAnError) {
  const std::string data(4096, 'q');
  DamagingServer server;
  server.damaged = 100;
  Result<CheckedSend> r = SendChecked(
      data, /*check=*/true, 3, "PUT s3://b/p/shard-00000.lss part 2",
      [&](const std::string& md5) { return server.Put(data, md5); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(server.received, 3);
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("PUT s3://b/p/shard-00000.lss part 2"), std::string::npos) << m;
  EXPECT_NE(m.find("in all 3 attempts"), std::string::npos) << m;
  EXPECT_NE(m.find(Md5Etag(data)), std::string::npos) << m;
}

TEST(S3UploadCheck, UncheckedSendsOnceWithoutMd5) {
  const std::string data(4096, 'q');
  DamagingServer server;
  server.damaged = 1;
  std::string md5_sent = "unset";
  Result<CheckedSend> r = SendChecked(data, /*check=*/false, 8, "PUT x",
                                      [&](const std::string& md5) {
                                        md5_sent = md5;
                                        return server.Put(data, md5);
                                      });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(server.received, 1);
  EXPECT_EQ(md5_sent, "");
  EXPECT_FALSE(r->verified);
}

TEST(S3UploadCheck, ErrorsOfTheSendAreReturned) {
  int calls = 0;
  Result<CheckedSend> r = SendChecked("abc", true, 8, "PUT x", [&](const std::string&) {
    ++calls;
    return Result<objstore::ObjectInfo>(Status::IoError("HTTP 503 SlowDown", 5));
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(calls, 1);  // the client retried already
  EXPECT_NE(r.status().message().find("SlowDown"), std::string::npos);
}

}  // namespace
}  // namespace libshard::remote
