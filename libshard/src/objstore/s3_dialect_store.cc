// The S3-dialect store (s3_dialect_store.h): an ObjectStore over the S3 client (io/s3_client.h:
// requests, retries and the checks of every reply) and its transport (libcurl's, or a test's
// in-process server: io/s3_transport.h).
//
// A client holds one connection and serves one thread at a time, so the store keeps a pool: a
// call takes an idle client (or makes one, on the calling thread) and gives it back. A forked
// child never uses its parent's clients (their connections are the parent's): the pool belongs
// to the process that made it, and a child starts its own, leaving the parent's untouched.
#include "objstore/s3_dialect_store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

namespace libshard::objstore {
namespace {

class S3DialectStore final : public ObjectStore {
 public:
  S3DialectStore(ObjectUrl url, Result<io::S3Config> config)
      : ObjectStore(std::move(url)), config_(std::move(config)) {}
  ~S3DialectStore() override {
    std::lock_guard<std::mutex> lock(mu_);
    // A child's copy of the parent's clients: their connections are the parent's, never closed
    // here (closing a TLS session would end the parent's too).
    if (pid_ != getpid())
      for (auto& c : idle_) (void)c.release();
  }

  std::string identity() const override { return config_.ok() ? config_->endpoint : ""; }

  Result<ObjectInfo> Head(std::string_view name) override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    Result<io::ObjectInfo> r = c->Head(Object(name));
    if (!r.ok()) return r.status();
    return Info(*r);
  }
  Status Read(std::string_view name, uint64_t offset, uint64_t length,
              const std::string& if_generation, void* dst) override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    return c->GetRange(Object(name), offset, length, if_generation, dst);
  }
  Result<ObjectBody> ReadWhole(std::string_view name, uint64_t max_bytes) override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    LIBSHARD_ASSIGN_OR_RETURN(io::S3Client::Body b, c->GetObject(Object(name), max_bytes));
    return ObjectBody{std::move(b.data), std::move(b.etag)};
  }
  Result<ObjectInfo> Write(std::string_view name, std::string_view data,
                           const WriteOptions& options) override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    LIBSHARD_ASSIGN_OR_RETURN(io::ObjectInfo r,
                              c->Put(Object(name), data, options.content_md5, options.if_absent));
    return Info(r);
  }
  Status Delete(std::string_view name) override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    return c->Delete(Object(name));
  }
  Result<std::vector<ListEntry>> List(std::string_view name_prefix, size_t max_entries) override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    const std::string under = url().prefix.empty() ? std::string() : url().prefix + "/";
    LIBSHARD_ASSIGN_OR_RETURN(
        std::vector<io::S3Client::Listed> listed,
        c->ListObjects(url().bucket, under + std::string(name_prefix), max_entries));
    std::vector<ListEntry> out;
    for (io::S3Client::Listed& o : listed)
      if (o.key.rfind(under, 0) == 0)
        out.push_back({o.key.substr(under.size()), o.size, std::move(o.etag)});
    return out;
  }

  Result<std::string> BeginUpload(std::string_view name) override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    return c->CreateMultipartUpload(Object(name));
  }
  Result<ObjectInfo> WritePart(std::string_view name, const std::string& upload_id,
                               uint32_t number, std::string_view data,
                               const std::string& content_md5) override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    LIBSHARD_ASSIGN_OR_RETURN(io::ObjectInfo r,
                              c->UploadPart(Object(name), upload_id, number, data, content_md5));
    return Info(r);
  }
  Result<std::vector<UploadPart>> ListParts(std::string_view name,
                                            const std::string& upload_id) override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    LIBSHARD_ASSIGN_OR_RETURN(std::vector<io::S3Client::Part> parts,
                              c->ListParts(Object(name), upload_id));
    std::vector<UploadPart> out;
    for (io::S3Client::Part& p : parts) out.push_back({p.number, p.size, std::move(p.etag)});
    return out;
  }
  Result<ObjectInfo> CompleteUpload(std::string_view name, const std::string& upload_id,
                                    const std::vector<UploadPart>& parts) override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    std::vector<io::S3Client::Part> s3parts;
    for (const UploadPart& p : parts) s3parts.push_back({p.number, p.size, p.generation});
    LIBSHARD_ASSIGN_OR_RETURN(io::ObjectInfo r,
                              c->CompleteMultipartUpload(Object(name), upload_id, s3parts));
    return Info(r);
  }
  Status AbortUpload(std::string_view name, const std::string& upload_id) override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    return c->AbortMultipartUpload(Object(name), upload_id);
  }
  Result<std::vector<PendingUpload>> ListUploads() override {
    LIBSHARD_ASSIGN_OR_RETURN(Lease c, Take());
    // The dataset's prefix without its last '/', so that the listing needs no '/' in the query
    // when the prefix is one component (some servers sign such values differently).
    LIBSHARD_ASSIGN_OR_RETURN(std::vector<io::S3Client::Upload> ups,
                              c->ListMultipartUploads(url().bucket, url().prefix));
    const std::string under = url().prefix.empty() ? std::string() : url().prefix + "/";
    std::vector<PendingUpload> out;
    for (io::S3Client::Upload& u : ups)
      if (u.key.rfind(under, 0) == 0)
        out.push_back({u.key.substr(under.size()), std::move(u.upload_id)});
    return out;
  }

  StoreStats stats() const override {
    StoreStats s;
    s.requests = requests_.load(std::memory_order_relaxed);
    s.retries = retries_.load(std::memory_order_relaxed);
    s.bytes_received = bytes_.load(std::memory_order_relaxed);
    s.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
    return s;
  }
  uint32_t max_attempts() const override { return config_.ok() ? config_->max_attempts : 1; }
  std::string max_attempts_setting() const override { return "LIBSHARD_S3_MAX_ATTEMPTS"; }

 private:
  // A client taken from the pool for one call; given back (its counters added to the store's).
  class Lease {
   public:
    Lease(S3DialectStore* store, std::unique_ptr<io::S3Client> client)
        : store_(store), client_(std::move(client)), seen_(client_->stats()) {}
    Lease(Lease&& o) noexcept = default;
    ~Lease() {
      if (client_ != nullptr) store_->Give(std::move(client_), seen_);
    }
    io::S3Client* operator->() const { return client_.get(); }

   private:
    S3DialectStore* store_;
    std::unique_ptr<io::S3Client> client_;
    io::S3ClientStats seen_;
  };

  io::S3Url Object(std::string_view name) const { return {url().bucket, url().KeyOf(name)}; }
  static ObjectInfo Info(const io::ObjectInfo& r) { return {r.size, r.etag, r.encryption}; }

  Result<Lease> Take() {
    if (!config_.ok()) return config_.status();
    {
      std::lock_guard<std::mutex> lock(mu_);
      const pid_t pid = getpid();
      if (pid_ != pid) {
        for (auto& c : idle_) (void)c.release();  // the parent's connections: left alone
        idle_.clear();
        pid_ = pid;
      }
      if (!idle_.empty()) {
        std::unique_ptr<io::S3Client> c = std::move(idle_.back());
        idle_.pop_back();
        return Lease(this, std::move(c));
      }
    }
    LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<io::S3Client> c, io::S3Client::Create(*config_));
    return Lease(this, std::move(c));
  }
  void Give(std::unique_ptr<io::S3Client> c, const io::S3ClientStats& seen) {
    const io::S3ClientStats& now = c->stats();
    requests_.fetch_add(now.requests - seen.requests, std::memory_order_relaxed);
    retries_.fetch_add(now.retries - seen.retries, std::memory_order_relaxed);
    bytes_.fetch_add(now.bytes - seen.bytes, std::memory_order_relaxed);
    bytes_sent_.fetch_add(now.bytes_sent - seen.bytes_sent, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    if (pid_ == getpid()) {
      idle_.push_back(std::move(c));
    } else {
      (void)c.release();  // made before a fork by the parent: its connection is the parent's
    }
  }

  Result<io::S3Config> config_;
  std::mutex mu_;
  pid_t pid_ = getpid();
  std::vector<std::unique_ptr<io::S3Client>> idle_;
  std::atomic<uint64_t> requests_{0}, retries_{0}, bytes_{0}, bytes_sent_{0};
};

}  // namespace

std::shared_ptr<ObjectStore> MakeS3DialectStore(ObjectUrl url, Result<io::S3Config> config) {
  return std::make_shared<S3DialectStore>(std::move(url), std::move(config));
}

}  // namespace libshard::objstore
