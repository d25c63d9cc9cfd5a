// Uploader (see uploader.h).
#include "remote/uploader.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "io/file.h"
#include "io/filesystem.h"
#include "objstore/etag_check.h"
#include "objstore/md5.h"
#include "remote/upload_journal.h"
#include "remote/upload_verify.h"
#include "util/env_knobs.h"

namespace libshard::remote {
namespace {

using objstore::CheckEtag;
using objstore::EtagCheck;
using objstore::EtagOfMd5;
using objstore::Md5;
using objstore::Md5Digest;
using objstore::MultipartEtag;
using objstore::SameEtag;

constexpr const char* kJournalName = "upload.journal";
constexpr uint64_t kKeepHead = 4096;  // UploadOptions::free_uploaded keeps a shard's header

using Recorded = UploadRecord;

// One file being uploaded. Its parts finish on any thread; the last one completes the upload.
struct FileJob {
  std::string path;
  std::string name;
  io::File file;
  uint64_t size = 0;
  uint64_t part_size = 0;
  uint32_t parts_total = 0;
  std::string upload_id;
  std::map<uint32_t, objstore::UploadPart> listed;  // parts already up (resume)
  std::mutex mu;
  std::vector<objstore::UploadPart> parts;
  std::vector<Md5Digest> digests;  // each part's MD5, as sent (UploadOptions::content_md5)
  bool verifiable = true;          // every part's ETag was its MD5 (so the object's is checked)
  uint32_t remaining = 0;
  bool failed = false;
};

// "PUT scheme://b/p/NAME part 3 (bytes 0-99 of PATH)" for messages.
std::string PartWhere(const std::string& url, uint32_t part, uint64_t offset, uint64_t length,
                      const std::string& path) {
  return "PUT " + url + (part > 0 ? " part " + std::to_string(part) : std::string()) +
         " (bytes " + std::to_string(offset) + "-" + std::to_string(offset + length - 1) + " of " +
         path + ")";
}

}  // namespace

struct Uploader::State {
  std::string prefix;
  std::shared_ptr<objstore::ObjectStore> store;
  objstore::StoreStats at_open;  // the store's counts when this Uploader began
  std::string staging;
  UploadOptions options;

  mutable std::mutex mu;
  std::condition_variable work_cv;
  std::condition_variable done_cv;
  std::deque<std::function<void()>> tasks;
  std::vector<std::thread> threads;
  bool stop = false;
  uint64_t pending_files = 0;
  Status error;
  std::set<std::string> queued;
  std::map<std::string, Recorded> uploads;  // journal "upload" lines
  std::map<std::string, Recorded> done;     // journal "done" lines
  io::File journal;
  uint64_t journal_size = 0;
  UploadStats stats;

  void Fail(const Status& st) {
    std::lock_guard<std::mutex> g(mu);
    if (error.ok()) error = st;
    done_cv.notify_all();
  }

  // Appends one line to the journal and syncs it; under `mu`.
  Status JournalLocked(const std::string& line) {
    const std::string text = line + "\n";
    LIBSHARD_RETURN_IF_ERROR(journal.PWriteAll(text.data(), text.size(), journal_size));
    journal_size += text.size();
    return journal.Sync();
  }
  Status Journal(const std::string& line) {
    std::lock_guard<std::mutex> g(mu);
    return JournalLocked(line);
  }

  void FinishFile(FileJob& job, const Status& st, const std::string& etag) {
    if (st.ok()) {
      Status js = Journal("done " + job.name + " " + std::to_string(job.size) + " " + etag);
      if (!js.ok()) {
        FinishFile(job, js, {});
        return;
      }
    }
    if (st.ok() && options.free_uploaded && job.size > kKeepHead) {
      // Best effort: the bytes are safe on the server either way.
      job.file.PunchHole(kKeepHead, job.size - kKeepHead).IgnoreError();
    }
    std::lock_guard<std::mutex> g(mu);
    if (!st.ok() && error.ok()) error = st;
    if (st.ok()) {
      ++stats.objects;
      done[job.name] = Recorded{job.size, etag};
    }
    --pending_files;
    done_cv.notify_all();
  }

  void Push(std::function<void()> task, bool front) {
    std::lock_guard<std::mutex> g(mu);
    if (front) {
      tasks.push_front(std::move(task));
    } else {
      tasks.push_back(std::move(task));
    }
    work_cv.notify_one();
  }

  std::string UrlOf(const std::string& name) const { return prefix + "/" + name; }

  // SendChecked (upload_verify.h) with this Uploader's settings, counted in its stats.
  Result<objstore::ObjectInfo> Send(
      std::string_view data, const std::string& where,
      const std::function<Result<objstore::ObjectInfo>(const std::string&)>& send,
      Md5Digest* digest, bool* verified) {
    Result<CheckedSend> r =
        SendChecked(data, options.content_md5, store->max_attempts(), where, send,
                    store->max_attempts_setting());
    if (!r.ok()) return r.status();
    {
      std::lock_guard<std::mutex> g(mu);
      stats.etag_mismatches += r->mismatches;
      stats.unverifiable += r->unverifiable ? 1 : 0;
    }
    *digest = r->digest;
    *verified = r->verified;
    return r->reply;
  }

  void Worker() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lk(mu);
        work_cv.wait(lk, [&] { return stop || !tasks.empty(); });
        if (stop) return;
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      task();
    }
  }

  void StartFile(const std::shared_ptr<FileJob>& job) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (!error.ok()) {
        --pending_files;
        done_cv.notify_all();
        return;
      }
    }
    Result<uint64_t> size = job->file.Size();
    if (!size.ok()) return FinishFile(*job, size.status(), {});
    job->size = *size;
    std::optional<Recorded> was_done, was_started;
    {
      std::lock_guard<std::mutex> g(mu);
      if (auto it = done.find(job->name); it != done.end()) was_done = it->second;
      if (auto it = uploads.find(job->name); it != uploads.end()) was_started = it->second;
    }
    if (was_done && was_done->size == job->size) {
      // Finished by an earlier run: kept when the server still has it with that size and the
      // ETag recorded when it was finished.
      Result<objstore::ObjectInfo> info = store->Head(job->name);
      if (info.ok() && info->size == job->size && SameEtag(info->generation, was_done->value)) {
        std::lock_guard<std::mutex> g(mu);
        ++stats.objects;
        --pending_files;
        done_cv.notify_all();
        return;
      }
      if (!info.ok() && info.status().code() != StatusCode::kNotFound)
        return FinishFile(*job, info.status(), {});
      if (options.free_uploaded)
        return FinishFile(
            *job,
            Status::Corruption(
                UrlOf(job->name) + ": " +
                (info.ok() ? "the bucket holds " + std::to_string(info->size) +
                                 " bytes with ETag " + info->generation + ", but " +
                                 std::to_string(job->size) + " bytes with ETag " +
                                 was_done->value + " were uploaded"
                           : std::string("uploaded before, but gone from the bucket")) +
                ", and its local copy in " + staging +
                " was freed once it was up, so it cannot be sent again; delete that staging "
                "directory and write the dataset again"),
            {});
    }
    job->part_size = std::max<uint64_t>(options.part_size,
                                       (job->size + objstore::kMaxParts - 1) / objstore::kMaxParts);
    if (job->size <= job->part_size) {
      std::string data(job->size, '\0');
      Status st = job->file.PReadExact(data.data(), data.size(), 0);
      if (!st.ok()) return FinishFile(*job, st, {});
      Md5Digest digest{};
      bool verified = false;
      Result<objstore::ObjectInfo> reply = Send(
          data, PartWhere(UrlOf(job->name), 0, 0, data.size(), job->path),
          [&](const std::string& md5) {
            return store->Write(job->name, data, objstore::WriteOptions{md5, false});
          },
          &digest, &verified);
      if (reply.ok()) {
        std::lock_guard<std::mutex> g(mu);
        ++stats.parts_uploaded;
        stats.bytes_uploaded += data.size();
      }
      return FinishFile(*job, reply.status(), reply.ok() ? reply->generation : std::string());
    }
    job->parts_total = static_cast<uint32_t>((job->size + job->part_size - 1) / job->part_size);
    if (was_started && was_started->size == job->size) {
      Result<std::vector<objstore::UploadPart>> listed =
          store->ListParts(job->name, was_started->value);
      if (listed.ok()) {
        job->upload_id = was_started->value;
        for (objstore::UploadPart& p : *listed) job->listed.emplace(p.number, std::move(p));
      } else if (listed.status().code() == StatusCode::kNotFound) {
        // The upload is gone: completed (killed before "done" was journaled) or aborted. The
        // object is kept when its ETag is the one the local bytes' parts make.
        Result<objstore::ObjectInfo> info = store->Head(job->name);
        const std::string suffix = "-" + std::to_string(job->parts_total) + "\"";
        if (info.ok() && info->size == job->size && info->generation.size() > suffix.size() &&
            info->generation.ends_with(suffix)) {
          Result<bool> same = SameAsLocal(*job, info->generation, info->encryption);
          if (!same.ok()) return FinishFile(*job, same.status(), {});
          if (*same) return FinishFile(*job, Status::OK(), info->generation);
        }
      } else {
        return FinishFile(*job, listed.status(), {});
      }
    }
    if (job->upload_id.empty()) {
      Result<std::string> id = store->BeginUpload(job->name);
      if (!id.ok()) return FinishFile(*job, id.status(), {});
      job->upload_id = *id;
      Status js;
      {
        std::lock_guard<std::mutex> g(mu);
        uploads[job->name] = Recorded{job->size, *id};
        js = JournalLocked("upload " + job->name + " " + std::to_string(job->size) + " " + *id);
      }
      if (!js.ok()) return FinishFile(*job, js, {});
    }
    job->parts.resize(job->parts_total);
    job->digests.resize(job->parts_total);
    job->remaining = job->parts_total;
    // The parts go to the front of the queue (part 1 first): one file's parts are finished
    // before the next file starts, which bounds the memory in flight and the unfinished uploads.
    std::lock_guard<std::mutex> g(mu);
    for (uint32_t n = job->parts_total; n >= 1; --n) {
      tasks.push_front([this, job, n] { UploadPart(job, n); });
      work_cv.notify_one();
    }
  }

  void UploadPart(const std::shared_ptr<FileJob>& job, uint32_t n) {
    const uint64_t offset = uint64_t{n - 1} * job->part_size;
    const uint64_t length = std::min(job->part_size, job->size - offset);
    Status st;
    std::string etag;
    bool skip;
    {
      std::lock_guard<std::mutex> g(job->mu);
      skip = job->failed;
    }
    {
      std::lock_guard<std::mutex> g(mu);
      skip = skip || !error.ok();
    }
    if (!skip) {
      std::string data(length, '\0');
      st = job->file.PReadExact(data.data(), length, offset);
      if (st.ok()) {
        auto it = job->listed.find(n);
        // A part up already (resume) is kept when its ETag is the MD5 of these bytes.
        Md5Digest digest{};
        if (it != job->listed.end() && it->second.size == length) digest = Md5(data);
        if (it != job->listed.end() && it->second.size == length &&
            SameEtag(it->second.generation, EtagOfMd5(digest))) {
          etag = it->second.generation;  // up already, with these bytes
          {
            std::lock_guard<std::mutex> g(job->mu);
            job->digests[n - 1] = digest;
          }
          std::lock_guard<std::mutex> g(mu);
          ++stats.parts_skipped;
        } else {
          Md5Digest sent{};
          bool verified = false;
          Result<objstore::ObjectInfo> r = Send(
              data, PartWhere(UrlOf(job->name), n, offset, length, job->path),
              [&](const std::string& md5) {
                return store->WritePart(job->name, job->upload_id, n, data, md5);
              },
              &sent, &verified);
          if (r.ok()) {
            etag = r->generation;
            {
              std::lock_guard<std::mutex> g(job->mu);
              job->digests[n - 1] = sent;
              job->verifiable = job->verifiable && verified;
            }
            std::lock_guard<std::mutex> g(mu);
            ++stats.parts_uploaded;
            stats.bytes_uploaded += length;
          } else {
            st = r.status();
          }
        }
      }
    }
    bool last;
    bool failed;
    {
      std::lock_guard<std::mutex> g(job->mu);
      if (!st.ok() || skip) job->failed = true;
      job->parts[n - 1] = objstore::UploadPart{n, length, etag};
      last = --job->remaining == 0;
      failed = job->failed;
    }
    if (!st.ok()) Fail(st);
    if (!last) return;
    if (failed) {
      // The upload stays (its parts are reused by a resume); the error is already recorded.
      std::lock_guard<std::mutex> g(mu);
      --pending_files;
      done_cv.notify_all();
      return;
    }
    Result<objstore::ObjectInfo> completed =
        store->CompleteUpload(job->name, job->upload_id, job->parts);
    if (completed.ok() && options.content_md5 && job->verifiable) {
      const std::string expected = MultipartEtag(job->digests);
      if (CheckEtag(completed->generation, expected, completed->encryption) ==
          EtagCheck::kMismatch)
        return FinishFile(*job,
                          Status::IoError("POST " + UrlOf(job->name) + "?uploadId=" +
                                              job->upload_id + ": the completed object's ETag " +
                                              completed->generation + " is not the " + expected +
                                              " its parts make (the server assembled other "
                                              "bytes); nothing was committed",
                                          EIO),
                          {});
    }
    FinishFile(*job, completed.status(),
               completed.ok() ? completed->generation : std::string());
  }

  // Whether `etag` (a completed object's) is the one the local file's parts make; true when it
  // cannot tell (content_md5 off, or the server's ETags are no MD5s).
  Result<bool> SameAsLocal(FileJob& job, const std::string& etag, const std::string& encryption) {
    if (!options.content_md5) return true;
    std::vector<Md5Digest> digests(job.parts_total);
    std::string data;
    for (uint32_t n = 1; n <= job.parts_total; ++n) {
      const uint64_t offset = uint64_t{n - 1} * job.part_size;
      data.resize(std::min(job.part_size, job.size - offset));
      LIBSHARD_RETURN_IF_ERROR(job.file.PReadExact(data.data(), data.size(), offset));
      digests[n - 1] = Md5(data);
    }
    return CheckEtag(etag, MultipartEtag(digests), encryption) != EtagCheck::kMismatch;
  }
};

Uploader::Uploader(std::unique_ptr<State> state) : s_(std::move(state)) {}

Uploader::~Uploader() {
  {
    std::lock_guard<std::mutex> g(s_->mu);
    s_->stop = true;
    s_->tasks.clear();
  }
  s_->work_cv.notify_all();
  for (std::thread& t : s_->threads) t.join();
}

Result<std::unique_ptr<Uploader>> Uploader::Open(std::shared_ptr<objstore::ObjectStore> store,
                                                 const std::string& staging_dir, bool fresh,
                                                 UploadOptions options) {
  auto s = std::make_unique<State>();
  s->prefix = store->url().ToString();
  s->at_open = store->stats();
  s->store = std::move(store);
  s->staging = staging_dir;
  s->options = options;
  const std::string journal_path = internal::JoinPath(staging_dir, kJournalName);
  if (internal::PathExists(journal_path)) {
    LIBSHARD_ASSIGN_OR_RETURN(std::string text,
                              internal::ReadWholeFile(journal_path, uint64_t{64} << 20));
    UploadJournal journal = ParseUploadJournal(text);  // complete lines only
    s->uploads = std::move(journal.uploads);
    s->done = std::move(journal.done);
    if (fresh) {
      // A new write replaces whatever an earlier one left: its unfinished uploads are aborted.
      for (const auto& [name, rec] : s->uploads)
        if (!s->done.count(name)) s->store->AbortUpload(name, rec.value).IgnoreError();
      s->uploads.clear();
      s->done.clear();
      LIBSHARD_RETURN_IF_ERROR(internal::RemoveFile(journal_path));
    }
  }
  LIBSHARD_ASSIGN_OR_RETURN(s->journal, io::File::Open(journal_path, O_WRONLY | O_CREAT));
  LIBSHARD_ASSIGN_OR_RETURN(s->journal_size, s->journal.Size());
  std::unique_ptr<Uploader> up(new Uploader(std::move(s)));
  State* st = up->s_.get();
  for (uint32_t i = 0; i < std::max<uint32_t>(1, options.threads); ++i)
    st->threads.emplace_back([st] { st->Worker(); });
  return up;
}

void Uploader::Enqueue(const std::string& path, const std::string& name) {
  auto job = std::make_shared<FileJob>();
  job->path = path;
  job->name = name;
  {
    std::lock_guard<std::mutex> g(s_->mu);
    if (s_->queued.count(name)) return;
  }
  // Opened now: the caller may rename the file (a Writer's Finish renames SHARD.tmp) before a
  // thread gets to it.
  Result<io::File> f = io::File::Open(path, s_->options.free_uploaded ? O_RDWR : O_RDONLY);
  if (!f.ok()) {
    s_->Fail(f.status().WithContext("upload of " + name));
    return;
  }
  job->file = std::move(*f);
  {
    std::lock_guard<std::mutex> g(s_->mu);
    if (!s_->queued.insert(name).second) return;
    ++s_->pending_files;
  }
  State* st = s_.get();
  s_->Push([st, job] { st->StartFile(job); }, /*front=*/false);
}

Status Uploader::error() const {
  std::lock_guard<std::mutex> g(s_->mu);
  return s_->error;
}

Status Uploader::Wait() {
  std::unique_lock<std::mutex> lk(s_->mu);
  s_->done_cv.wait(lk, [&] { return s_->pending_files == 0 || !s_->error.ok(); });
  return s_->error;
}

Status Uploader::PutNow(const std::string& name, std::string_view data) {
  Md5Digest digest{};
  bool verified = false;
  Result<objstore::ObjectInfo> reply = s_->Send(
      data, "PUT " + s_->UrlOf(name),
      [&](const std::string& md5) {
        return s_->store->Write(name, data, objstore::WriteOptions{md5, false});
      },
      &digest, &verified);
  std::lock_guard<std::mutex> g(s_->mu);
  if (reply.ok()) {
    ++s_->stats.parts_uploaded;
    s_->stats.bytes_uploaded += data.size();
    ++s_->stats.objects;
    s_->done[name] = Recorded{data.size(), reply->generation};
  }
  return reply.status();
}

Result<objstore::ObjectInfo> Uploader::HeadNow(const std::string& name) {
  return s_->store->Head(name);
}

void Uploader::AbortLeftovers(const std::vector<std::string>& names) {
  Result<std::vector<objstore::PendingUpload>> uploads = s_->store->ListUploads();
  if (!uploads.ok()) return;
  const std::set<std::string> wanted(names.begin(), names.end());
  for (const objstore::PendingUpload& u : *uploads)
    if (wanted.count(u.name)) s_->store->AbortUpload(u.name, u.upload_id).IgnoreError();
}

std::optional<objstore::ObjectInfo> Uploader::Finished(const std::string& name) const {
  std::lock_guard<std::mutex> g(s_->mu);
  auto it = s_->done.find(name);
  if (it == s_->done.end()) return std::nullopt;
  return objstore::ObjectInfo{it->second.size, it->second.value, {}};
}

objstore::ObjectStore& Uploader::store() const { return *s_->store; }

UploadStats Uploader::stats() const {
  const objstore::StoreStats now = s_->store->stats();
  std::lock_guard<std::mutex> g(s_->mu);
  UploadStats out = s_->stats;
  out.requests = now.requests - s_->at_open.requests;
  out.retries = now.retries - s_->at_open.retries;
  return out;
}

const std::string& Uploader::prefix() const { return s_->prefix; }

}  // namespace libshard::remote
