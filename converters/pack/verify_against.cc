#include "pack/verify_against.h"

#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "pack/file_hash.h"
#include "pack/schema_inference.h"

namespace libshard::convert {

Result<VerifyAgainstResult> VerifyAgainstSource(const Dataset& dataset, uint64_t i,
                                                const std::string& source_root,
                                                const SourceOptions& options) {
  const std::string sample = "sample " + std::to_string(i);
  LIBSHARD_ASSIGN_OR_RETURN(Provenance prov, dataset.source(i));
  if (prov.path.empty()) {
    return Status::InvalidArgument(sample + " records no source path; nothing to compare against");
  }
  const std::string path = (std::filesystem::path(source_root) / prov.path).string();
  const std::string where = sample + " (source " + path + ")";
  auto src = OpenSource(path, options);
  if (!src.ok()) return src.status().WithContext(where);
  auto read = dataset.Read(i);
  if (!read.ok()) return read.status().WithContext(sample);
  const Sample& s = *read;
  const auto& tensors = (*src)->tensors();
  for (const TensorView& v : s.tensors()) {
    size_t t = tensors.size();
    for (size_t k = 0; k < tensors.size(); ++k)
      if (tensors[k].name == v.name) t = k;
    if (t == tensors.size()) {
      return Status::Corruption(where + ": field '" + std::string(v.name) +
                                "' is not in the source file");
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
  VerifyAgainstResult r;
  if (prov.content_hash != 0) {
    auto h = HashFile(path);
    if (!h.ok()) return h.status().WithContext(where);
    r.source_hash_checked = true;
    r.source_hash_matches = *h == prov.content_hash;
  }
  return r;
}

}  // namespace libshard::convert
