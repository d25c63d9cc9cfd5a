// The memory store and its server (memory_store.h).
#include "objstore/memory_store.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "objstore/md5.h"

namespace libshard::objstore {
namespace {

constexpr std::string_view kScheme = "memory";

std::string Hex(const std::array<uint8_t, 16>& d) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : d) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string Join(const std::string& bucket, const std::string& key) { return bucket + "/" + key; }

}  // namespace

std::string QuotedMd5(std::string_view data) { return "\"" + Hex(Md5(data)) + "\""; }

// ---- MemoryServer ----

std::shared_ptr<MemoryServer> MemoryServer::Make() {
  return std::shared_ptr<MemoryServer>(new MemoryServer());
}

std::shared_ptr<MemoryServer> MemoryServer::Global() {
  static const std::shared_ptr<MemoryServer> server = Make();
  return server;
}

void MemoryServer::Put(const std::string& bucket, const std::string& key, std::string data) {
  Store(bucket, key, std::move(data));
}

bool MemoryServer::Has(const std::string& bucket, const std::string& key) const {
  return Find(bucket, key).has_value();
}

std::string MemoryServer::Get(const std::string& bucket, const std::string& key) const {
  std::optional<Object> o = Find(bucket, key);
  return o ? o->data : std::string();
}

std::string MemoryServer::Generation(const std::string& bucket, const std::string& key) const {
  std::optional<Object> o = Find(bucket, key);
  return o ? o->generation : std::string();
}

void MemoryServer::Remove(const std::string& bucket, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  objects_.erase(Join(bucket, key));
}

void MemoryServer::Damage(const std::string& bucket, const std::string& key, uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  Object& o = objects_.at(Join(bucket, key));
  o.data.at(offset) = static_cast<char>(o.data.at(offset) ^ 0x5a);
}

void MemoryServer::PutDirectory(const std::string& bucket, const std::string& prefix,
                                const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    Put(bucket, prefix.empty() ? e.path().filename().string()
                               : prefix + "/" + e.path().filename().string(),
        ss.str());
  }
}

std::vector<std::string> MemoryServer::Keys(const std::string& bucket) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [k, o] : objects_)
    if (k.rfind(bucket + "/", 0) == 0) out.push_back(k.substr(bucket.size() + 1));
  return out;
}

void MemoryServer::AddFault(FaultRule rule) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.push_back(std::move(rule));
}

void MemoryServer::ClearFaults() {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.clear();
}

uint64_t MemoryServer::Requests(const std::string& method, const std::string& key_contains) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::count_if(log_.begin(), log_.end(), [&](const Logged& l) {
    return (method.empty() || l.method == method) && l.key.find(key_contains) != std::string::npos;
  });
}

uint64_t MemoryServer::RangedGets(const std::string& key_contains, uint64_t offset) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::count_if(log_.begin(), log_.end(), [&](const Logged& l) {
    return l.method == "GET" && l.ranged && l.delivered &&
           l.key.find(key_contains) != std::string::npos &&
           (offset == UINT64_MAX || l.offset == offset);
  });
}

uint64_t MemoryServer::FaultsApplied() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_applied_;
}

void MemoryServer::ResetCounts() {
  std::lock_guard<std::mutex> lock(mu_);
  log_.clear();
  faults_applied_ = 0;
}

bool MemoryServer::Call::Has(Fault f) const {
  return fault && std::find(fault->faults.begin(), fault->faults.end(), f) != fault->faults.end();
}

MemoryServer::Call MemoryServer::Begin(const std::string& method, const std::string& bucket,
                                       const std::string& key, uint32_t part, bool ranged,
                                       uint64_t offset) {
  (void)bucket;
  std::lock_guard<std::mutex> lock(mu_);
  Call call;
  log_.push_back({method, key, ranged, offset, false});
  call.log = log_.size() - 1;
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (!it->method.empty() && it->method != method) continue;
    if (key.find(it->key_contains) == std::string::npos) continue;
    if (it->part != 0 && it->part != part) continue;
    if (it->ranged_only && !ranged) continue;
    if (it->range_offset != UINT64_MAX && (!ranged || it->range_offset != offset)) continue;
    call.fault = *it;
    if (it->times > 0 && --it->times == 0) faults_.erase(it);
    ++faults_applied_;
    break;
  }
  return call;
}

void MemoryServer::Delivered(const Call& call) {
  std::lock_guard<std::mutex> lock(mu_);
  if (call.log < log_.size()) log_[call.log].delivered = true;
}

std::optional<MemoryServer::Object> MemoryServer::Find(const std::string& bucket,
                                                       const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(Join(bucket, key));
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::string MemoryServer::Store(const std::string& bucket, const std::string& key,
                                std::string data) {
  const std::string generation = QuotedMd5(data);
  std::lock_guard<std::mutex> lock(mu_);
  Object& o = objects_[Join(bucket, key)];
  if (o.generation != generation) o.previous = std::move(o.data);
  o.generation = generation;
  o.data = std::move(data);
  return generation;
}

std::vector<ListEntry> MemoryServer::ListKeys(const std::string& bucket,
                                              const std::string& key_prefix) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ListEntry> out;
  const std::string from = Join(bucket, key_prefix);
  for (auto it = objects_.lower_bound(from); it != objects_.end() && it->first.rfind(from, 0) == 0;
       ++it)
    out.push_back({it->first.substr(bucket.size() + 1), it->second.data.size(),
                   it->second.generation});
  return out;
}

std::string MemoryServer::BeginUpload(const std::string& bucket, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string id = "upload-" + std::to_string(next_upload_++);
  uploads_[id] = Upload{bucket, key, {}};
  return id;
}

Result<std::string> MemoryServer::StorePart(const std::string& upload_id,
                                            const std::string& bucket, const std::string& key,
                                            uint32_t number, std::string data) {
  std::lock_guard<std::mutex> lock(mu_);
  auto up = uploads_.find(upload_id);
  if (up == uploads_.end() || up->second.bucket != bucket || up->second.key != key)
    return Status::NotFound(key + ": no such upload " + upload_id + " (completed or aborted)",
                            ENOENT);
  Object& part = up->second.parts[number];
  part.generation = QuotedMd5(data);
  part.data = std::move(data);
  return part.generation;
}

Result<std::vector<UploadPart>> MemoryServer::Parts(const std::string& upload_id,
                                                    const std::string& bucket,
                                                    const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto up = uploads_.find(upload_id);
  if (up == uploads_.end() || up->second.bucket != bucket || up->second.key != key)
    return Status::NotFound(key + ": no such upload " + upload_id + " (completed or aborted)",
                            ENOENT);
  std::vector<UploadPart> out;
  for (const auto& [n, p] : up->second.parts) out.push_back({n, p.data.size(), p.generation});
  return out;
}

Result<std::string> MemoryServer::Complete(const std::string& upload_id, const std::string& bucket,
                                           const std::string& key,
                                           const std::vector<UploadPart>& parts) {
  std::string data, digests, generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto up = uploads_.find(upload_id);
    if (up == uploads_.end() || up->second.bucket != bucket || up->second.key != key)
      return Status::NotFound(key + ": no such upload " + upload_id + " (completed or aborted)",
                              ENOENT);
    if (parts.empty()) return Status::InvalidArgument(key + ": an upload completed of no part");
    for (const UploadPart& p : parts) {
      auto part = up->second.parts.find(p.number);
      if (part == up->second.parts.end() || part->second.generation != p.generation)
        return Status::InvalidArgument(key + ": part " + std::to_string(p.number) + " (" +
                                       p.generation + ") is not one uploaded (InvalidPart)");
      data += part->second.data;
      const auto d = Md5(part->second.data);
      digests.append(reinterpret_cast<const char*>(d.data()), d.size());
    }
    uploads_.erase(up);
    generation = "\"" + Hex(Md5(digests)) + "-" + std::to_string(parts.size()) + "\"";
    Object& o = objects_[Join(bucket, key)];
    if (o.generation != generation) o.previous = std::move(o.data);
    o.generation = generation;
    o.data = std::move(data);
  }
  return generation;
}

void MemoryServer::Abort(const std::string& upload_id) {
  std::lock_guard<std::mutex> lock(mu_);
  uploads_.erase(upload_id);
}

std::vector<PendingUpload> MemoryServer::Uploads(const std::string& bucket,
                                                 const std::string& key_prefix) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PendingUpload> out;
  for (const auto& [id, u] : uploads_)
    if (u.bucket == bucket && u.key.rfind(key_prefix, 0) == 0) out.push_back({u.key, id});
  return out;
}

// ---- The store ----
namespace {

class MemoryStore final : public ObjectStore {
 public:
  MemoryStore(ObjectUrl url, std::shared_ptr<MemoryServer> server)
      : ObjectStore(std::move(url)), server_(std::move(server)) {}

  std::string identity() const override { return "memory"; }

  Result<ObjectInfo> Head(std::string_view name) override {
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("HEAD", name, 0, false, 0, &call));
    std::optional<MemoryServer::Object> o = server_->Find(url().bucket, url().KeyOf(name));
    if (!o) return Missing(name);
    server_->Delivered(call);
    return ObjectInfo{o->data.size(), call.Has(Fault::kNoGeneration) ? "" : o->generation, {}};
  }

  Status Read(std::string_view name, uint64_t offset, uint64_t length,
              const std::string& if_generation, void* dst) override {
    if (length == 0) return Status::OK();
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("GET", name, 0, true, offset, &call));
    const std::string where = "GET " + UrlOf(name) + " bytes " + std::to_string(offset) + "-" +
                              std::to_string(offset + length - 1);
    LIBSHARD_ASSIGN_OR_RETURN(std::string body, Body(name, call, if_generation, where));
    if (offset >= body.size())
      return Status::IoError(where + ": beyond the object's " + std::to_string(body.size()) +
                                 " bytes: the object was replaced since the dataset was opened; "
                                 "reopen the dataset to read the new version",
                             ESTALE);
    std::string range = body.substr(offset, length);
    Damage(call, &range);
    if (call.Has(Fault::kCut) || call.Has(Fault::kCutUnmarked) || range.size() != length)
      return Status::IoError(where + ": delivered " +
                                 std::to_string(call.Has(Fault::kCut) ||
                                                        call.Has(Fault::kCutUnmarked)
                                                    ? range.size() / 2
                                                    : range.size()) +
                                 " of " + std::to_string(length) + " bytes",
                             EIO);
    std::memcpy(dst, range.data(), length);
    bytes_.fetch_add(length, std::memory_order_relaxed);
    server_->Delivered(call);
    return Status::OK();
  }

  Result<ObjectBody> ReadWhole(std::string_view name, uint64_t max_bytes) override {
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("GET", name, 0, false, 0, &call));
    LIBSHARD_ASSIGN_OR_RETURN(std::string body, Body(name, call, {}, "GET " + UrlOf(name)));
    if (body.size() > max_bytes)
      return Status::Corruption("GET " + UrlOf(name) + ": larger than " +
                                std::to_string(max_bytes) + " bytes");
    Damage(call, &body);
    if (call.Has(Fault::kCut))
      return Status::IoError("GET " + UrlOf(name) + ": received " +
                                 std::to_string(body.size() / 2) + " of " +
                                 std::to_string(body.size()) + " bytes",
                             EIO);
    if (call.Has(Fault::kCutUnmarked)) body.resize(body.size() / 2);  // looks complete
    bytes_.fetch_add(body.size(), std::memory_order_relaxed);
    server_->Delivered(call);
    std::optional<MemoryServer::Object> o = server_->Find(url().bucket, url().KeyOf(name));
    return ObjectBody{std::move(body),
                      call.Has(Fault::kNoGeneration) || !o ? std::string() : o->generation};
  }

  Result<ObjectInfo> Write(std::string_view name, std::string_view data,
                           const WriteOptions& options) override {
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("PUT", name, 0, false, 0, &call));
    std::string body(data);
    LIBSHARD_RETURN_IF_ERROR(Sent(name, call, options.content_md5, &body));
    if (options.if_absent && !call.Has(Fault::kIgnoreCondition) &&
        server_->Has(url().bucket, url().KeyOf(name)))
      return Status::AlreadyExists("PUT " + UrlOf(name) + ": HTTP 412 PreconditionFailed: the "
                                   "object exists");
    const std::string generation = server_->Store(url().bucket, url().KeyOf(name), std::move(body));
    sent_.fetch_add(data.size(), std::memory_order_relaxed);
    server_->Delivered(call);
    return ObjectInfo{data.size(), call.Has(Fault::kNoGeneration) ? "" : generation, {}};
  }

  Status Delete(std::string_view name) override {
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("DELETE", name, 0, false, 0, &call));
    server_->Remove(url().bucket, url().KeyOf(name));
    server_->Delivered(call);
    return Status::OK();
  }

  Result<std::vector<ListEntry>> List(std::string_view name_prefix, size_t max_entries) override {
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("GET", name_prefix, 0, false, 0, &call));
    const std::string under = url().prefix.empty() ? std::string() : url().prefix + "/";
    std::vector<ListEntry> out;
    for (ListEntry& e : server_->ListKeys(url().bucket, under + std::string(name_prefix))) {
      if (out.size() >= max_entries)
        return Status::ResourceExhausted(UrlOf(name_prefix) + ": more than " +
                                         std::to_string(max_entries) + " objects listed");
      e.name = e.name.substr(under.size());
      if (call.Has(Fault::kNoGeneration)) e.generation.clear();
      out.push_back(std::move(e));
    }
    server_->Delivered(call);
    return out;
  }

  Result<std::string> BeginUpload(std::string_view name) override {
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("POST", name, 0, false, 0, &call));
    server_->Delivered(call);
    return server_->BeginUpload(url().bucket, url().KeyOf(name));
  }

  Result<ObjectInfo> WritePart(std::string_view name, const std::string& upload_id,
                               uint32_t number, std::string_view data,
                               const std::string& content_md5) override {
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("PUT", name, number, false, 0, &call));
    std::string body(data);
    LIBSHARD_RETURN_IF_ERROR(Sent(name, call, content_md5, &body));
    LIBSHARD_ASSIGN_OR_RETURN(
        std::string generation,
        server_->StorePart(upload_id, url().bucket, url().KeyOf(name), number, std::move(body)));
    sent_.fetch_add(data.size(), std::memory_order_relaxed);
    server_->Delivered(call);
    if (call.Has(Fault::kNoGeneration))
      return Status::IoError("PUT " + UrlOf(name) + " part " + std::to_string(number) +
                                 ": a reply without an ETag",
                             EIO);
    return ObjectInfo{data.size(), generation, {}};
  }

  Result<std::vector<UploadPart>> ListParts(std::string_view name,
                                            const std::string& upload_id) override {
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("GET", name, 0, false, 0, &call));
    Result<std::vector<UploadPart>> parts =
        server_->Parts(upload_id, url().bucket, url().KeyOf(name));
    server_->Delivered(call);
    return parts;
  }

  Result<ObjectInfo> CompleteUpload(std::string_view name, const std::string& upload_id,
                                    const std::vector<UploadPart>& parts) override {
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("POST", name, 0, false, 0, &call));
    LIBSHARD_ASSIGN_OR_RETURN(std::string generation,
                              server_->Complete(upload_id, url().bucket, url().KeyOf(name), parts));
    server_->Delivered(call);
    return ObjectInfo{0, call.Has(Fault::kNoGeneration) ? "" : generation, {}};
  }

  Status AbortUpload(std::string_view name, const std::string& upload_id) override {
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("DELETE", name, 0, false, 0, &call));
    server_->Abort(upload_id);
    server_->Delivered(call);
    return Status::OK();
  }

  Result<std::vector<PendingUpload>> ListUploads() override {
    MemoryServer::Call call;
    LIBSHARD_RETURN_IF_ERROR(Enter("GET", "", 0, false, 0, &call));
    const std::string under = url().prefix.empty() ? std::string() : url().prefix + "/";
    std::vector<PendingUpload> out;
    for (PendingUpload& u : server_->Uploads(url().bucket, under)) {
      u.name = u.name.substr(under.size());
      out.push_back(std::move(u));
    }
    server_->Delivered(call);
    return out;
  }

  StoreStats stats() const override {
    StoreStats s;
    s.requests = requests_.load(std::memory_order_relaxed);
    s.bytes_received = bytes_.load(std::memory_order_relaxed);
    s.bytes_sent = sent_.load(std::memory_order_relaxed);
    return s;
  }
  uint32_t max_attempts() const override { return 3; }

 private:
  // One call begun: counted, logged, its rule taken; the faults that end it before any reply.
  Status Enter(const char* method, std::string_view name, uint32_t part, bool ranged,
               uint64_t offset, MemoryServer::Call* call) {
    requests_.fetch_add(1, std::memory_order_relaxed);
    *call = server_->Begin(method, url().bucket, url().KeyOf(name), part, ranged, offset);
    const std::string where = std::string(method) + " " + UrlOf(name);
    if (call->Has(Fault::kSlow))
      std::this_thread::sleep_for(std::chrono::milliseconds(
          call->fault->arg == UINT64_MAX ? 5 : std::min<uint64_t>(call->fault->arg, 60000)));
    if (call->Has(Fault::kDrop))
      return Status::IoError(where + ": Connection reset by peer (injected)", EIO);
    if (call->Has(Fault::kStall))
      return Status::IoError(where + ": no progress for the stall time (injected)", EIO);
    if (call->Has(Fault::kError)) {
      const uint64_t code = call->fault->arg == UINT64_MAX ? 503 : call->fault->arg;
      const std::string text = where + ": HTTP " + std::to_string(code) + " (injected)";
      if (code == 404) return Status::NotFound(text + " (no such object)", ENOENT);
      if (code == 401 || code == 403) return Status::IoError(text + ": access denied", EACCES);
      if (code == 412)
        return Status::IoError(text + ": the object was replaced since the dataset was opened",
                               ESTALE);
      if (code == 400) return Status::InvalidArgument(text);
      return Status::IoError(text, EIO);
    }
    return Status::OK();
  }

  Status Missing(std::string_view name) const {
    return Status::NotFound(UrlOf(name) + ": HTTP 404 NoSuchKey (no such object)", ENOENT);
  }

  // The bytes a read serves: the object's (its previous version's under kStale), refused when
  // it is missing or, with `if_generation`, replaced.
  Result<std::string> Body(std::string_view name, const MemoryServer::Call& call,
                           const std::string& if_generation, const std::string& where) const {
    std::optional<MemoryServer::Object> o = server_->Find(url().bucket, url().KeyOf(name));
    if (!o) return Missing(name);
    if (!if_generation.empty() && if_generation != o->generation &&
        !call.Has(Fault::kIgnoreCondition))
      return Status::IoError(where + ": HTTP 412 PreconditionFailed: the object was replaced "
                                 "since the dataset was opened (its ETag " + if_generation +
                                 " no longer matches); reopen the dataset to read the new "
                                 "version",
                             ESTALE);
    if (call.Has(Fault::kStale) && !o->previous.empty()) return o->previous;
    return o->data;
  }

  static void Damage(const MemoryServer::Call& call, std::string* body) {
    if (!call.Has(Fault::kCorrupt) || body->empty()) return;
    const uint64_t at = call.fault->arg == UINT64_MAX
                            ? body->size() / 2
                            : std::min<uint64_t>(call.fault->arg, body->size() - 1);
    (*body)[at] = static_cast<char>((*body)[at] ^ 0x5a);
  }

  // A body sent: damaged on the way under kCorrupt (stored so unless its Content-MD5 is checked:
  // the memory store checks it, as S3 does).
  Status Sent(std::string_view name, const MemoryServer::Call& call,
              const std::string& content_md5, std::string* body) const {
    Damage(call, body);
    if (call.Has(Fault::kCut))
      return Status::IoError("PUT " + UrlOf(name) + ": the connection failed mid-body", EIO);
    if (!content_md5.empty() && content_md5 != Md5Base64(*body) &&
        !call.Has(Fault::kIgnoreCondition))
      return Status::InvalidArgument("PUT " + UrlOf(name) +
                                     ": HTTP 400 BadDigest (the body is not the one whose "
                                     "Content-MD5 was sent)");
    return Status::OK();
  }

  std::shared_ptr<MemoryServer> server_;
  std::atomic<uint64_t> requests_{0}, bytes_{0}, sent_{0};
};

}  // namespace

Result<std::shared_ptr<ObjectStore>> OpenMemoryStore(std::string_view url,
                                                     std::shared_ptr<MemoryServer> server) {
  LIBSHARD_ASSIGN_OR_RETURN(ObjectUrl parsed, ParseObjectUrl(url, kScheme));
  return std::shared_ptr<ObjectStore>(
      std::make_shared<MemoryStore>(std::move(parsed), std::move(server)));
}

Result<std::shared_ptr<ObjectStore>> OpenMemoryStore(std::string_view url) {
  return OpenMemoryStore(url, MemoryServer::Global());
}

}  // namespace libshard::objstore
