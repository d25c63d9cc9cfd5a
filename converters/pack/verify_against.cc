#include "pack/verify_against.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <filesystem>
#include <memory>
#include <vector>

#include "pack/file_hash.h"
#include "pack/schema_inference.h"

namespace libshard::convert {

namespace {

double HalfToDouble(uint16_t h, DType dtype) {
  if (dtype == DType::kBFloat16) {
    uint32_t u = uint32_t{h} << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1F;
  const int man = h & 0x3FF;
  if (exp == 0x1F) return man ? std::nan("") : sign * HUGE_VAL;
  if (exp == 0) return sign * std::ldexp(man, -24);
  return sign * std::ldexp(1024 + man, exp - 25);
}

// Checks the values `got` of a field stored as fp8 against the source's `want` (FORMAT.md
// §4.3.5): every finite value within max(2^-4 |x|, 2^-10 s_r) plus the final rounding into the
// field's dtype, s_r = the row's largest finite |x| / 448. NaN stays NaN; ±inf reads as NaN.
Status CheckLossy(const std::string& where, const TensorView& v, int32_t seq_dim,
                  const std::byte* want, LossyFieldError* err) {
  uint64_t rows = 1;
  const size_t row_dims = seq_dim >= 0 ? static_cast<size_t>(seq_dim) + 1 : (v.shape.empty() ? 0 : 1);
  for (size_t d = 0; d < row_dims && d < v.shape.size(); ++d) rows *= v.shape[d];
  const uint64_t n = v.nbytes / 2;
  if (rows == 0 || n == 0) return Status::OK();
  const uint64_t row_elems = n / rows;
  const double round = v.dtype == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  for (uint64_t r = 0; r < rows; ++r) {
    double absmax = 0;
    for (uint64_t c = 0; c < row_elems; ++c) {
      uint16_t h;
      std::memcpy(&h, want + 2 * (r * row_elems + c), 2);
      const double x = HalfToDouble(h, v.dtype);
      if (std::isfinite(x)) absmax = std::max(absmax, std::fabs(x));
    }
    const double s = absmax / 448.0;
    for (uint64_t c = 0; c < row_elems; ++c) {
      uint16_t hx, hy;
      std::memcpy(&hx, want + 2 * (r * row_elems + c), 2);
      std::memcpy(&hy, v.data + 2 * (r * row_elems + c), 2);
      const double x = HalfToDouble(hx, v.dtype), y = HalfToDouble(hy, v.dtype);
      if (!std::isfinite(x)) {
        if (!std::isnan(y))
          return Status::Corruption(where + ": field '" + std::string(v.name) + "' row " +
                                    std::to_string(r) + " element " + std::to_string(c) +
                                    ": a non-finite source value does not read as NaN");
        continue;
      }
      const double e = std::fabs(y - x);
      const double bound = std::max(std::ldexp(std::fabs(x), -4), std::ldexp(s, -10)) +
                           round * std::fabs(y) + std::ldexp(1.0, -24) + 1e-6 * s;
      if (!(e <= bound))
        return Status::Corruption(where + ": field '" + std::string(v.name) + "' row " +
                                  std::to_string(r) + " element " + std::to_string(c) + ": " +
                                  std::to_string(y) + " for " + std::to_string(x) +
                                  " exceeds the fp8 error bound " + std::to_string(bound) +
                                  " (FORMAT.md §4.3.5); re-run libshard pack");
      if (x != 0) {
        const double rel = e / std::fabs(x);
        err->max_rel = std::max(err->max_rel, rel);
        err->sum_rel += rel;
        ++err->count;
      }
    }
  }
  return Status::OK();
}

}  // namespace

Result<AgainstSource> AgainstSource::Open(const std::string& root, SourceFormat format,
                                          const SourceOptions& options) {
  AgainstSource a;
  a.root_ = root;
  a.options_ = options;
  if (format == SourceFormat::kFiles) return a;
  auto dir = LocalCacheDir::OpenDir(root);
  if (!dir.ok()) {
    if (format == SourceFormat::kAuto) return a;  // a file list's root may be anything
    return dir.status();
  }
  if (format == SourceFormat::kAuto) {
    LIBSHARD_ASSIGN_OR_RETURN(format, DetectSourceFormat(**dir, options));
    if (format == SourceFormat::kFiles) return a;
  }
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<CacheSource> cache,
                            OpenCache(std::move(*dir), format, options));
  a.cache_ = std::move(cache);
  return a;
}

Result<std::unique_ptr<SourceFile>> AgainstSource::OpenSource(const std::string& rel,
                                                             std::string* where) const {
  if (!cache_) {
    const std::string path = (std::filesystem::path(root_) / rel).string();
    *where = "source " + path;
    return convert::OpenSource(path, options_);
  }
  *where = std::string(SourceFormatName(cache_->format())) + " cache " + root_ + " sample '" +
           rel + "'";
  const std::optional<uint64_t> i = cache_->Find(rel);
  if (!i)
    return Status::NotFound("the cache has no sample '" + rel +
                            "' (was the dataset packed from another cache?)");
  return cache_->OpenSample(*i);
}

Result<uint64_t> AgainstSource::Hash(const std::string& rel) const {
  if (!cache_) return HashFile((std::filesystem::path(root_) / rel).string());
  const std::optional<uint64_t> i = cache_->Find(rel);
  if (!i) return Status::NotFound("the cache has no sample '" + rel + "'");
  return cache_->HashSample(*i);
}

Result<VerifyAgainstResult> VerifyAgainstSource(const Dataset& dataset, uint64_t i,
                                                const std::string& source_root,
                                                const SourceOptions& options) {
  LIBSHARD_ASSIGN_OR_RETURN(AgainstSource source,
                            AgainstSource::Open(source_root, SourceFormat::kAuto, options));
  return VerifyAgainstSource(dataset, i, source);
}

Result<VerifyAgainstResult> VerifyAgainstSource(const Dataset& dataset, uint64_t i,
                                                const AgainstSource& source) {
  const std::string sample = "sample " + std::to_string(i);
  LIBSHARD_ASSIGN_OR_RETURN(SourceFileInfo prov, dataset.source(i));
  if (prov.path.empty()) {
    return Status::InvalidArgument(sample + " records no source path; nothing to compare against");
  }
  std::string source_name;
  auto src = source.OpenSource(prov.path, &source_name);
  const std::string where = sample + " (" + source_name + ")";
  if (!src.ok()) return src.status().WithContext(where);
  auto read = dataset.Read(i);
  if (!read.ok()) return read.status().WithContext(sample);
  const Sample& s = *read;
  const auto& tensors = (*src)->tensors();
  const std::vector<uint8_t> codecs = dataset.field_codecs();
  VerifyAgainstResult r;
  for (const TensorView& v : s.tensors()) {
    size_t t = tensors.size();
    for (size_t k = 0; k < tensors.size(); ++k)
      if (tensors[k].name == v.name) t = k;
    if (t == tensors.size()) {
      return Status::Corruption(where + ": field '" + std::string(v.name) +
                                "' is not in the source");
    }
    const SourceTensor& st = tensors[t];
    if (st.dtype != v.dtype || st.shape != v.shape) {
      return Status::Corruption(where + ": field '" + std::string(v.name) + "' is " +
                                std::string(DTypeName(v.dtype)) + " " + ShapeString(v.shape) +
                                " in the dataset but " + std::string(DTypeName(st.dtype)) + " " +
                                ShapeString(st.shape) + " in the source");
    }
    if (st.nbytes != v.nbytes) {
      return Status::Corruption(where + ": field '" + std::string(v.name) + "' has " +
                                std::to_string(v.nbytes) + " bytes in the dataset, " +
                                std::to_string(st.nbytes) + " in the source");
    }
    std::vector<std::byte> buf(st.nbytes);
    const Status rs = (*src)->ReadTensor(t, std::span<std::byte>(buf.data(), buf.size()));
    if (!rs.ok()) return rs.WithContext(where);
    const std::optional<size_t> f = dataset.schema().Find(std::string(v.name));
    const uint8_t codec = f && !codecs.empty() ? codecs[*f] : 0;
    if (codec == 3 || codec == 4 || codec == 6) {  // fp8, lossy (FORMAT.md §4.3.5, §4.3.8)
      LossyFieldError err;
      err.field = std::string(v.name);
      LIBSHARD_RETURN_IF_ERROR(
          CheckLossy(where, v, dataset.schema().fields[*f].seq_dim, buf.data(), &err));
      r.lossy.push_back(std::move(err));
      continue;
    }
    if (st.nbytes != 0 && std::memcmp(buf.data(), v.data, st.nbytes) != 0) {
      uint64_t off = 0;
      while (off < st.nbytes && buf[off] == v.data[off]) ++off;
      return Status::Corruption(where + ": field '" + std::string(v.name) +
                                "' differs from the source at byte " + std::to_string(off) + " of " +
                                std::to_string(st.nbytes) + "; re-run libshard pack");
    }
  }
  LIBSHARD_ASSIGN_OR_RETURN(Metadata meta, dataset.metadata(i));
  if (meta != (*src)->metadata()) {
    return Status::Corruption(where + ": metadata differs from the source's");
  }
  if (prov.content_hash != 0) {
    auto h = source.Hash(prov.path);
    if (!h.ok()) return h.status().WithContext(where);
    r.source_hash_checked = true;
    r.source_hash_matches = *h == prov.content_hash;
  }
  return r;
}

}  // namespace libshard::convert
