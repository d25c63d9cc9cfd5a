// Finding the source files of a pack job and putting them in sample order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libshard/status.h"
#include "readers/cache_source.h"

namespace libshard::convert {

// One input file of a pack job.
struct SourceEntry {
  std::string path;      // as opened (absolute, or relative to the working directory)
  std::string rel_path;  // recorded as provenance and used for ordering: '/'-separated
  uint64_t size = 0;     // bytes, from stat
  int64_t mtime_ns = 0;  // from stat
  // Non-empty for a walked entry with a sample name that is not a regular file (a FIFO, socket or
  // device, or a symlink to one): why it cannot be read. Pack never opens it (opening a FIFO
  // blocks, opening a device can act) and fails or skips it (--on-error) with this reason.
  std::string not_readable;
  // For a sample of a cache (SourceListOptions::cache): its index in the cache; path is then
  // "CACHE/key", for messages only.
  std::optional<uint64_t> cache_index;
};

struct SourceListOptions {
  std::string root;        // directory walked recursively; may be empty when files_from is set
  std::string files_from;  // a list file, one path a line ('#' comments, blank lines ignored);
                           // "-" reads standard input; relative lines resolve against root
                           // (or the working directory when root is empty)
  std::vector<std::string> include;  // globs (GlobMatch); empty = the known sample extensions
  std::vector<std::string> exclude;
  std::string skip_dir;    // a directory never descended into (the output of the job)
};

// True for names the pack readers understand: .pt .pth .ckpt .bin .safetensors, each optionally
// followed by .gz. The default include filter when the user gives none.
bool HasSampleExtension(const std::string& rel_path);

// Whether a walk of the source directory (ListSources without files_from) takes the file at
// `rel_path` (a '/'-separated path relative to the root) as a source: no component is hidden
// (starts with '.'), and it passes `include` (empty: HasSampleExtension) and `exclude`. The rule
// `python -m libshard.capture` applies to the files a generator writes, so that capture and a
// pack of the same files select the same samples.
bool WalkSelects(const std::string& rel_path, const std::vector<std::string>& include,
                 const std::vector<std::string>& exclude);

// Lists the sources in natural-sorted relative-path order (NaturalLess), filtered. Hidden entries
// (names starting with '.') are skipped while walking; symlinked files are followed, symlinked
// directories are not (no cycles). A selected name that is a FIFO, socket or device is listed
// with `not_readable` set (so a sample never goes missing silently); dangling links are skipped. Errors: NotFound for a missing root or listed file,
// InvalidArgument for a duplicate relative path or a path that names no regular file.
Result<std::vector<SourceEntry>> ListSources(const SourceListOptions& options);

// The samples of an opened cache, in the cache's order (never re-sorted: sample i of the cache is
// the owner's item i), as entries keyed by CacheSample::key and filtered by the include/exclude
// globs of `options` (matched against the keys; no extension filter). options.root and
// files_from are not used.
std::vector<SourceEntry> ListCacheSources(const CacheSource& cache,
                                          const SourceListOptions& options);

}  // namespace libshard::convert
