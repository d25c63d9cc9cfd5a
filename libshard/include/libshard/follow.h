// DatasetFollower: reads a dataset while it is being written - by a libshard Writer, `libshard
// pack`, or the ranks of a multi-rank write - as docs/FORMAT.md §6.1 specifies: only samples a
// writer made durable (its journal, or its committed index), in the *arrival order* every
// follower sees whenever it looks, every byte checked before it is handed out. The Loader's
// follow mode (FollowOrder, Loader::Follow) trains on it; Python's
// `libshard.open(path, follow=True)` reads it at random.
//
// Thread-safety: Poll, progress and Snapshot from one thread at a time; the Datasets Snapshot
// returns are immutable and may be used from any threads, also while the follower polls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "libshard/dataset.h"
#include "libshard/status.h"

namespace libshard {

// Where a followed write stands (DatasetFollower::progress).
struct FollowProgress {
  uint64_t samples = 0;   // samples of the arrival order known (FORMAT.md §6.1)
  bool complete = false;  // the writer(s) closed the dataset: `samples` is every sample
  uint32_t writers = 0;   // 1, or a multi-rank write's world size; 0 until a writer started
  // What holds the arrival order up now, in words naming the directory or part (the writer has
  // not started; the writer's next commit; rank R has not started); "" once complete.
  std::string waiting_for;
};

class DatasetFollower {
 public:
  // `path`: the dataset directory, which need not exist yet (the writer may start later), or an
  // s3://BUCKET/PREFIX URL (FORMAT.md §6.1: an s3:// write is seen whole, once its manifest is
  // put). `options` as for Dataset::Open, applied to every snapshot.
  static Result<std::unique_ptr<DatasetFollower>> Open(const std::string& path,
                                                      const DatasetOptions& options = {});
  virtual ~DatasetFollower() = default;

  // Looks for what the writers committed since the last call. Bounded work: a few file checks
  // per writer and at most 64 MiB of journal. Errors: Corruption naming the file and sample
  // when the write violates FORMAT.md §6.1 (a damaged journal, a shard shorter than its journal
  // says, a write replaced under the follower), I/O errors. A writer that stopped or died is
  // not an error: nothing new arrives (progress().waiting_for says what is awaited).
  [[nodiscard]] virtual Status Poll() = 0;
  virtual FollowProgress progress() const = 0;
  // The first progress().samples samples of the arrival order as a Dataset whose index i is
  // arrival i (for one writer, the dataset's own index i), immutable (take a new one after
  // Poll). Reads check every byte as Dataset's do. NotFound until a writer has written its
  // schema (a journal header); an empty Dataset until the first sample arrives.
  virtual Result<std::shared_ptr<Dataset>> Snapshot() = 0;
  virtual const std::string& path() const = 0;
};

}  // namespace libshard
