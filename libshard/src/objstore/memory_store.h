// The memory store (object_store.h): memory://BUCKET/PREFIX, objects in this process's memory,
// and the fault rules every object-storage test uses. Nothing outlives the process.
//
// A MemoryServer holds buckets of objects and multipart uploads as S3 keeps them: a generation is
// the quoted MD5 hex of the bytes ("MD5-N" for an object completed from N parts), a read
// conditional on a generation is refused (ESTALE) once the object is replaced, a write with
// if_absent refuses an existing object, a part or write whose Content-MD5 differs is refused.
// memory:// URLs use the process's server (MemoryServer::Global()); a test may make its own and
// open stores on it (OpenMemoryStore). The S3 protocol front of the tests (tests/testutil/
// fake_s3.h) serves a MemoryServer over the S3 client's transport, so that the S3 client, the
// cache and the uploader are tested in-process against the same objects and the same faults.
//
// Faults: a rule applies its faults to the next `times` calls it matches. The store applies
// those that have a meaning without a protocol (an error, a dropped or slow call, damaged or
// short bytes, another version's bytes, no generation, conditions ignored); the S3 front applies
// every fault, in HTTP terms.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "objstore/object_store.h"

namespace libshard::objstore {

enum class Fault {
  kError,            // an error reply: HTTP status `arg` (503 when unset; retried by the S3
                     // client); the store answers it as the S3 client answers that status
  kDrop,             // the connection fails before any reply (a transport error)
  kStall,            // no byte for the stall time: the transport's timeout error
  kSlow,             // the reply after `arg` milliseconds (5 when unset), whole
  kCut,              // half the body, then the connection fails
  kCutUnmarked,      // half the body and no length: a whole-object read looks complete
  kCorrupt,          // the body whole, one byte flipped (at `arg` of the body, or its middle)
  kStale,            // the previous version's bytes (before the last write), under the current
                     // generation: a replica that lags and says nothing
  kNoGeneration,     // no generation (ETag) in the reply
  kIgnoreCondition,  // if_generation, if_absent and Content-MD5 not checked (a read serves
                     // whatever the object is now; a damaged body is stored as it arrived)
  // Only through the S3 front (HTTP details the store has no words for):
  kNoContentLength,  // no Content-Length header
  kNoContentRange,   // a 206 without Content-Range
  kIgnoreRange,      // the Range header ignored: 200 and the whole object
};

// Which calls a rule matches. Methods are HTTP's: GET (read, list, list parts, list uploads),
// HEAD, PUT (write, part), POST (begin and complete an upload), DELETE.
struct FaultRule {
  std::vector<Fault> faults;
  std::string method;                  // "GET", ...; empty: any
  std::string key_contains;            // keys containing this; empty: any
  uint32_t part = 0;                   // only this part number's PUT (0: any call)
  bool ranged_only = false;            // only reads of a byte range
  uint64_t range_offset = UINT64_MAX;  // only ranges starting here (UINT64_MAX: any)
  int times = 1;                       // matching calls it applies to (-1: every one)
  uint64_t arg = UINT64_MAX;           // kError: the status; kCorrupt: the offset; kSlow: ms
};

class MemoryServer : public std::enable_shared_from_this<MemoryServer> {
 public:
  static std::shared_ptr<MemoryServer> Make();
  // The server of memory:// URLs in this process.
  static std::shared_ptr<MemoryServer> Global();

  // ---- Objects, for tests (no faults, not counted) ----
  // Put replaces (a new generation when the bytes differ; the old bytes stay as the previous
  // version, for kStale).
  void Put(const std::string& bucket, const std::string& key, std::string data);
  bool Has(const std::string& bucket, const std::string& key) const;
  std::string Get(const std::string& bucket, const std::string& key) const;
  std::string Generation(const std::string& bucket, const std::string& key) const;
  void Remove(const std::string& bucket, const std::string& key);
  // Flips the byte at `offset` of an object and keeps its generation: damaged in the bucket.
  void Damage(const std::string& bucket, const std::string& key, uint64_t offset);
  // Every regular file of a local directory as "PREFIX/NAME" in `bucket`.
  void PutDirectory(const std::string& bucket, const std::string& prefix, const std::string& dir);
  // Keys of `bucket` (sorted).
  std::vector<std::string> Keys(const std::string& bucket) const;

  void AddFault(FaultRule rule);
  void ClearFaults();
  // Counts (calls received, faults included).
  uint64_t Requests(const std::string& method, const std::string& key_contains = {}) const;
  // Reads of a byte range delivered in full, per key and offset.
  uint64_t RangedGets(const std::string& key_contains, uint64_t offset = UINT64_MAX) const;
  uint64_t FaultsApplied() const;
  void ResetCounts();

  // ---- What a store (or a protocol front) serves ----
  struct Object {
    std::string data;
    std::string generation;
    std::string previous;  // the bytes before the last write ("" when none)
  };
  // One call: logged, and the first rule that matches it consumed. Returns the call's log entry
  // (for Delivered) and the rule's faults (empty: none).
  struct Call {
    size_t log = 0;
    std::optional<FaultRule> fault;
    bool Has(Fault f) const;
  };
  Call Begin(const std::string& method, const std::string& bucket, const std::string& key,
             uint32_t part, bool ranged, uint64_t offset);
  void Delivered(const Call& call);

  std::optional<Object> Find(const std::string& bucket, const std::string& key) const;
  // Stores the object; its new generation.
  std::string Store(const std::string& bucket, const std::string& key, std::string data);
  std::vector<ListEntry> ListKeys(const std::string& bucket, const std::string& key_prefix) const;

  struct Upload {
    std::string bucket, key;
    std::map<uint32_t, Object> parts;
  };
  std::string BeginUpload(const std::string& bucket, const std::string& key);
  // NotFound when the upload is no more (or is another key's).
  Result<std::string> StorePart(const std::string& upload_id, const std::string& bucket,
                                const std::string& key, uint32_t number, std::string data);
  Result<std::vector<UploadPart>> Parts(const std::string& upload_id, const std::string& bucket,
                                        const std::string& key) const;
  // The object of `parts` (generations as listed): its generation. NotFound for no such upload,
  // InvalidArgument for a part that is not one uploaded.
  Result<std::string> Complete(const std::string& upload_id, const std::string& bucket,
                               const std::string& key, const std::vector<UploadPart>& parts);
  void Abort(const std::string& upload_id);
  std::vector<PendingUpload> Uploads(const std::string& bucket,
                                     const std::string& key_prefix) const;

 private:
  MemoryServer() = default;
  struct Logged {
    std::string method, key;
    bool ranged = false;
    uint64_t offset = 0;
    bool delivered = false;
  };

  mutable std::mutex mu_;
  std::map<std::string, Object> objects_;  // "bucket/key"
  std::map<std::string, Upload> uploads_;  // upload id
  uint64_t next_upload_ = 1;
  std::vector<FaultRule> faults_;
  std::vector<Logged> log_;
  uint64_t faults_applied_ = 0;
};

// A store of `url` ("memory://BUCKET/PREFIX") on `server`.
Result<std::shared_ptr<ObjectStore>> OpenMemoryStore(std::string_view url,
                                                     std::shared_ptr<MemoryServer> server);

// "\"HEX\"": the generation of bytes of MD5 `digest` (as S3's ETag).
std::string QuotedMd5(std::string_view data);

}  // namespace libshard::objstore
