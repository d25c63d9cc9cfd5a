#include "pack/pack.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "libshard/dataset.h"
#include "libshard/storage.h"
#include "libshard/parallel_writer.h"
#include "libshard_support/text.h"
#include "libshard/version.h"
#include "pack/file_hash.h"
#include "pack/option_parsing.h"
#include "pack/schema_inference.h"
#include "pack/source_list.h"
#include "readers/layer_split_source.h"

namespace libshard::convert {
namespace fs = std::filesystem;
namespace {

constexpr const char* kSkippedReport = "skipped.txt";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kJournal = "_journal.lsj";

// Prefixes "source PATH" unless the message already names the file.
Status WithSource(const Status& st, const std::string& path) {
  if (st.message().find(path) != std::string::npos) return st;
  return st.WithContext("source " + path);
}

// Runs `fn` (which reads the source `path`) so that nothing it throws escapes: an exception out of
// a worker thread would end the process (std::terminate), and one reaching the user would not
// say which file caused it. std::bad_alloc becomes ResourceExhausted, anything else Internal;
// both name the file and then follow --on-error like any other bad source.
template <typename Fn>
auto Guarded(const std::string& path, OptionSpelling spelling, Fn&& fn) noexcept
    -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(
        "source " + path + ": out of memory while reading it (std::bad_alloc); the file may be "
        "hostile or damaged, or the machine too small for it: check the file, or lower " +
        PackOptionName("threads", spelling) + " / " + PackOptionName("in_flight_bytes", spelling) +
        " / " + PackOptionName("max_decompressed", spelling));
  } catch (const std::exception& e) {
    return Status::Internal("source " + path + ": unexpected error while reading it: " + e.what());
  } catch (...) {
    return Status::Internal("source " + path + ": unexpected error while reading it");
  }
}

std::string OneLine(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return s;
}

class PackJob {
 public:
  // `target`: what the Writer is given, when not o.output (an object-storage URL written
  // through o.output, its staging directory: StorageInfo::work_dir).
  explicit PackJob(const PackOptions& o, std::string target = {})
      : o_(o), target_(target.empty() ? o.output : std::move(target)),
        start_(std::chrono::steady_clock::now()), source_options_(o.source_options) {}

  Result<PackSummary> Run();

 private:
  Status ListAndSelect();
  Status OpenWriter();
  // --resume on a complete dataset: OK with PackSummary::nothing_to_resume when every selected
  // source is in it (or was skipped by the job that made it); else InvalidArgument saying how
  // many sources are not in it and that --append adds them (resume never adds to a finished
  // dataset: a user who added files to SRC must say so).
  Status CheckComplete();
  Status FindReference();
  // Opens, reads and encodes source i (on an encode thread of the ParallelWriter).
  Result<EncodedSample> Process(uint64_t i, const Writer& writer) const;
  // The source as a file (OpenSource, or the cache's sample), wrapped by SplitLayers when
  // --split-layers is given.
  Result<std::unique_ptr<SourceFile>> Open(const SourceEntry& e) const {
    LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<SourceFile> src,
                              e.cache_index ? cache_->OpenSample(*e.cache_index)
                                            : OpenSource(e.path, source_options_));
    if (o_.split_layers.empty()) return src;
    return SplitLayers(std::move(src), o_.split_layers);
  }
  // Opens source_root as a cache when it is one (or --from says so); leaves cache_ null for a
  // directory or list of files.
  Status OpenCacheSource();
  Result<EncodedSample> ProcessGuarded(uint64_t i, const Writer& writer) const {
    return Guarded(sources_[i].path, o_.spelling, [&] { return Process(i, writer); });
  }
  // The committing (calling) thread's part of source `out.seq`: the summary, the skip report,
  // the progress.
  Status OnSourceDone(const JobOutcome& out, const Writer& writer, PackProgress* progress);
  unsigned Threads() const { return AutomaticThreads(o_.threads, WriteDriver::kConversion); }
  Status RecordSkip(const SourceEntry& e, const Status& why);
  Status TrimSkipReport(const std::unordered_map<std::string, size_t>& position, size_t resume_at);
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  WriterOptions MakeWriterOptions() const;
  // A setting as this job's messages name it (PackOptions::spelling).
  std::string F(std::string_view name) const { return PackOptionName(name, o_.spelling); }
  // The library's name for this job's front end (libshard/caller.h): the CLI, or Python's
  // libshard.pack() (the only other caller that spells options by their keywords).
  Caller LibraryCaller() const {
    return o_.spelling == OptionSpelling::kCli ? Caller::kCli : Caller::kPython;
  }

  const PackOptions& o_;
  const std::string target_;
  const std::chrono::steady_clock::time_point start_;
  SourceOptions source_options_;               // o_.source_options with the defaults resolved
  std::unique_ptr<const CacheSource> cache_;   // the cache the sources are samples of, if any
  std::vector<SourceEntry> sources_;           // to process this run, in order
  std::unique_ptr<Writer> writer_;
  ReferenceSchema ref_;
  std::unordered_map<uint64_t, Status> prefailed_;  // sources that failed while finding the reference
  bool keep_subset_ = false;                   // only some tensors of each source are kept
  bool finished_already_ = false;              // --resume on a dataset that is complete
  std::optional<SourceEntry> schema_probe_;    // read for the schema only (an empty --part)
  FILE* skipped_file_ = nullptr;
  PackSummary summary_;
  // OUT's lock, held from before OUT is inspected until Run returns (after Finish), and shared
  // with the Writer through WriterOptions::lock.
  std::shared_ptr<const DatasetLock> lock_;
};

WriterOptions PackJob::MakeWriterOptions() const {
  WriterOptions w = WriterOptions::From(o_);  // the writer configuration's Writer parts, whole
  w.caller = LibraryCaller();
  w.source_root = o_.source_root.empty() ? std::string() : fs::absolute(o_.source_root).lexically_normal().string();
  if (w.created_by.empty()) w.created_by = "libshard pack " LIBSHARD_VERSION_STRING;
  if (cache_) {
    // The cache manifest's keys, under the user's --attr (which win on a clash).
    for (const auto& [k, v] : cache_->attributes()) w.attributes.emplace(k, v);
  }
  w.lock = lock_;
  return w;
}

Status PackJob::OpenCacheSource() {
  const SourceFormat want = o_.source_format;
  if (want == SourceFormat::kFiles) return Status::OK();
  if (!o_.files_from.empty()) {
    if (want == SourceFormat::kAuto) return Status::OK();
    return Status::InvalidArgument(F("source_format") + " " + std::string(SourceFormatName(want)) +
                                   " reads one cache directory (" + F("src") + "), not " +
                                   F("files_from"));
  }
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<LocalCacheDir> dir,
                            LocalCacheDir::OpenDir(o_.source_root));
  SourceFormat format = want;
  if (format == SourceFormat::kAuto) {
    auto detected = DetectSourceFormat(*dir, source_options_);
    if (!detected.ok())
      return Status(detected.status().code(),
                    detected.status().message() + " (" + F("source_format") + " files packs the "
                    "directory's files one by one)");
    format = *detected;
  }
  summary_.source_format = format;
  if (format == SourceFormat::kFiles) return Status::OK();
  auto cache = OpenCache(std::move(dir), format, source_options_);
  if (!cache.ok())
    return cache.status().WithContext("source " + o_.source_root + " (" +
                                      std::string(SourceFormatName(format)) + " cache)");
  summary_.omitted_attributes = (*cache)->omitted_keys();
  cache_ = std::move(*cache);
  return Status::OK();
}

Status PackJob::ListAndSelect() {
  LIBSHARD_RETURN_IF_ERROR(OpenCacheSource());
  SourceListOptions lo;
  lo.root = o_.source_root;
  lo.files_from = o_.files_from;
  lo.include = o_.include;
  lo.exclude = o_.exclude;
  lo.skip_dir = o_.output;
  std::vector<SourceEntry> all;
  if (cache_) {
    all = ListCacheSources(*cache_, lo);
  } else {
    LIBSHARD_ASSIGN_OR_RETURN(all, ListSources(lo));
  }
  if (all.empty() && cache_) {
    return Status::NotFound("no samples to pack in the " +
                            std::string(SourceFormatName(cache_->format())) + " cache " +
                            o_.source_root +
                            (o_.include.empty() && o_.exclude.empty()
                                 ? std::string(" (it is empty)")
                                 : " matching the " + F("include") + "/" + F("exclude") + " globs"));
  }
  if (all.empty()) {
    return Status::NotFound("no source files found in " +
                            (o_.files_from.empty() ? o_.source_root : o_.files_from) +
                            (o_.include.empty() ? " (looked for .pt .pth .ckpt .bin .safetensors, "
                                                  "optionally .gz; use " + F("include") +
                                                      " to select others)"
                                                : " matching the " + F("include") + "/" +
                                                      F("exclude") + " globs"));
  }
  const PartRange r = PartSlice(all.size(), o_.part_index, o_.part_count);
  // An empty part still yields a (sample-less) dataset with the common schema, so that `merge`
  // of all parts works whatever N is.
  if (r.begin == r.end) schema_probe_ = all.front();
  sources_.assign(std::make_move_iterator(all.begin() + static_cast<ptrdiff_t>(r.begin)),
                  std::make_move_iterator(all.begin() + static_cast<ptrdiff_t>(r.end)));
  summary_.sources_selected = sources_.size();
  return Status::OK();
}

Status PackJob::OpenWriter() {
  {
    std::error_code ec;
    // --append needs an existing dataset: a missing OUT is left to OpenForAppend's message.
    if (!o_.append || fs::exists(o_.output, ec)) {
      auto lock =
          DatasetLock::Acquire(o_.output, /*create_directory=*/!o_.append, LibraryCaller());
      if (!lock.ok()) return lock.status();
      lock_ = std::move(*lock);
    }
  }
  const WriterOptions wo = MakeWriterOptions();
  std::error_code ec;
  // What OUT holds must have this job's identity (its --attr and a cache's manifest): refused on
  // a difference, or set aside with allow_identity_change, and then OUT is written afresh.
  if ((o_.append || o_.resume) && lock_) {
    auto aside = CheckWriteIdentity(o_.output, wo);
    if (!aside.ok())
      return aside.status().WithContext(F(o_.append ? "append" : "resume") + ": " + o_.output);
    summary_.set_aside = std::move(*aside);
  }
  const bool afresh = !summary_.set_aside.empty();
  const bool has_manifest = fs::exists(fs::path(o_.output) / kManifest, ec);
  const bool has_journal = fs::exists(fs::path(o_.output) / kJournal, ec);
  if (o_.append && !afresh) {
    auto w = Writer::OpenForAppend(target_, wo);
    if (!w.ok()) return w.status().WithContext(F("append") + ": cannot open " + o_.output);
    writer_ = std::move(*w);
  } else if (o_.resume && has_manifest) {
    return CheckComplete();
  } else if (o_.resume && has_journal) {
    auto w = Writer::Resume(target_, wo);
    if (!w.ok()) return w.status().WithContext(F("resume") + ": cannot resume " + o_.output);
    writer_ = std::move(*w);
  } else {
    // A fresh job (also --resume when nothing was journaled yet).
    if (has_manifest || has_journal) {
      return Status::AlreadyExists(
          o_.output + " already holds a " + (has_manifest ? "dataset" : "partly written dataset") +
          "; use " + F("append") + " to add sources to a dataset, " + F("resume") +
          " to continue an interrupted job, "
          "or choose another output directory");
    }
    fs::remove(fs::path(o_.output) / kSkippedReport, ec);  // stale, from a run that never journaled
    return Status::OK();  // created once the schema is known (FindReference)
  }
  // Sources already in the dataset are not redone. Resume keeps the source order of an
  // uninterrupted run: everything up to the last journaled source was handled by the earlier run
  // (sources it skipped are already in skipped.txt).
  const std::vector<SourceFileInfo>& existing = writer_->existing_sources();
  std::unordered_set<std::string> present;
  for (const SourceFileInfo& p : existing) present.insert(p.path);
  std::vector<SourceEntry> todo;
  if (o_.resume) {
    std::unordered_map<std::string, size_t> position;
    for (size_t i = 0; i < sources_.size(); ++i) position.emplace(sources_[i].rel_path, i);
    size_t resume_at = 0;
    for (const SourceFileInfo& p : existing) {
      auto it = position.find(p.path);
      if (it == position.end()) {
        return Status::InvalidArgument(
            F("resume") + ": " + o_.output + " holds sample '" + p.path +
            "', which is not among the sources of this run; resume with the same " + F("src") + ", " +
            F("files_from") + ", " + F("include") + "/" + F("exclude") + " and " + F("part") +
            " as the interrupted job");
      }
      resume_at = std::max(resume_at, it->second + 1);
    }
    summary_.already_present = resume_at;
    LIBSHARD_RETURN_IF_ERROR(TrimSkipReport(position, resume_at));
    todo.assign(sources_.begin() + static_cast<ptrdiff_t>(resume_at), sources_.end());
  } else {
    for (SourceEntry& e : sources_) {
      if (present.count(e.rel_path)) {
        ++summary_.already_present;
      } else {
        todo.push_back(std::move(e));
      }
    }
  }
  sources_ = std::move(todo);
  return Status::OK();
}

Status PackJob::CheckComplete() {
  // Resume on a committed dataset is OpenForAppend (it also removes the journal of a job that
  // was interrupted between its commit and its cleanup); it is only read here, never finished.
  auto w = Writer::Resume(target_, MakeWriterOptions());
  if (!w.ok()) return w.status().WithContext(F("resume") + ": cannot open " + o_.output);
  std::unordered_set<std::string> handled;
  for (const SourceFileInfo& p : (*w)->existing_sources()) handled.insert(p.path);
  const uint64_t samples = (*w)->samples_written();
  // A part (--part I/N, N > 1) holds its slice of the sources and nothing else, as a journal must
  // (OpenWriter): one holding a sample outside it was made with another N or another source
  // selection, and the parts of this run would hold that sample twice. (A whole dataset may hold
  // samples appended from elsewhere.)
  if (o_.part_count > 1) {
    std::unordered_set<std::string> selected;
    for (const SourceEntry& e : sources_) selected.insert(e.rel_path);
    for (const SourceFileInfo& p : (*w)->existing_sources()) {
      if (selected.count(p.path)) continue;
      return Status::InvalidArgument(
          F("resume") + ": " + o_.output + " holds sample '" + p.path + "', which is not among "
          "the sources of this run, so it was made by another job; resume with the same " +
          F("src") + ", " + F("files_from") + ", " + F("include") + "/" + F("exclude") + " and " +
          F("part") + " as the job that made it, or pack into another directory");
    }
  }
  // Sources the job left out with --on-error skip were handled too (skipped.txt: "PATH\tWHY").
  if (FILE* f = std::fopen((fs::path(o_.output) / kSkippedReport).c_str(), "r")) {
    std::string line;
    for (int c; (c = std::fgetc(f)) != EOF;) {
      if (c != '\n') {
        line += static_cast<char>(c);
        continue;
      }
      handled.insert(line.substr(0, line.find('\t')));
      line.clear();
    }
    std::fclose(f);
  }
  std::vector<std::string> missing;
  for (const SourceEntry& e : sources_)
    if (!handled.count(e.rel_path)) missing.push_back(e.rel_path);
  const std::string complete =
      o_.output + " is complete (" + std::to_string(samples) + " samples)";
  if (!missing.empty()) {
    return Status::InvalidArgument(
        F("resume") + ": " + complete + "; nothing to resume. " + std::to_string(missing.size()) +
        " of the " + std::to_string(sources_.size()) + " sources selected (first: " +
        missing.front() + ") are not in it: use " + F("append") + " to add them");
  }
  summary_.already_present = sources_.size();
  summary_.nothing_to_resume = true;
  finished_already_ = true;
  return Status::OK();
}

Status PackJob::FindReference() {
  keep_subset_ = !o_.fields.empty();
  if (writer_ && keep_subset_) {
    std::vector<std::string> names;
    for (const Field& f : writer_->schema().fields) names.push_back(f.name);
    std::vector<std::string> a = names, b = o_.fields;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a != b) {
      return Status::InvalidArgument(F("fields") + " does not match the fields of " + o_.output +
                                     "; omit " + F("fields") + " to keep the dataset's schema");
    }
  }
  const bool probing = sources_.empty() && schema_probe_.has_value();
  const std::vector<SourceEntry> probe = probing ? std::vector<SourceEntry>{*schema_probe_}
                                                 : std::vector<SourceEntry>{};
  const std::vector<SourceEntry>& candidates = probing ? probe : sources_;
  for (uint64_t i = 0; i < candidates.size(); ++i) {
    const SourceEntry& e = candidates[i];
    Result<ReferenceSchema> ref = Guarded(e.path, o_.spelling, [&]() -> Result<ReferenceSchema> {
      if (!e.not_readable.empty()) return Status::InvalidArgument(e.not_readable);
      LIBSHARD_ASSIGN_OR_RETURN(auto src, Open(e));
      return writer_ ? ReferenceFromSchema(writer_->schema(), src->tensors(), e.rel_path,
                                           keep_subset_, o_.spelling)
                     : InferSchema(src->tensors(), o_.fields, e.rel_path, o_.spelling);
    });
    if (ref.ok()) {
      ref_ = std::move(*ref);
      break;
    }
    const Status st = WithSource(ref.status(), e.path);
    if (o_.on_error == OnError::kRaise || probing) return st;
    prefailed_.emplace(i, st);
  }
  if (!writer_) {
    if (!probing && prefailed_.size() == sources_.size()) {
      return Status::InvalidArgument("none of the " + std::to_string(sources_.size()) +
                                     " sources could be read; the first error: " +
                                     prefailed_.begin()->second.ToString());
    }
    auto w = Writer::Create(target_, ref_.schema, MakeWriterOptions());
    if (!w.ok()) {
      return w.status().WithContext(o_.resume ? F("resume") + " found no journal in " + o_.output
                                              : "cannot create " + o_.output +
                                                    " (to continue an interrupted job use " +
                                                    F("resume") + "; to add sources to a dataset use " +
                                                    F("append") + ")");
    }
    writer_ = std::move(*w);
  }
  return Status::OK();
}

Result<EncodedSample> PackJob::Process(uint64_t i, const Writer& writer) const {
  const SourceEntry& e = sources_[i];
  if (auto it = prefailed_.find(i); it != prefailed_.end()) return it->second;
  if (!e.not_readable.empty()) return Status::InvalidArgument(e.not_readable);  // never opened
  auto opened = Open(e);
  if (!opened.ok()) return WithSource(opened.status(), e.path);
  const std::unique_ptr<SourceFile>& src = *opened;
  auto map = MatchSchema(ref_, src->tensors(), e.rel_path, keep_subset_, o_.allow_varying_dims,
                         o_.spelling);
  if (!map.ok()) return map.status();
  SampleInput in;
  in.tensors.reserve(map->size());
  for (size_t f = 0; f < map->size(); ++f) {
    const size_t t = (*map)[f];
    const SourceTensor& st = src->tensors()[t];
    TensorInput ti;
    ti.name = st.name;
    ti.dtype = st.dtype;
    ti.shape = st.shape;
    ti.fill = [&src, t](std::span<std::byte> dst) { return src->ReadTensor(t, dst); };
    in.tensors.push_back(std::move(ti));
  }
  in.metadata = src->metadata();
  in.source.path = e.rel_path;
  in.source.size = e.size;
  in.source.mtime_ns = e.mtime_ns;
  auto enc = writer.Encode(in);
  if (!enc.ok()) return WithSource(enc.status(), e.path);
  if (o_.hash_sources) {
    auto h = e.cache_index ? cache_->HashSample(*e.cache_index) : HashFile(e.path);
    if (!h.ok()) return h.status();
    enc->source.content_hash = *h;
  }
  return enc;
}

Status PackJob::RecordSkip(const SourceEntry& e, const Status& why) {
  // Messages may quote bytes from the file (a zip entry name, a key): escaped unless UTF-8, so the
  // report is text and Python can take the reason as a str.
  const std::string reason = EscapeNonUtf8(why.ToString());
  summary_.skipped.push_back({e.rel_path, reason});
  if (skipped_file_ == nullptr) {
    summary_.skipped_report = (fs::path(o_.output) / kSkippedReport).string();
    skipped_file_ = std::fopen(summary_.skipped_report.c_str(), "a");
    if (skipped_file_ == nullptr) {
      return Status::FromErrno(errno, "cannot write the skip report " + summary_.skipped_report);
    }
  }
  // Flushed per line: a killed job's report stays complete for --resume.
  std::fprintf(skipped_file_, "%s\t%s\n", OneLine(e.rel_path).c_str(), OneLine(reason).c_str());
  std::fflush(skipped_file_);
  return Status::OK();
}

// On --resume, keeps the report lines of sources before the resume point (the earlier run's
// decisions) and drops the rest, which this run redoes.
Status PackJob::TrimSkipReport(const std::unordered_map<std::string, size_t>& position,
                               size_t resume_at) {
  const std::string path = (fs::path(o_.output) / kSkippedReport).string();
  FILE* in = std::fopen(path.c_str(), "r");
  if (in == nullptr) return Status::OK();
  std::string kept, line;
  for (int c; (c = std::fgetc(in)) != EOF;) {
    if (c != '\n') {
      line += static_cast<char>(c);
      continue;
    }
    const std::string rel = line.substr(0, line.find('\t'));
    auto it = position.find(rel);
    if (it != position.end() && it->second < resume_at) kept += line + "\n";
    line.clear();
  }
  std::fclose(in);
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) return Status::FromErrno(errno, "cannot rewrite the skip report " + path);
  const bool ok = std::fwrite(kept.data(), 1, kept.size(), out) == kept.size();
  if (std::fclose(out) != 0 || !ok) return Status::IoError("cannot rewrite the skip report " + path);
  return Status::OK();
}

Status PackJob::OnSourceDone(const JobOutcome& out, const Writer& writer,
                             PackProgress* progress) {
  const SourceEntry& e = sources_[out.seq];
  if (out.append_failed)
    return out.status.WithContext("writing sample " + std::to_string(out.index) + " (" +
                                  e.rel_path + ")");
  if (!out.status.ok()) {
    if (o_.on_error == OnError::kRaise)
      return out.status.WithContext("sample " + std::to_string(writer.samples_written()) + " (" +
                                    e.rel_path + ")");
    LIBSHARD_RETURN_IF_ERROR(RecordSkip(e, out.status));
    ++progress->skipped;
  } else {
    ++summary_.samples_added;
    summary_.bytes_in += e.size;
    summary_.bytes_out += out.stored_size;
    summary_.raw_bytes += out.raw_size;
  }
  ++progress->files_done;
  progress->bytes_done += e.size;
  progress->elapsed_s = Elapsed();
  if (o_.progress) o_.progress(*progress);
  return Status::OK();
}

Result<PackSummary> PackJob::Run() {
  summary_.output = o_.output;
  // Every worker may inflate a gzip source at once: the default limit shares memory among them.
  if (source_options_.max_decompressed_bytes == 0)
    source_options_.max_decompressed_bytes = DefaultMaxDecompressedBytes(Threads());
  source_options_.max_decompressed_name = F("max_decompressed");
  LIBSHARD_RETURN_IF_ERROR(ListAndSelect());
  LIBSHARD_RETURN_IF_ERROR(OpenWriter());
  if (finished_already_) {
    auto ds = Dataset::Open(o_.output);
    if (!ds.ok())
      return ds.status().WithContext(F("resume") + ": " + o_.output + " has a manifest but");
    summary_.already_present = sources_.size();
    summary_.dataset.samples = (*ds)->size();
    summary_.dataset.shards = (*ds)->shards().size();
    summary_.dataset.raw_bytes = (*ds)->total_raw_bytes();
    summary_.dataset.stored_bytes = (*ds)->total_stored_bytes();
    summary_.seconds = Elapsed();
    summary_.peak_rss_bytes = PeakRssBytes();
    return summary_;
  }
  if (!sources_.empty() || !writer_) LIBSHARD_RETURN_IF_ERROR(FindReference());

  uint64_t bytes_total = 0, largest = 1;
  for (const SourceEntry& e : sources_) {
    bytes_total += e.size;
    largest = std::max(largest, e.size);
  }
  const unsigned threads = Threads();
  const uint64_t in_flight = AutomaticInFlightBytes(o_.in_flight_bytes, threads, largest);

  // The parallel writer (libshard/parallel_writer.h): encode threads open, read and encode the
  // sources; this thread's Submit and Flush append them in source order and run OnSourceDone.
  PackProgress progress;
  progress.files_total = sources_.size();
  progress.bytes_total = bytes_total;
  std::unique_ptr<ParallelWriter> pipe;
  if (!sources_.empty()) {
    ParallelWriterOptions po = ParallelWriterOptions::From(o_);
    po.threads = static_cast<unsigned>(std::min<uint64_t>(threads, sources_.size()));
    po.in_flight_bytes = in_flight;
    po.commit_thread = false;  // this thread appends (and reports progress), as it always did
    po.on_job_error = o_.on_error == OnError::kRaise ? ParallelWriterOptions::OnJobError::kStop
                                                    : ParallelWriterOptions::OnJobError::kReport;
    const Writer* writer = writer_.get();
    po.on_done = [this, writer, &progress](const JobOutcome& out) {
      return OnSourceDone(out, *writer, &progress);
    };
    LIBSHARD_ASSIGN_OR_RETURN(pipe, ParallelWriter::Start(std::move(writer_), std::move(po)));
    for (uint64_t i = 0; i < sources_.size(); ++i) {
      auto seq = pipe->Submit([this, i](const Writer& w) { return ProcessGuarded(i, w); },
                              sources_[i].size);
      if (!seq.ok()) break;  // the pipeline stopped: Flush returns why
    }
  }
  Status failure = pipe ? pipe->Flush() : Status::OK();
  if (!failure.ok()) pipe->Stop();  // threads joined: the skip report is ours again
  if (skipped_file_ != nullptr) std::fclose(skipped_file_);
  skipped_file_ = nullptr;
  if (!failure.ok()) {
    return Status(failure.code(),
                  failure.message() + "; pack into " + o_.output +
                      " stopped: nothing there opens as a complete dataset, and after a fix " +
                      (o_.spelling == OptionSpelling::kCli ? std::string("`libshard pack --resume`")
                                                           : F("resume") + " = True") +
                      " continues from the samples already written",
                  failure.sys_errno());
  }
  if (pipe || writer_) {
    auto fin = pipe ? pipe->Finish() : writer_->Finish();
    if (!fin.ok()) return fin.status().WithContext("finishing " + o_.output);
    summary_.dataset = *fin;
  }
  summary_.seconds = Elapsed();
  summary_.peak_rss_bytes = PeakRssBytes();
  if (o_.progress) {
    PackProgress last;
    last.files_done = last.files_total = sources_.size();
    last.bytes_done = last.bytes_total = bytes_total;
    last.skipped = summary_.skipped.size();
    last.elapsed_s = summary_.seconds;
    last.finished = true;
    o_.progress(last);
  }
  return summary_;
}

}  // namespace

uint64_t PeakRssBytes() {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

Status ValidatePackOptions(const PackOptions& o, OptionSpelling spelling) {
  const auto name = [spelling](std::string_view n) { return PackOptionName(n, spelling); };
  if (o.source_root.empty() && o.files_from.empty()) {
    return Status::InvalidArgument("no sources: give a source directory (" + name("src") +
                                   ") or a list of sources (" + name("files_from") + ")");
  }
  if (o.output.empty())
    return Status::InvalidArgument("no output: give the dataset directory (" + name("out") + ")");
  if (o.resume && o.append) {
    return Status::InvalidArgument(name("resume") + " and " + name("append") +
                                   " exclude each other: resume continues an interrupted job, "
                                   "append adds sources to a finished dataset");
  }
  if (o.part_count == 0 || o.part_index >= o.part_count) {
    return Status::InvalidArgument("invalid " + name("part") + " " + std::to_string(o.part_index) +
                                   "/" + std::to_string(o.part_count) + ": need 0 <= I < N");
  }
  LIBSHARD_RETURN_IF_ERROR(ValidateWriterConfig(o, name));
  std::unordered_set<std::string> seen;
  for (const std::string& f : o.fields) {
    if (!seen.insert(f).second)
      return Status::InvalidArgument(name("fields") + " names '" + f + "' twice");
  }
  return Status::OK();
}

Result<PackSummary> Pack(const PackOptions& options) {
  LIBSHARD_RETURN_IF_ERROR(ValidatePackOptions(options, options.spelling));
  // The job runs in the directory the output's writes work in (its lock, journal and
  // skipped.txt live there): the output itself, or an object-storage URL's staging directory,
  // from which the Writer, given the URL, uploads.
  LIBSHARD_ASSIGN_OR_RETURN(StorageInfo where, DescribeStorage(options.output));
  if (options.append && !where.local_files)
    return Status::Unsupported(PackOptionName("append", options.spelling) + " to an " +
                               where.driver + ":// dataset is not supported; pack the new "
                               "sources to another prefix");
  PackOptions local = options;
  local.output = where.work_dir;
  PackJob job(local, where.location);
  Result<PackSummary> summary = job.Run();
  if (summary.ok() && where.staged) {
    summary->output = where.location;
    summary->skipped_report.clear();  // removed with the staging directory
  }
  return summary;
}

}  // namespace libshard::convert
