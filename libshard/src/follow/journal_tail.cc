#include "follow/journal_tail.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "format/bytes.h"

namespace libshard::follow {

Status JournalTail::CheckIdentity() {
  if (!file_.valid()) {
    Result<io::File> opened = io::File::Open(path_, O_RDONLY | O_NOFOLLOW);
    if (!opened.ok()) {
      if (opened.status().code() == StatusCode::kNotFound) return opened.status();
      return opened.status().WithContext("following the write");
    }
    struct stat st {};
    if (::fstat(opened->fd(), &st) != 0) return Status::FromErrno(errno, "fstat " + path_);
    file_ = std::move(opened).value();
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    return Status::OK();
  }
  struct stat st {};
  if (::lstat(path_.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound(path_ + ": no such file (the writer committed)");
    return Status::FromErrno(errno, "lstat " + path_);
  }
  if (st.st_dev != dev_ || st.st_ino != ino_)
    return Status::Corruption(
        path_ + ": the journal was replaced by another file after " + std::to_string(samples_) +
        " samples were read from it: a new write of the directory began, and the stream this "
        "follower followed is gone; start a new follower (Loader) on the new write");
  return Status::OK();
}

Status JournalTail::Poll(std::vector<format::IndexSample>* out) {
  LIBSHARD_RETURN_IF_ERROR(CheckIdentity());
  LIBSHARD_ASSIGN_OR_RETURN(const uint64_t size, file_.Size());
  if (size < offset_)
    return Status::Corruption(path_ + ": the journal is " + std::to_string(size) +
                              " bytes, shorter than the " + std::to_string(offset_) +
                              " bytes of good entries already read: it was rewritten, and the "
                              "stream this follower followed is gone");
  if (offset_ >= 8) {
    std::byte sum[8];
    LIBSHARD_RETURN_IF_ERROR(file_.PReadExact(sum, 8, offset_ - 8));
    if (format::GetU64(sum) != last_sum_)
      return Status::Corruption(path_ + ": the journal entry ending at byte " +
                                std::to_string(offset_) + " changed after it was read: the "
                                "journal was rewritten, and the stream this follower followed "
                                "is gone");
  }
  stalled_ = false;
  uint64_t read_now = 0;
  std::vector<std::byte> entry;
  std::vector<format::IndexSample> batch;
  while (offset_ < size && read_now < kMaxPollBytes) {
    const uint64_t left = size - offset_;
    std::byte head[16];
    if (left < format::kJournalEntryOverhead) {
      stalled_ = true;
      break;
    }
    LIBSHARD_RETURN_IF_ERROR(file_.PReadExact(head, sizeof head, offset_));
    const uint64_t payload = format::GetU64(head + 8);
    if (payload > kMaxJournalEntryBytes - format::kJournalEntryOverhead ||
        payload + format::kJournalEntryOverhead > left) {
      stalled_ = true;  // not written whole yet (or damaged: wait for the writer or its commit)
      break;
    }
    const uint64_t entry_size = payload + format::kJournalEntryOverhead;
    entry.resize(entry_size);
    LIBSHARD_RETURN_IF_ERROR(file_.PReadExact(entry.data(), entry_size, offset_));
    uint64_t used = 0;
    if (!has_header_) {
      LIBSHARD_ASSIGN_OR_RETURN(used, format::ParseJournalHeaderEntry(entry, path_, &header_));
      has_header_ = used != 0;
    } else {
      batch.clear();
      used = format::ParseJournalSamplesEntry(entry, header_, samples_, &batch);
      for (size_t k = 0; used != 0 && k < batch.size(); ++k) {
        Status st = format::CheckJournalSample(header_, batch[k]);
        if (!st.ok())
          return Status::Corruption(path_ + ": sample " + std::to_string(samples_ + k) +
                                    " (entry at byte " + std::to_string(offset_) +
                                    "): " + st.message() +
                                    "; the journal is damaged: the write cannot be followed");
      }
    }
    if (used != entry_size) {
      stalled_ = true;  // a torn or damaged entry: read again at the next Poll
      break;
    }
    for (format::IndexSample& s : batch) out->push_back(std::move(s));
    samples_ += batch.size();
    batch.clear();
    last_sum_ = format::GetU64(entry.data() + entry_size - 8);
    offset_ += entry_size;
    read_now += entry_size;
  }
  return Status::OK();
}

}  // namespace libshard::follow
