// Shell-style globs for `libshard pack --include/--exclude`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace libshard::convert {

// Matches `path` (a '/'-separated relative path) against `pattern`:
//   `*` any run of characters except '/', `**` any run including '/', `?` one character except
//   '/', `[abc]`, `[a-z]`, `[!a-z]` / `[^a-z]` a character class, `\x` the literal x.
// A pattern without '/' is matched against the last path component only (as rsync and
// .gitignore do), so `--include '*.pt'` selects .pt files at any depth. Runs in
// O(|pattern| x |path|), never exponential.
bool GlobMatch(std::string_view pattern, std::string_view path);

// The pack filter: selected when `includes` is empty or any include matches, and no exclude
// matches.
bool PassesFilters(std::string_view rel_path, const std::vector<std::string>& includes,
                   const std::vector<std::string>& excludes);

}  // namespace libshard::convert
