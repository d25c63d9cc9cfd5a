// SourceFile over a torch.save zip archive (PyTorch >= 1.6): see zip_archive.h for the container
// and torch_pickle.h for the restricted data.pkl interpreter.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "readers/byte_source.h"
#include "readers/source_file.h"
#include "readers/torch_pickle.h"
#include "readers/zip_archive.h"

namespace libshard::convert {

class TorchZipSource final : public SourceFile {
 public:
  // `src` is the whole archive (a file, or an inflated gzip). `file_size` is the size on disk.
  static Result<std::unique_ptr<TorchZipSource>> Open(std::unique_ptr<ByteSource> src,
                                                      uint64_t file_size, bool gzipped,
                                                      const SourceOptions& options);

  const std::string& path() const override { return src_->name(); }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const Metadata& metadata() const override { return metadata_; }
  Status ReadTensor(size_t t, std::span<std::byte> dst) const override;
  uint64_t file_size() const override { return file_size_; }
  const char* format_name() const override { return gzipped_ ? "torch-zip+gzip" : "torch-zip"; }

 private:
  struct Record {  // one data/<key> entry
    std::string name;
    uint64_t data_offset = 0;
    uint64_t size = 0;
    uint32_t crc32 = 0;
  };
  struct View {
    size_t record = 0;
    PickledTensor tensor;
  };
  TorchZipSource() = default;

  std::unique_ptr<ByteSource> src_;
  uint64_t file_size_ = 0;
  bool gzipped_ = false;
  bool big_endian_ = false;  // the archive's `byteorder` record says "big": swap on read
  bool verify_crc32_ = true;
  std::vector<Record> records_;
  // Per record: its CRC-32 was checked by an earlier read of the whole record. Reads of part of
  // a record (a view of a shared storage) read the whole record once to check it.
  std::unique_ptr<std::atomic<bool>[]> crc_checked_;
  std::vector<View> views_;  // parallel to tensors_
  std::vector<SourceTensor> tensors_;
  Metadata metadata_;
};

}  // namespace libshard::convert
