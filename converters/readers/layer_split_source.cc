#include "readers/layer_split_source.h"

#include <cstring>
#include <vector>

namespace libshard::convert {
namespace {

class LayerSplitSource final : public SourceFile {
 public:
  LayerSplitSource(std::unique_ptr<SourceFile> inner, size_t stacked, uint64_t tokens,
                   uint64_t layers, uint64_t row_bytes)
      : inner_(std::move(inner)), stacked_(stacked), tokens_(tokens), layers_(layers),
        row_bytes_(row_bytes) {
    const SourceTensor& s = inner_->tensors()[stacked_];
    for (size_t t = 0; t < inner_->tensors().size(); ++t) {
      if (t != stacked_) {
        tensors_.push_back(inner_->tensors()[t]);
        from_.push_back(t);
        continue;
      }
      SourceTensor aux{kSplitAuxName, s.dtype, {1, tokens_, (layers_ - 1) * s.shape[2]},
                       tokens_ * (layers_ - 1) * row_bytes_};
      SourceTensor last{kSplitLastName, s.dtype, {1, tokens_, s.shape[2]}, tokens_ * row_bytes_};
      tensors_.push_back(std::move(aux));
      from_.push_back(kAux);
      tensors_.push_back(std::move(last));
      from_.push_back(kLast);
    }
  }

  const std::string& path() const override { return inner_->path(); }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const Metadata& metadata() const override { return inner_->metadata(); }
  uint64_t file_size() const override { return inner_->file_size(); }
  const char* format_name() const override { return inner_->format_name(); }

  Status ReadTensor(size_t t, std::span<std::byte> dst) const override {
    if (t >= tensors_.size() || dst.size() != tensors_[t].nbytes)
      return Status::InvalidArgument(path() + ": ReadTensor: bad tensor or destination size");
    if (from_[t] != kAux && from_[t] != kLast) return inner_->ReadTensor(from_[t], dst);
    // The stacked tensor whole, then the rows of each token gathered: K-1 rows to aux, one to
    // the last layer. (The two fields read it twice; a source file is read once per field.)
    const SourceTensor& s = inner_->tensors()[stacked_];
    // Sized by the inner reader's tensor, which its file justifies (source_file.h).
    std::vector<std::byte> whole(s.nbytes);
    LIBSHARD_RETURN_IF_ERROR(inner_->ReadTensor(stacked_, whole));
    const uint64_t token_bytes = layers_ * row_bytes_;
    for (uint64_t l = 0; l < tokens_; ++l) {
      const std::byte* src = whole.data() + l * token_bytes;
      if (from_[t] == kAux)
        std::memcpy(dst.data() + l * (layers_ - 1) * row_bytes_, src, (layers_ - 1) * row_bytes_);
      else
        std::memcpy(dst.data() + l * row_bytes_, src + (layers_ - 1) * row_bytes_, row_bytes_);
    }
    return Status::OK();
  }

 private:
  static constexpr size_t kAux = static_cast<size_t>(-1);
  static constexpr size_t kLast = static_cast<size_t>(-2);
  std::unique_ptr<SourceFile> inner_;
  size_t stacked_;
  uint64_t tokens_, layers_, row_bytes_;
  std::vector<SourceTensor> tensors_;
  std::vector<size_t> from_;  // index in inner_, or kAux / kLast
};

}  // namespace

Result<std::unique_ptr<SourceFile>> SplitLayers(std::unique_ptr<SourceFile> inner,
                                                const std::string& name) {
  const std::vector<SourceTensor>& ts = inner->tensors();
  size_t stacked = ts.size();
  for (size_t t = 0; t < ts.size(); ++t) {
    if (ts[t].name == name) stacked = t;
    if (ts[t].name == kSplitAuxName || ts[t].name == kSplitLastName)
      return Status::InvalidArgument(inner->path() + ": --split-layers " + name +
                                     ": the file already has a tensor '" + ts[t].name +
                                     "', which the split would produce");
  }
  if (stacked == ts.size())
    return Status::InvalidArgument(inner->path() + ": --split-layers names '" + name +
                                   "', but the file has no such tensor");
  const SourceTensor& s = ts[stacked];
  if (s.shape.size() != 3 || s.shape[1] < 2)
    return Status::InvalidArgument(
        inner->path() + ": --split-layers: tensor '" + name + "' must be [tokens, layers, hidden] "
        "with at least 2 layers (the aux layers, then the last)");
  const uint64_t tokens = s.shape[0], layers = s.shape[1];
  const uint64_t row_bytes = s.shape[2] * DTypeSize(s.dtype);
  return std::unique_ptr<SourceFile>(
      std::make_unique<LayerSplitSource>(std::move(inner), stacked, tokens, layers, row_bytes));
}

}  // namespace libshard::convert
