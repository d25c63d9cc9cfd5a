// Input readers for `libshard pack`: one per-sample source file (a torch.save `.pt`, its gzip, or a
// `.safetensors`) seen as named tensors plus small metadata.
//
// Nothing from a file is ever executed. The `.pt` reader is a restricted interpreter of the pickle
// subset that torch.save emits (see torch_pickle.h for the exact allow-list); every other construct
// is refused with a Status that names the file, the construct and its byte offset in data.pkl.
// Every length and offset read from a file is bounds-checked before use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "libshard/dtype.h"
#include "libshard/sample.h"
#include "libshard/status.h"

namespace libshard::convert {

// One tensor of a source file, as torch.load / safetensors.load_file would return it.
struct SourceTensor {
  // Dict key; nested containers are flattened with '.': {"hs": [a, b]} gives "hs.0", "hs.1";
  // {"a": {"b": t}} gives "a.b". Integer dict keys are written in decimal.
  std::string name;
  DType dtype = DType::kUInt8;
  Shape shape;          // empty for a 0-d tensor
  uint64_t nbytes = 0;  // C-contiguous byte size: NumElements(shape) * DTypeSize(dtype)
};

struct SourceOptions {
  // Zip-bomb guard: a gzip source that inflates past this many bytes is refused
  // (ResourceExhausted) before more memory is taken. 0 = automatic: OpenSource uses
  // DefaultMaxDecompressedBytes(1) (byte_source.h), Pack DefaultMaxDecompressedBytes(threads).
  uint64_t max_decompressed_bytes = 0;
  // How messages name max_decompressed_bytes, spelled as the caller sets it: Pack gives its
  // option's name ("--max-decompressed" for `libshard pack`, "'max_decompressed'" for
  // libshard.pack()).
  std::string max_decompressed_name = "SourceOptions::max_decompressed_bytes";
  // Largest data.pkl (or safetensors JSON header) accepted; real ones are a few KiB.
  uint64_t max_header_bytes = uint64_t{64} << 20;
  // Largest tensor accepted. A view with zero strides (t.expand) materialises to more bytes than
  // its file holds; this bounds what a caller allocates for one ReadTensor.
  uint64_t max_tensor_bytes = uint64_t{1} << 40;
  // Verify the zip CRC-32 of data.pkl at open, and of a storage record whenever ReadTensor reads
  // the whole record (the common case: one contiguous tensor per storage). A CRC of 0 means
  // "not recorded" (torch.save with compute_crc32=False) and is not checked.
  bool verify_crc32 = true;
};

// One opened source file. Immutable after OpenSource; ReadTensor is safe to call concurrently
// (for the same or different tensors).
class SourceFile {
 public:
  virtual ~SourceFile() = default;
  virtual const std::string& path() const = 0;
  // In file (dict insertion) order.
  virtual const std::vector<SourceTensor>& tensors() const = 0;
  // Non-tensor entries: ints (int64), floats (double), bools and strings, flattened like tensor
  // names. Python None values are dropped (MetaValue has no null; dropping keeps "absent" and
  // "None" equivalent rather than inventing a string "None" that would round-trip as a str).
  virtual const Metadata& metadata() const = 0;
  // Writes tensor t's bytes, C-contiguous (views, strides and storage offsets materialised), in
  // little-endian order into dst (dst.size() must equal tensors()[t].nbytes). A contiguous tensor
  // of a plain file is read with pread straight into dst: one copy, no intermediate buffer.
  virtual Status ReadTensor(size_t t, std::span<std::byte> dst) const = 0;
  // Bytes of the file on disk (for gzip sources, the compressed size).
  virtual uint64_t file_size() const = 0;
  // "torch-zip", "torch-zip+gzip", "safetensors", "safetensors+gzip".
  virtual const char* format_name() const = 0;
};

// The default for SourceOptions::max_decompressed_bytes when `threads` sources may be inflated
// at once: a quarter of physical memory (sysconf) shared among them, at least 256 MiB each.
uint64_t DefaultMaxDecompressedBytes(unsigned threads);

// Opens `path`, choosing the reader by content, not only by extension: zip magic (torch.save
// archives: .pt .pth .ckpt .bin), gzip magic (a gzip of either kind, inflated in a streaming way
// into an owned buffer under max_decompressed_bytes), or a safetensors header. Legacy (pre-1.6)
// torch files, TorchScript archives and unknown formats are refused with Unsupported.
Result<std::unique_ptr<SourceFile>> OpenSource(const std::string& path,
                                               const SourceOptions& options = {});

class ByteSource;
// The same over bytes already open (a file a cache's manifest names, opened beneath the cache
// directory: readers/cache_dir.h); messages name src->name().
Result<std::unique_ptr<SourceFile>> OpenSource(std::unique_ptr<ByteSource> src,
                                               const SourceOptions& options = {});

}  // namespace libshard::convert
