// DatasetLock: one writer at a time per dataset directory.
//
// Two processes writing one directory at once (two `pack --append`, or two fresh packs into one
// OUT) would interleave shards, journals and indexes into a dataset that verifies wrong or, worse,
// opens with one sample's name on another's tensors. Every writer of a dataset directory (Writer
// Create / Resume / OpenForAppend, MergeDatasets' output, `libshard pack`) therefore holds an
// exclusive flock(2) on the lock file `DIR/.libshard.lock` (docs/FORMAT.md §2.1) from before it
// inspects or creates the first file until after its commit and cleanup. A second writer is
// refused at once (it never waits) with a message naming the holder's pid, host and start time.
// The kernel releases the lock when the holder exits, however it exits (kill -9 included), so a
// crashed job never needs manual cleanup before `--resume`. Readers (Dataset, Loader) never look
// at the lock: they open only what the manifest names. The lock file itself is never removed
// (removing it would let two writers lock two different files).
//
// flock(2) is advisory and local to the kernel that holds it; on NFS before Linux 2.6.12 or on
// file systems that emulate it per client, two hosts may both get it.
#pragma once

#include <memory>
#include <string>

#include "libshard/caller.h"
#include "libshard/status.h"

namespace libshard {

class DatasetLock {
  struct Impl;
  // Only Acquire makes locks (passkey: make_shared needs a public constructor).
  class Key {
    friend class DatasetLock;
    Key() = default;
  };

 public:
  static constexpr const char* kFileName = ".libshard.lock";

  // Takes the lock of the dataset at `location`: of the directory its writes work in
  // (StorageInfo::work_dir, libshard/storage.h: the directory itself, or an s3:// URL's staging
  // directory, so that URL's lock holds on one node only), creating the directory first when
  // `create_directory` (else a missing one is NotFound). Fails at once with AlreadyExists,
  // "DIR is being written by another process (pid N, host H, since T); ...", when another writer
  // holds it, including another DatasetLock of this process; its advice is in `caller`'s
  // spelling (ResumeAdvice).
  static Result<std::shared_ptr<const DatasetLock>> Acquire(const std::string& location,
                                                            bool create_directory = true,
                                                            Caller caller = Caller::kCpp);

  DatasetLock(Key, std::unique_ptr<Impl> impl);
  ~DatasetLock();
  DatasetLock(const DatasetLock&) = delete;
  DatasetLock& operator=(const DatasetLock&) = delete;

  const std::string& dir() const;  // the directory locked
  // True when this is the lock of directory `dir` (however `dir` is spelled).
  bool Covers(const std::string& dir) const;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace libshard
