// ObjectStore: where a dataset's objects live when they are not a local directory
// (docs/storage-drivers.md, "Object stores"). One interface, one file per store, chosen once by
// the URL's scheme from the store table (store_table.cc), as the codec table chooses a codec:
//
//   s3://BUCKET/PREFIX      s3_store.cc      AWS S3 or an S3-compatible server (io/s3_client.h)
//   gs://BUCKET/PREFIX      gcs_store.cc     Cloud Storage through its S3-interoperable XML API
//                                            (the same client: s3_dialect_store.h)
//   memory://BUCKET/PREFIX  memory_store.cc  this process's memory, with fault rules (tests)
//
// A store is bound to one location (its URL's bucket and key prefix); every call names an object
// by its name under that prefix ("manifest.json", "shard-00000.lss"). What the cache (remote/)
// and the uploader need, and nothing else:
//   - Head: size and generation (the version: S3's ETag);
//   - Read: a byte range, conditional on a generation (a replaced object is refused, ESTALE);
//   - Write: a whole object, optionally conditional on its absence;
//   - multipart uploads (begin, parts, list, complete, abort, list the unfinished), for objects
//     larger than one request carries; an upload is invisible until completed;
//   - List and Delete.
// Every call is thread-safe and bounded (the store's own retries and timeouts); every error names
// the object's URL, and for a read the byte range. A store may be used after a fork by the child
// (it never uses its parent's connections there).
//
// Adding a store (gs://, az://): one file with its factory, then one row in store_table.cc; the
// storage driver (storage/object_driver.cc), the node-local cache and the uploader take any store.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/status.h"
#include "objstore/object_url.h"

namespace libshard::objstore {

struct ObjectInfo {
  uint64_t size = 0;
  // The object's version as the store names it (S3: the ETag, quotes included). Empty when the
  // store sent none: then nothing can be told from it (a reader checks the bytes instead).
  std::string generation;
  // The server-side encryption the reply names ("AES256", "aws:kms", "SSE-C"; "" for none): under
  // some of them a store's generation is not the MD5 of the bytes (etag_check.h).
  std::string encryption;
};

struct ObjectBody {
  std::string data;
  std::string generation;
};

struct ListEntry {
  std::string name;  // under the store's prefix
  uint64_t size = 0;
  std::string generation;
};

// One part of a multipart upload (numbers 1..kMaxParts).
struct UploadPart {
  uint32_t number = 0;
  uint64_t size = 0;
  std::string generation;  // the part's ETag, quotes included
};
inline constexpr uint32_t kMaxParts = 10000;

// An unfinished multipart upload.
struct PendingUpload {
  std::string name;  // under the store's prefix
  std::string upload_id;
};

struct WriteOptions {
  // The base64 MD5 of the body (Md5Base64): a store that checks it refuses a body damaged on the
  // way. "" sends none.
  std::string content_md5;
  // Written only when no object has the name: AlreadyExists otherwise.
  bool if_absent = false;
};

// Counters of one store (every call of every thread), for tests, stats and benchmarks.
struct StoreStats {
  uint64_t requests = 0;  // every try, retries included
  uint64_t retries = 0;
  uint64_t bytes_received = 0;
  uint64_t bytes_sent = 0;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // The location: scheme, bucket and key prefix.
  const ObjectUrl& url() const { return url_; }
  // "scheme://bucket/prefix/NAME", for messages.
  std::string UrlOf(std::string_view name) const {
    return url_.ToString() + "/" + std::string(name);
  }
  // "bucket B, key PREFIX/NAME", for messages that name the object exactly.
  std::string KeyWhere(std::string_view name) const {
    return "bucket " + url_.bucket + ", key " + url_.KeyOf(name);
  }
  // What tells this store's objects from another's of the same URL (S3: the endpoint): the
  // node-local cache keeps one directory per identity and URL.
  virtual std::string identity() const = 0;

  // Size and generation. NotFound (ENOENT) when there is no such object.
  virtual Result<ObjectInfo> Head(std::string_view name) = 0;
  // Bytes [offset, offset + length) into dst. With `if_generation` a replaced object is refused
  // (IoError, ESTALE, "the object was replaced"). OK only when exactly `length` bytes of that
  // range arrived.
  [[nodiscard]] virtual Status Read(std::string_view name, uint64_t offset, uint64_t length,
                                    const std::string& if_generation, void* dst) = 0;
  // A whole object of at most `max_bytes` (Corruption when larger), with its generation.
  virtual Result<ObjectBody> ReadWhole(std::string_view name, uint64_t max_bytes) = 0;
  // A whole object written in one request; returns the reply's generation and encryption, with
  // `size` the bytes sent.
  virtual Result<ObjectInfo> Write(std::string_view name, std::string_view data,
                                   const WriteOptions& options = {}) = 0;
  // Removes the object (OK when there is none).
  [[nodiscard]] virtual Status Delete(std::string_view name) = 0;
  // The objects whose names start with `name_prefix`, by name (at most `max_entries`; more is
  // ResourceExhausted).
  virtual Result<std::vector<ListEntry>> List(std::string_view name_prefix,
                                              size_t max_entries = 100000) = 0;

  // Multipart upload. Parts are numbered 1..kMaxParts; on S3 every part but the last is at least
  // 5 MiB. Begin returns the upload id.
  virtual Result<std::string> BeginUpload(std::string_view name) = 0;
  // One part (with the Content-MD5 of WriteOptions when given): its generation and the reply's
  // encryption, `size` the bytes sent.
  virtual Result<ObjectInfo> WritePart(std::string_view name, const std::string& upload_id,
                                       uint32_t number, std::string_view data,
                                       const std::string& content_md5 = {}) = 0;
  // The parts uploaded so far, by number. NotFound (ENOENT) when the upload is no more
  // (completed or aborted).
  virtual Result<std::vector<UploadPart>> ListParts(std::string_view name,
                                                    const std::string& upload_id) = 0;
  // Makes the object of `parts` (ascending numbers) visible: its generation and the reply's
  // encryption (`size` unset).
  virtual Result<ObjectInfo> CompleteUpload(std::string_view name, const std::string& upload_id,
                                            const std::vector<UploadPart>& parts) = 0;
  [[nodiscard]] virtual Status AbortUpload(std::string_view name,
                                           const std::string& upload_id) = 0;
  // The unfinished uploads under the store's prefix.
  virtual Result<std::vector<PendingUpload>> ListUploads() = 0;

  virtual StoreStats stats() const = 0;
  // How many tries a call makes at most (the uploader sends a damaged body again as often).
  virtual uint32_t max_attempts() const = 0;
  // What sets it, for messages ("LIBSHARD_S3_MAX_ATTEMPTS").
  virtual std::string max_attempts_setting() const { return "the store's bound on attempts"; }

 protected:
  explicit ObjectStore(ObjectUrl url) : url_(std::move(url)) {}

 private:
  ObjectUrl url_;
};

// The store of `url` ("scheme://bucket[/prefix]") from the store table: InvalidArgument naming
// the URL for a malformed one (a bad bucket name for that store, an empty, '.' or '..' segment);
// Unsupported for a scheme no store takes. A store's settings (credentials, endpoint, retry
// bounds) are read once here; one that cannot be read makes every call fail with that error, so
// that a location can be described without them.
Result<std::shared_ptr<ObjectStore>> OpenStore(std::string_view url);
// Whether a store takes `scheme` ("s3"), and the schemes taken ("s3://, memory://").
bool HasStore(std::string_view scheme);
std::string StoreSchemes();

// The stores (one file each): the rows of the table.
Result<std::shared_ptr<ObjectStore>> OpenS3Store(std::string_view url);
Result<std::shared_ptr<ObjectStore>> OpenGcsStore(std::string_view url);
Result<std::shared_ptr<ObjectStore>> OpenMemoryStore(std::string_view url);

}  // namespace libshard::objstore
