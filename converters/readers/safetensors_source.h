// SourceFile over a .safetensors file: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"k": "v"}}, then the data; offsets are relative to the end of the header.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "readers/byte_source.h"
#include "readers/source_file.h"

namespace libshard::convert {

class SafetensorsSource final : public SourceFile {
 public:
  static Result<std::unique_ptr<SafetensorsSource>> Open(std::unique_ptr<ByteSource> src,
                                                         uint64_t file_size, bool gzipped,
                                                         const SourceOptions& options);

  const std::string& path() const override { return src_->name(); }
  // In header order.
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  // The "__metadata__" strings.
  const Metadata& metadata() const override { return metadata_; }
  Status ReadTensor(size_t t, std::span<std::byte> dst) const override;
  uint64_t file_size() const override { return file_size_; }
  const char* format_name() const override {
    return gzipped_ ? "safetensors+gzip" : "safetensors";
  }
  // Where tensor t's bytes begin in the (uncompressed) file; they span tensors()[t].nbytes.
  uint64_t data_offset(size_t t) const { return offsets_[t]; }

 private:
  SafetensorsSource() = default;
  std::unique_ptr<ByteSource> src_;
  uint64_t file_size_ = 0;
  bool gzipped_ = false;
  std::vector<SourceTensor> tensors_;
  std::vector<uint64_t> offsets_;  // absolute file offset of each tensor's data
  Metadata metadata_;
};

}  // namespace libshard::convert
