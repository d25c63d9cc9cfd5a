// A published dataset's objects checked against what was uploaded (upload_verify.h).
#include "remote/upload_verify.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "objstore/etag_check.h"
#include "objstore/md5.h"

namespace libshard::remote {
namespace {

using objstore::CheckEtag;
using objstore::EtagCheck;
using objstore::EtagOfMd5;
using objstore::Md5;
using objstore::Md5Base64;
using objstore::SameEtag;

Status CheckOne(const Uploader& up, const std::string& name, uint64_t size) {
  const std::string url = up.prefix() + "/" + name;
  std::optional<objstore::ObjectInfo> recorded = up.Finished(name);
  if (!recorded) return Status::Internal(url + ": checked, but never uploaded");
  Result<objstore::ObjectInfo> info = up.store().Head(name);
  if (!info.ok()) return info.status().WithContext("checking the uploaded " + url);
  if (info->size != size || recorded->size != size ||
      !SameEtag(info->generation, recorded->generation))
    return Status::Corruption(url + ": the bucket holds " + std::to_string(info->size) +
                              " bytes with ETag " + info->generation + ", but " +
                              std::to_string(size) + " bytes were uploaded, with ETag " +
                              recorded->generation +
                              " (replaced, truncated or damaged in the bucket since)");
  return Status::OK();
}

}  // namespace

Result<CheckedSend> SendChecked(
    std::string_view data, bool check, uint32_t max_attempts, const std::string& where,
    const std::function<Result<objstore::ObjectInfo>(const std::string& content_md5)>& send,
    const std::string& attempts_setting) {
  CheckedSend out;
  if (!check) {
    LIBSHARD_ASSIGN_OR_RETURN(out.reply, send(std::string()));
    return out;
  }
  out.digest = Md5(data);
  const std::string expected = EtagOfMd5(out.digest);
  const std::string header = Md5Base64(out.digest);  // one pass of MD5 over the bytes
  const uint32_t attempts = std::max<uint32_t>(1, max_attempts);
  std::string seen;
  for (uint32_t attempt = 1;; ++attempt) {
    LIBSHARD_ASSIGN_OR_RETURN(out.reply, send(header));
    switch (CheckEtag(out.reply.generation, expected, out.reply.encryption)) {
      case EtagCheck::kMatch:
        out.verified = true;
        return out;
      case EtagCheck::kUnverifiable:
        out.unverifiable = true;
        return out;
      case EtagCheck::kMismatch:
        break;
    }
    ++out.mismatches;
    seen += (seen.empty() ? "" : ", ") + out.reply.generation;
    if (attempt >= attempts)
      return Status::IoError(where + ": the server stored other bytes than were sent, in all " +
                                 std::to_string(attempts) + " attempts (its ETags " + seen +
                                 " are not the MD5 " + expected + " of the bytes sent): the "
                                 "network damages uploads; nothing was committed (" +
                                 attempts_setting + " bounds the tries)",
                             EIO);
  }
}

Status CheckUploaded(const Uploader& up,
                     const std::vector<std::pair<std::string, uint64_t>>& objects,
                     uint32_t threads) {
  std::vector<Status> results(objects.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k = next++; k < objects.size(); k = next++)
      results[k] = CheckOne(up, objects[k].first, objects[k].second);
  };
  const size_t n = std::min<size_t>(objects.size(), std::max<uint32_t>(1, threads));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(worker);
  if (n > 0) worker();
  for (std::thread& t : pool) t.join();
  for (Status& st : results) LIBSHARD_RETURN_IF_ERROR(st);
  return Status::OK();
}

}  // namespace libshard::remote
