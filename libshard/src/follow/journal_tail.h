// JournalTail: one writer's journal (`_journal.lsj`, FORMAT.md §6) read while the writer still
// appends to it, as a follower reads it (§6.1). Untrusted input like any dataset file:
//   - bounded: a Poll reads at most kMaxPollBytes of new entries, an entry is read only once the
//     file holds it whole and only up to kMaxJournalEntryBytes, and nothing is allocated from a
//     count before the bytes that back it are there;
//   - never a symlink or a FIFO (O_NOFOLLOW, io::File's non-blocking open);
//   - a torn or damaged tail is "not written yet": read again at the next Poll, never past;
//   - the journal replaced (another inode), shortened below what was read, or its last entry read
//     changed: the followed stream is gone, Corruption;
//   - every sample handed out passed format::CheckJournalSample.
// Not thread-safe: one follower polls it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "format/index.h"
#include "format/journal.h"
#include "io/file.h"
#include "libshard/status.h"

namespace libshard::follow {

// Largest journal entry a follower reads (FORMAT.md §6.1); a writer's entry covers at most
// journal_every_bytes of samples of at least 4 KiB each, a few hundred bytes a sample.
inline constexpr uint64_t kMaxJournalEntryBytes = uint64_t{1} << 30;
// New journal bytes one Poll reads at most (more are read at the next one).
inline constexpr uint64_t kMaxPollBytes = uint64_t{64} << 20;

class JournalTail {
 public:
  explicit JournalTail(std::string path) : path_(std::move(path)) {}

  // Reads the good entries appended since the last call and appends their samples to `out`.
  // NotFound when there is no journal at the path (the writer has not started, or it committed
  // and removed it: the caller looks for the manifest first). Corruption (naming the journal and
  // the sample) as the file comment says.
  [[nodiscard]] Status Poll(std::vector<format::IndexSample>* out);

  const std::string& path() const { return path_; }
  bool has_header() const { return has_header_; }
  const format::JournalHeader& header() const { return header_; }  // once has_header()
  uint64_t samples() const { return samples_; }                    // samples handed out
  // Bytes of good entries read, and whether the last Poll stopped at an entry it could not read
  // yet (incomplete, damaged, or larger than kMaxJournalEntryBytes): what a waiting follower says.
  uint64_t good_bytes() const { return offset_; }
  bool stalled() const { return stalled_; }

 private:
  // Opens the journal (first call) or checks that the path still names the file read so far.
  [[nodiscard]] Status CheckIdentity();

  std::string path_;
  io::File file_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  uint64_t offset_ = 0;  // end of the last good entry read
  bool has_header_ = false;
  format::JournalHeader header_;
  uint64_t samples_ = 0;
  bool stalled_ = false;
  // The trailing xxh3 of the last good entry read (at offset_ - 8): it must not change.
  uint64_t last_sum_ = 0;
};

}  // namespace libshard::follow
