// Materialising strided tensor views as C-contiguous bytes, and byte-order swaps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace libshard::convert {

// True when a view with these sizes and strides (in elements) is C-contiguous, ignoring the
// strides of dims of size 1 (which torch leaves arbitrary). Empty views count as contiguous.
bool IsContiguous(std::span<const uint64_t> shape, std::span<const uint64_t> strides);

// Copies the view into dst in C order. `src` holds elements [first, ...) of the storage, where
// `first` is the view's storage offset; every element the view touches must lie inside src
// (the caller checked the extent). dst.size() == numel * item. Strides may be zero or overlap.
void GatherStrided(std::span<const std::byte> src, std::span<const uint64_t> shape,
                   std::span<const uint64_t> strides, size_t item, std::span<std::byte> dst);

// Reverses the bytes of every `item`-byte element of buf (item 1 is a no-op).
void SwapElementBytes(std::span<std::byte> buf, size_t item);

}  // namespace libshard::convert
