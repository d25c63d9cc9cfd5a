// The identity of a write in progress and the check of a write that continues what a directory
// holds (libshard/writer.h CheckWriteIdentity; FORMAT.md §2.2, §6), and setting aside what a
// changed run no longer continues.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "libshard/attributes.h"
#include "libshard/caller.h"
#include "libshard/identity.h"
#include "libshard/schema.h"
#include "libshard/status.h"
#include "libshard/writer.h"

namespace libshard::writer_internal {

// Beside an unfinished write's journal (FORMAT.md §6): the attributes it was started with, as
// {"version": 1, "attributes": {...}}, written whole (tmp + rename) before the journal and
// removed after the commit, whose manifest then records them.
inline constexpr char kIdentityFileName[] = "_identity.json";

[[nodiscard]] Status WriteIdentityFile(const std::string& dir, const Attributes& attributes,
                                       bool fsync);
// The attributes of `dir`'s identity file; nullopt when there is none (a write started by a
// libshard before identities). Corruption for a damaged one.
Result<std::optional<Attributes>> ReadIdentityFile(const std::string& dir);

// What a continuing write found in its directory.
struct Continuation {
  enum class Found { kNothing, kUnfinished, kDataset };
  Found found = Found::kNothing;
  Schema schema;           // of what was found (journal header or manifest)
  Attributes recorded;     // its attributes (empty when none are recorded)
  // Its attributes are known: always for a dataset; for a journal, when _identity.json exists.
  bool recorded_known = false;
  bool manifest_identity_recorded = false;  // a dataset's manifest records provenance.identity
  std::string set_aside;   // where it went, when it was set aside (then found is kNothing)
};

// The check of CheckWriteIdentity with `dir`'s lock held by the caller.
Result<Continuation> CheckContinuationLocked(const std::string& dir, const WriterOptions& options);

// Moves every entry of `dir` except the lock file and `keep` into a new directory beside it,
// `DIR.stale-YYYYMMDDThhmmssZ` (`-2`, `-3`, ... appended while taken), names kept; fsyncs both
// directories and returns the new one's path.
Result<std::string> SetAsideEntries(const std::string& dir,
                                    const std::vector<std::string>& keep = {});
// `path` renamed to `path.stale-YYYYMMDDThhmmssZ` (`-2`, ... while taken); returns the new path.
Result<std::string> RenameAside(const std::string& path);

// The refusal of a write that would continue `dir` holding `what` ("an unfinished write", "a
// dataset") of other attributes: names each difference and what to do in `caller`'s words.
Status IdentityRefusal(const std::string& dir, std::string_view what,
                       const std::vector<IdentityDifference>& differences, Caller caller);

}  // namespace libshard::writer_internal
