// The identity check of a continuing write and setting aside (identity_check.h).
#include "writer/identity_check.h"

#include <ctime>

#include <nlohmann/json.hpp>

#include "format/journal.h"
#include "format/manifest.h"
#include "io/filesystem.h"
#include "libshard/dataset_lock.h"
#include "libshard/identity.h"

namespace libshard::writer_internal {
namespace {

using internal::JoinPath;
using nlohmann::json;

// An identity file holds at most 256 attributes of 64 KiB (ValidateAttributes), plus JSON.
constexpr uint64_t kMaxIdentityFileBytes = uint64_t{32} << 20;
constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;

std::string StaleSuffix() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, ".stale-%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// `path` without trailing slashes (so that "out/" sets aside to "out.stale-...", not into it).
std::string Trimmed(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// A free name `base.stale-TIME[-K]`.
Result<std::string> FreeStaleName(const std::string& base) {
  const std::string first = Trimmed(base) + StaleSuffix();
  std::string name = first;
  for (int k = 2; internal::PathExists(name); ++k) {
    if (k > 1000) return Status::AlreadyExists(first + ": too many set-aside copies of this name");
    name = first + "-" + std::to_string(k);
  }
  return name;
}

std::string ParentOf(const std::string& path) {
  const std::string p = Trimmed(path);
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string OverrideSpelling(Caller caller) {
  switch (caller) {
    case Caller::kPython: return "allow_identity_change=True";
    case Caller::kCli: return "--allow-identity-change";
    case Caller::kCpp: break;
  }
  return "WriterOptions::allow_identity_change";
}

}  // namespace

Status WriteIdentityFile(const std::string& dir, const Attributes& attributes, bool fsync) {
  json a = json::object();
  for (const auto& [key, value] : attributes) {
    if (const int64_t* i = std::get_if<int64_t>(&value)) a[key] = *i;
    else a[key] = std::get<std::string>(value);
  }
  json j = {{"version", kIdentityVersion}, {"attributes", std::move(a)}};
  return internal::WriteFileAtomically(
      dir, kIdentityFileName, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n", fsync);
}

Result<std::optional<Attributes>> ReadIdentityFile(const std::string& dir) {
  const std::string path = JoinPath(dir, kIdentityFileName);
  if (!internal::PathExists(path)) return std::optional<Attributes>();
  LIBSHARD_ASSIGN_OR_RETURN(std::string text, internal::ReadWholeFile(path, kMaxIdentityFileBytes));
  const auto damaged = [&](const std::string& what) {
    return Status::Corruption(path + ": " + what + "; the unfinished write's identity is "
                              "damaged: delete the directory and write again");
  };
  LIBSHARD_RETURN_IF_ERROR(format::CheckJsonNesting(text, path));
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return damaged("not a JSON object");
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_unsigned())
    return damaged("no version");
  if (version->get<uint64_t>() != kIdentityVersion)
    return Status::Unsupported(path + ": identity version " + version->dump() +
                               " is not supported; continue this write with the libshard that "
                               "started it, or upgrade libshard");
  auto attrs = j.find("attributes");
  if (attrs == j.end() || !attrs->is_object()) return damaged("no attributes object");
  Attributes out;
  for (auto a = attrs->begin(); a != attrs->end(); ++a) {
    if (a->is_string()) out[a.key()] = a->get<std::string>();
    else if (a->is_number_integer() &&
             (!a->is_number_unsigned() || a->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)))
      out[a.key()] = a->get<int64_t>();
    else return damaged("attribute '" + a.key() + "' is neither a string nor an integer");
  }
  Status valid = ValidateAttributes(out);
  if (!valid.ok()) return damaged(valid.message());
  return std::optional<Attributes>(std::move(out));
}

Result<std::string> RenameAside(const std::string& path) {
  LIBSHARD_ASSIGN_OR_RETURN(std::string to, FreeStaleName(path));
  LIBSHARD_RETURN_IF_ERROR(internal::RenameFile(Trimmed(path), to));
  LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(ParentOf(path)));
  return to;
}

Result<std::string> SetAsideEntries(const std::string& dir, const std::vector<std::string>& keep) {
  LIBSHARD_ASSIGN_OR_RETURN(std::vector<std::string> names, internal::ListDirectory(dir));
  LIBSHARD_ASSIGN_OR_RETURN(std::string to, FreeStaleName(dir));
  LIBSHARD_RETURN_IF_ERROR(internal::MakeDirectories(to));
  for (const std::string& name : names) {
    if (name == DatasetLock::kFileName) continue;
    bool kept = false;
    for (const std::string& k : keep) kept = kept || name == k;
    if (kept) continue;
    Status moved = internal::RenameFile(JoinPath(dir, name), JoinPath(to, name));
    if (!moved.ok())
      return moved.WithContext("setting aside " + dir + " (into " + to + ", partly done: move "
                               "the rest by hand or back)");
  }
  LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(to));
  LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(dir));
  LIBSHARD_RETURN_IF_ERROR(internal::SyncDirectory(ParentOf(dir)));
  return to;
}

Status IdentityRefusal(const std::string& dir, std::string_view what,
                       const std::vector<IdentityDifference>& differences, Caller caller) {
  const IdentityDifference& d = differences.front();
  std::string first;
  if (d.recorded == "(none)")
    first = dir + " holds " + std::string(what) + " that records no attribute '" + d.field +
            "', and this write gives " + d.field + "=" + d.given;
  else
    first = dir + " holds " + std::string(what) + " made with " + d.field + "=" + d.recorded +
            ", and this write gives " + d.given;
  return Status::InvalidArgument(
      first + ": adding its samples would mix two setups in one dataset (identity differences, "
      "recorded -> given: " +
      DescribeDifferences(differences) + "). Continue it with the attributes it records (omit "
      "the ones you do not mean to change), write to another directory (and merge deliberately "
      "with allow_identity_change), or pass " + OverrideSpelling(caller) +
      " to set what it holds aside (moved to " + Trimmed(dir) + ".stale-TIME, kept, never reused) "
      "and start afresh");
}

Result<Continuation> CheckContinuationLocked(const std::string& dir,
                                             const WriterOptions& options) {
  Continuation c;
  const std::string manifest_path = JoinPath(dir, format::kManifestName);
  const std::string journal_path = JoinPath(dir, format::kJournalName);
  std::string what;
  if (internal::PathExists(manifest_path)) {
    LIBSHARD_ASSIGN_OR_RETURN(std::string text,
                              internal::ReadWholeFile(manifest_path, kMaxManifestBytes));
    LIBSHARD_ASSIGN_OR_RETURN(format::Manifest m, format::ParseManifest(text, manifest_path));
    c.found = Continuation::Found::kDataset;
    c.manifest_identity_recorded = m.identity_recorded;
    c.schema = std::move(m.schema);
    c.recorded = std::move(m.attributes);
    c.recorded_known = true;
    what = "a dataset";
  } else if (internal::PathExists(journal_path)) {
    c.found = Continuation::Found::kUnfinished;
    {
      LIBSHARD_ASSIGN_OR_RETURN(internal::MappedFile map, internal::MappedFile::Map(journal_path));
      format::JournalHeader header;
      LIBSHARD_ASSIGN_OR_RETURN(
          uint64_t used, format::ParseJournalHeaderEntry(map.bytes(), journal_path, &header));
      if (used == 0)
        return Status::Corruption(journal_path + ": its header is damaged; the interrupted write "
                                  "cannot be continued: delete the directory and write again");
      c.schema = std::move(header.schema);
    }
    LIBSHARD_ASSIGN_OR_RETURN(std::optional<Attributes> recorded, ReadIdentityFile(dir));
    // A journal without an identity file was started by a libshard before identities: its
    // identity is not recorded, and any given attributes are taken as its own.
    c.recorded_known = recorded.has_value();
    if (recorded) c.recorded = std::move(*recorded);
    what = "an unfinished write";
  } else {
    return c;
  }
  if (!c.recorded_known) return c;
  const std::vector<IdentityDifference> differences =
      AttributeDifferences(c.recorded, options.attributes);
  if (differences.empty()) return c;
  if (!options.allow_identity_change)
    return IdentityRefusal(dir, what, differences, options.caller);
  LIBSHARD_ASSIGN_OR_RETURN(c.set_aside, SetAsideEntries(dir));
  c.found = Continuation::Found::kNothing;
  return c;
}

}  // namespace libshard::writer_internal

namespace libshard {

Result<DatasetIdentity> ReadIdentity(const std::string& dir) {
  using writer_internal::Continuation;
  // CheckContinuationLocked with nothing given reads and checks what `dir` holds and compares
  // nothing; no lock is needed to read.
  LIBSHARD_ASSIGN_OR_RETURN(Continuation c,
                            writer_internal::CheckContinuationLocked(dir, WriterOptions{}));
  if (c.found == Continuation::Found::kNothing)
    return Status::NotFound(dir + ": neither a dataset (manifest.json) nor an unfinished write (" +
                            format::kJournalName + "), so no identity");
  DatasetIdentity id;
  id.schema = std::move(c.schema);
  id.attributes = std::move(c.recorded);
  id.digest = IdentityDigest(id.schema, id.attributes);
  id.recorded = c.found == Continuation::Found::kDataset ? c.manifest_identity_recorded
                                                        : c.recorded_known;
  return id;
}

Result<std::vector<std::string>> CheckWriteIdentity(const std::string& dir,
                                                    const WriterOptions& options) {
  if (!internal::PathExists(dir)) return std::vector<std::string>{};
  std::shared_ptr<const DatasetLock> lock = options.lock;
  if (!lock) {
    LIBSHARD_ASSIGN_OR_RETURN(lock, DatasetLock::Acquire(dir, /*create_directory=*/false,
                                                         options.caller));
  } else if (!lock->Covers(dir)) {
    return Status::InvalidArgument("WriterOptions.lock is the lock of " + lock->dir() +
                                   ", not of " + dir);
  }
  LIBSHARD_ASSIGN_OR_RETURN(writer_internal::Continuation c,
                            writer_internal::CheckContinuationLocked(dir, options));
  if (c.set_aside.empty()) return std::vector<std::string>{};
  return std::vector<std::string>{c.set_aside};
}

}  // namespace libshard
