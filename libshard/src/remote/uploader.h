// Uploader: puts the files of a dataset written locally (a staging directory) into an object
// store (objstore/object_store.h) under the dataset's prefix, on its own threads.
//
// A file of at most `part_size` bytes goes up in one PUT; a larger one by multipart upload, its
// parts (`part_size` bytes, the last one shorter) uploaded in parallel, each with its Content-MD5,
// and completed once all are up. A multipart object is invisible until completed, so a reader
// never sees half of one.
//
// Checked (objstore/etag_check.h): each reply's ETag is compared with the MD5 of the bytes sent; a
// part or PUT whose ETag is the MD5 of other bytes (damaged on the way, stored by a server that
// does not check Content-MD5) is sent again, up to the store's max_attempts; a completed object's
// ETag is compared with the one its parts' MD5s make. Only then is the object journaled as done
// (and its local bytes freed, with `free_uploaded`). CheckUploaded HEADs the objects afterwards and
// compares their sizes and ETags with what was recorded.
//
// Resume: the upload journal (`upload.journal` in the staging directory, one text line per event,
// appended and fsynced) records each multipart upload id when it starts ("upload NAME SIZE ID")
// and each finished object ("done NAME SIZE ETAG"). A new Uploader on the same directory (the
// process was killed) skips finished objects (after a HEAD shows them with that size) and
// continues a recorded upload: ListParts names the parts already up, and a part whose size and
// ETag (the MD5 of the local bytes) match is not uploaded again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "libshard/status.h"
#include "objstore/object_store.h"

namespace libshard::remote {

// Resolved once by the storage driver (storage/object_driver.cc) from the environment's table.
struct UploadOptions {
  // The part size (default 16 MiB; some stores need >= 5 MiB for all parts but the last),
  // raised as needed so that a file has at most objstore::kMaxParts parts.
  uint64_t part_size = uint64_t{16} << 20;
  // Parts in flight at once (default 8).
  uint32_t threads = 8;
  // Content-MD5 (default on): send each part's and object's Content-MD5, so that a
  // server that checks it refuses bytes damaged on the way, and compare each reply's ETag with
  // the MD5 of what was sent. 0 does neither and saves the MD5 (a CPU-second or more per GB on a
  // busy node) where TLS already protects the transfer; sizes and the ETags the server returned
  // are still checked (CheckUploaded), and a resume still checks listed parts by MD5.
  bool content_md5 = true;
  // Free the local bytes of a file once it is up, past its first 4 KiB (a shard's header, which
  // a resumed Writer checks), by punching a hole that keeps the size: the staging directory then
  // holds only what is not uploaded yet. Never for files that may be links to someone else's
  // data (merge links its parts' shards).
  bool free_uploaded = false;
};

struct UploadStats {
  uint64_t objects = 0;          // objects finished by this Uploader (uploaded or found up)
  uint64_t parts_uploaded = 0;   // parts (and single PUTs) sent
  uint64_t parts_skipped = 0;    // parts found up already (resume)
  uint64_t bytes_uploaded = 0;
  uint64_t requests = 0;         // every try of every request
  uint64_t retries = 0;
  uint64_t etag_mismatches = 0;  // replies whose ETag was the MD5 of other bytes (sent again)
  uint64_t unverifiable = 0;     // replies whose ETag is no MD5 (SSE-KMS, SSE-C, some stores)
};

class Uploader {
 public:
  // Objects go to `store` by their file names; `staging_dir` holds the files and the upload
  // journal. `fresh`: a new write; a journal left by an earlier one is dropped (its unfinished
  // uploads aborted, best effort). Otherwise the journal is continued.
  static Result<std::unique_ptr<Uploader>> Open(std::shared_ptr<objstore::ObjectStore> store,
                                                const std::string& staging_dir, bool fresh,
                                                UploadOptions options);
  ~Uploader();  // stops the threads; unfinished uploads stay for a resume
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  // Queues the upload of local file `path` as PREFIX/`name` and returns at once. The file must
  // not change any more. A name queued before is not queued again. Thread-safe.
  void Enqueue(const std::string& path, const std::string& name);
  // The first error of a queued upload so far (OK while none failed). Thread-safe.
  Status error() const;
  // Waits until every queued upload is finished or one failed; the first error.
  [[nodiscard]] Status Wait();
  // PUT of `data` as PREFIX/`name` now, on the calling thread (index, manifest), checked and
  // recorded like a queued upload (not journaled: it is put again by a resumed run).
  [[nodiscard]] Status PutNow(const std::string& name, std::string_view data);
  // The size and ETag recorded when PREFIX/`name` was finished (by this Uploader, PutNow, or the
  // run whose journal it continued); nullopt when it was not.
  std::optional<objstore::ObjectInfo> Finished(const std::string& name) const;
  objstore::ObjectStore& store() const;
  // Head of `name` on the calling thread.
  Result<objstore::ObjectInfo> HeadNow(const std::string& name);

  // Aborts the unfinished multipart uploads of PREFIX/NAME for the `names` given (a run killed
  // between starting an upload and journaling its id leaves one with no parts). Best effort,
  // on the calling thread; call after Wait().
  void AbortLeftovers(const std::vector<std::string>& names);

  UploadStats stats() const;
  const std::string& prefix() const;

 private:
  struct State;
  explicit Uploader(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace libshard::remote
