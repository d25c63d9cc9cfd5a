#include "pack/source_list.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <unordered_set>

#include "pack/glob.h"
#include "pack/natural_sort.h"

namespace libshard::convert {
namespace fs = std::filesystem;
namespace {

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Result<SourceEntry> StatEntry(const std::string& path, std::string rel) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return Status::FromErrno(errno, "source " + path + ": cannot stat; check the path");
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("source " + path + " is not a regular file");
  }
  SourceEntry e;
  e.path = path;
  e.rel_path = std::move(rel);
  e.size = static_cast<uint64_t>(st.st_size);
  e.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return e;
}

bool Selected(const std::string& rel, const SourceListOptions& o) {
  if (o.include.empty() && !HasSampleExtension(rel)) return false;
  return PassesFilters(rel, o.include, o.exclude);
}

Status Walk(const SourceListOptions& o, std::vector<SourceEntry>& out) {
  std::error_code ec;
  const fs::path root = fs::path(o.root);
  if (!fs::is_directory(root, ec)) {
    return Status::NotFound("source directory " + o.root +
                            " does not exist or is not a directory; pass a directory of sample "
                            "files or use --files-from");
  }
  fs::path skip;
  if (!o.skip_dir.empty()) skip = fs::weakly_canonical(o.skip_dir, ec);
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  if (ec) return Status::IoError("cannot list " + o.root + ": " + ec.message(), ec.value());
  for (; it != end; it.increment(ec)) {
    if (ec) return Status::IoError("cannot list " + o.root + ": " + ec.message(), ec.value());
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory(ec)) {
      if (!skip.empty() && fs::weakly_canonical(p, ec) == skip) it.disable_recursion_pending();
      continue;
    }
    const bool regular = it->is_regular_file(ec);
    const std::string rel = p.lexically_relative(root).generic_string();
    if (!Selected(rel, o)) continue;
    if (!regular) {
      // Never opened: stat (through symlinks) says what it is; dangling links are left out.
      struct stat st;
      if (::stat(p.c_str(), &st) != 0) continue;
      SourceEntry e;
      e.path = p.string();
      e.rel_path = rel;
      e.not_readable = "source " + e.path + " is " +
                       (S_ISFIFO(st.st_mode)   ? "a FIFO (named pipe)"
                        : S_ISSOCK(st.st_mode) ? "a socket"
                        : S_ISCHR(st.st_mode)  ? "a character device"
                        : S_ISBLK(st.st_mode)  ? "a block device"
                                               : "not a regular file") +
                       ", not a regular file; it was not read. Remove it from the source "
                       "directory, or leave it out with --exclude";
      out.push_back(std::move(e));
      continue;
    }
    LIBSHARD_ASSIGN_OR_RETURN(SourceEntry e, StatEntry(p.string(), rel));
    out.push_back(std::move(e));
  }
  return Status::OK();
}

Status ReadList(const SourceListOptions& o, std::vector<SourceEntry>& out) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (o.files_from != "-") {
    file.open(o.files_from);
    if (!file) {
      return Status::NotFound("file list " + o.files_from + " cannot be opened; check the path");
    }
    in = &file;
  }
  const fs::path base = o.root.empty() ? fs::path() : fs::path(o.root);
  std::string line;
  uint64_t line_no = 0;
  while (std::getline(*in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t b = 0;
    while (b < line.size() && (line[b] == ' ' || line[b] == '\t')) ++b;
    line.erase(0, b);
    if (line.empty() || line[0] == '#') continue;
    fs::path p(line);
    fs::path full = p.is_absolute() || base.empty() ? p : base / p;
    std::string rel;
    if (!base.empty()) {
      const fs::path r = full.lexically_normal().lexically_relative(base.lexically_normal());
      if (!r.empty() && *r.begin() != "..") rel = r.generic_string();
    }
    if (rel.empty()) rel = p.lexically_normal().generic_string();
    while (rel.rfind("./", 0) == 0) rel.erase(0, 2);
    if (!PassesFilters(rel, o.include, o.exclude)) continue;
    auto e = StatEntry(full.string(), rel);
    if (!e.ok()) {
      return e.status().WithContext(o.files_from + " line " + std::to_string(line_no));
    }
    out.push_back(std::move(*e));
  }
  if (in->bad()) return Status::IoError("cannot read file list " + o.files_from);
  return Status::OK();
}

}  // namespace

bool WalkSelects(const std::string& rel_path, const std::vector<std::string>& include,
                 const std::vector<std::string>& exclude) {
  if (rel_path.empty()) return false;
  size_t start = 0;
  while (start <= rel_path.size()) {
    const size_t slash = rel_path.find('/', start);
    const size_t end = slash == std::string::npos ? rel_path.size() : slash;
    if (end == start || rel_path[start] == '.') return false;  // empty or hidden component
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  SourceListOptions o;
  o.include = include;
  o.exclude = exclude;
  return Selected(rel_path, o);
}

bool HasSampleExtension(const std::string& rel_path) {
  std::string s = rel_path;
  for (char& c : s) c = static_cast<char>((c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c);
  if (EndsWith(s, ".gz")) s.resize(s.size() - 3);
  for (std::string_view ext : {".pt", ".pth", ".ckpt", ".bin", ".safetensors"})
    if (EndsWith(s, ext)) return true;
  return false;
}

Result<std::vector<SourceEntry>> ListSources(const SourceListOptions& options) {
  std::vector<SourceEntry> out;
  if (!options.files_from.empty()) {
    LIBSHARD_RETURN_IF_ERROR(ReadList(options, out));
  } else if (!options.root.empty()) {
    LIBSHARD_RETURN_IF_ERROR(Walk(options, out));
  } else {
    return Status::InvalidArgument("no sources: pass a source directory or --files-from LIST");
  }
  std::sort(out.begin(), out.end(), [](const SourceEntry& a, const SourceEntry& b) {
    return NaturalLess(a.rel_path, b.rel_path);
  });
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].rel_path == out[i - 1].rel_path) {
      return Status::InvalidArgument("source " + out[i].rel_path + " is listed twice (" +
                                     out[i - 1].path + ", " + out[i].path +
                                     "); each sample needs a unique relative path");
    }
  }
  return out;
}

std::vector<SourceEntry> ListCacheSources(const CacheSource& cache,
                                          const SourceListOptions& options) {
  std::vector<SourceEntry> out;
  const std::vector<CacheSample>& samples = cache.samples();
  for (uint64_t i = 0; i < samples.size(); ++i) {
    const CacheSample& s = samples[i];
    if (!PassesFilters(s.key, options.include, options.exclude)) continue;
    SourceEntry e;
    e.path = cache.path() + "/" + s.key;
    e.rel_path = s.key;
    e.size = s.bytes;
    e.mtime_ns = s.mtime_ns;
    e.cache_index = i;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace libshard::convert
