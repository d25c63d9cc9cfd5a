// Fuzzes the Collator (libshard/src/loader/collate.h) with untrusted shapes, dtypes, modes and
// padding values: the shapes a batch's samples carry come from a dataset's index, so no shape may
// make Plan overflow, allocate, or lead Fill outside the region or a sample's bytes. Plan must
// return a layout or an error; a layout whose region fits a small bound is filled, and every byte
// of the region it names must lie inside the region (ASan checks the copies).
//
// Input: [mode][dtype][seq_dim][pad: 8 bytes][samples: 1..8] then per sample [rank 0..4] and
// rank dims of 1..4 bytes each (the first byte's top bits choose the width, so huge dims occur).
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "libshard/schema.h"
#include "loader/collate.h"

namespace {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t Dim() {
    const uint8_t first = Byte();
    const int width = first >> 6;  // 0..3 more bytes
    uint64_t v = first & 0x3F;
    for (int i = 0; i < width; ++i) v = (v << 8) | Byte();
    if (width == 3 && (first & 0x20)) v <<= 32;  // now and then far past any real size
    return v;
  }
  double Double() {
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | Byte();
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

const std::string kName = "f";
constexpr uint64_t kMaxFill = uint64_t{1} << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  Reader in(data, size);
  const Collate mode = (in.Byte() & 1) ? Collate::kPack : Collate::kPad;
  const auto dtype = static_cast<DType>(1 + in.Byte() % kMaxDTypeCode);
  const int32_t seq_dim = static_cast<int32_t>(in.Byte() % 6) - 1;  // -1..4
  const double pad = in.Double();
  const size_t samples = 1 + in.Byte() % 8;

  Schema schema;
  schema.fields = {{kName, dtype, 4, seq_dim}};
  schema.length_field = seq_dim >= 0 ? 0 : -1;
  Result<Collator> collator = Collator::Make(schema, mode, pad, {}, "/fuzz");
  if (!collator.ok()) return 0;  // a padding value the dtype cannot hold

  const size_t esize = DTypeSize(dtype);
  std::vector<std::unique_ptr<std::vector<std::byte>>> buffers;
  std::vector<Sample> batch;
  uint64_t real_bytes = 0;
  bool fillable = true;
  for (size_t i = 0; i < samples; ++i) {
    const size_t rank = in.Byte() % 5;
    Shape shape(rank);
    for (uint64_t& d : shape) d = in.Dim();
    uint64_t n = NumElements(shape);
    uint64_t nbytes = 0;
    if (n == UINT64_MAX || __builtin_mul_overflow(n, esize, &nbytes)) nbytes = UINT64_MAX;
    // Real bytes only for small tensors; the others get a view Fill must never be run on.
    auto buf = std::make_unique<std::vector<std::byte>>(nbytes <= kMaxFill ? nbytes : 0);
    for (size_t k = 0; k < buf->size(); ++k) (*buf)[k] = static_cast<std::byte>(k * 7 + i);
    if (nbytes > kMaxFill) fillable = false;
    real_bytes += buf->size();
    batch.emplace_back(
        i, std::vector<TensorView>{TensorView{kName, dtype, shape, buf->data(), nbytes}},
        Metadata{}, nullptr);
    buffers.push_back(std::move(buf));
  }
  Result<CollateLayout> layout = collator->Plan(batch);
  if (!layout.ok()) return 0;
  // A layout must be consistent: every field inside the region, aligned.
  for (const CollatedField& f : layout->fields) {
    if (f.offset % kTensorAlignment != 0 || f.offset > layout->total_bytes ||
        f.nbytes > layout->total_bytes - f.offset)
      __builtin_trap();
  }
  if (!fillable || real_bytes > kMaxFill || layout->total_bytes > 4 * kMaxFill) return 0;
  auto region = std::make_unique<std::byte[]>(layout->total_bytes + kTensorAlignment);
  auto p = reinterpret_cast<uintptr_t>(region.get());
  std::byte* aligned = region.get() + (kTensorAlignment - p % kTensorAlignment) % kTensorAlignment;
  CollatedBatch out = collator->Fill(*layout, batch, aligned, nullptr);
  if (out.tensors.size() != layout->fields.size()) __builtin_trap();
  return 0;
}
