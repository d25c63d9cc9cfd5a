// PartFollower: one writer's output directory followed while it is written (FORMAT.md §6.1):
// the dataset directory of a single writer, or one part of a multi-rank write (§7.1). It reads
// the journal's new samples (follow/journal_tail.h) until the writer commits, then the rest from
// the committed index, checking on the way that the two agree; it opens the shard files the
// samples live in and checks each sample's extent against the file.
//
// Not thread-safe: one follower polls it. Its shard files may be read from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "follow/journal_tail.h"
#include "format/index.h"
#include "format/journal.h"
#include "io/file.h"
#include "libshard/dataset.h"

namespace libshard::follow {

// A shard file of the followed write, held open from its first journaled sample on, so a rename
// (`NAME.tmp` to `NAME` at the commit, back at a resume, FORMAT.md §6) does not lose it.
struct FollowedShard {
  uint32_t number = 0;
  std::string name;      // "shard-00003.lss"
  io::File file;
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t uid = 0;      // from its header (§4.1)
  uint64_t size = 0;     // bytes the file had when last looked at
  uint64_t samples = 0;  // samples read that live in it
};

class PartFollower {
 public:
  enum class State { kNotStarted, kWriting, kComplete, kEmpty };

  // `dir`: the writer's directory; `empty_marker`: the part's `.empty` file (§7.1), "" for a
  // single writer.
  PartFollower(std::string dir, std::string empty_marker, DatasetOptions options);

  // Looks again; appends the samples found since the last call to `out` (their record.shard is
  // the part's own shard number: Shard() gives its file). Errors: Corruption naming the file
  // and the sample (FORMAT.md §6.1), I/O errors.
  [[nodiscard]] Status Poll(std::vector<format::IndexSample>* out);

  State state() const { return state_; }
  bool finished() const { return state_ == State::kComplete || state_ == State::kEmpty; }
  uint64_t samples() const { return samples_; }
  const std::string& dir() const { return dir_; }
  // The journal header (or the committed dataset's schema, codecs and field checksums), once
  // the writer has one.
  const std::optional<format::JournalHeader>& header() const { return header_; }
  // The shard file of shard `number` of this part; null when no sample read lives there.
  FollowedShard* Shard(uint32_t number);
  // Where the shard's file is now: `NAME` once renamed, else `NAME.tmp`.
  std::string CurrentPath(const FollowedShard& shard) const;
  // What the follower waits for from this writer, in words (for a waiting follower's warning).
  std::string WaitingFor() const;

 private:
  // Opens the file of shard `number` (first use) and checks that it holds [offset, end) of a
  // sample; `sample` and `where` name it in messages.
  [[nodiscard]] Status CheckExtent(uint32_t number, uint64_t end, uint64_t sample,
                                   const std::string& where);
  [[nodiscard]] Status OpenShard(uint32_t number, const std::string& where);
  // The writer committed: checks the committed dataset against what was read, reads the rest.
  [[nodiscard]] Status Complete(std::vector<format::IndexSample>* out);
  [[nodiscard]] Status SetHeader(format::JournalHeader header, const std::string& where);

  // What was read of each sample, to check the committed index against.
  struct ReadRecord {
    uint64_t offset, stored_size, checksum;
    uint32_t shard;
  };

  std::string dir_;
  std::string marker_;
  DatasetOptions options_;
  State state_ = State::kNotStarted;
  JournalTail journal_;
  std::optional<format::JournalHeader> header_;
  uint64_t samples_ = 0;
  std::vector<ReadRecord> read_;
  std::map<uint32_t, std::unique_ptr<FollowedShard>> shards_;
};

}  // namespace libshard::follow
