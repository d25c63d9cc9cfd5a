// The upload journal of a write to an object store (docs/CACHE.md §6): `upload.journal` in the
// staging directory, one text line per event, "upload NAME SIZE UPLOAD_ID" and "done NAME SIZE
// ETAG", appended and fsynced; a torn last line is ignored. Untrusted input (a file on disk): names
// are plain file names, fields bounded. Bytes only, no system calls (fuzz/upload_journal_fuzz.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace libshard::remote {

struct UploadRecord {
  uint64_t size = 0;
  std::string value;  // the upload id ("upload") or the ETag ("done")
};

struct UploadJournal {
  std::map<std::string, UploadRecord> uploads;  // the last "upload" line of each name
  std::map<std::string, UploadRecord> done;     // the last "done" line of each name
};

inline constexpr size_t kMaxJournalField = 1024;
// Complete lines only; a line that is not one of the two kinds, names no plain file name (no
// '/', not "." or "..", at most 255 bytes), or has a field over kMaxJournalField bytes or a size
// that is not a number is skipped.
UploadJournal ParseUploadJournal(std::string_view text);

}  // namespace libshard::remote
