// Little-endian encoding helpers and overflow-checked arithmetic (FORMAT.md §1).
// Values are encoded byte by byte so the layout never depends on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace libshard::format {

inline void PutU16(std::byte* p, uint16_t v) {
  for (int k = 0; k < 2; ++k) p[k] = static_cast<std::byte>(v >> (8 * k));
}
inline void PutU32(std::byte* p, uint32_t v) {
  for (int k = 0; k < 4; ++k) p[k] = static_cast<std::byte>(v >> (8 * k));
}
inline void PutU64(std::byte* p, uint64_t v) {
  for (int k = 0; k < 8; ++k) p[k] = static_cast<std::byte>(v >> (8 * k));
}
inline void PutI32(std::byte* p, int32_t v) { PutU32(p, static_cast<uint32_t>(v)); }
inline void PutI64(std::byte* p, int64_t v) { PutU64(p, static_cast<uint64_t>(v)); }

inline uint16_t GetU16(const std::byte* p) {
  return static_cast<uint16_t>(std::to_integer<uint16_t>(p[0]) |
                               (std::to_integer<uint16_t>(p[1]) << 8));
}
inline uint32_t GetU32(const std::byte* p) {
  uint32_t v = 0;
  for (int k = 3; k >= 0; --k) v = (v << 8) | std::to_integer<uint32_t>(p[k]);
  return v;
}
inline uint64_t GetU64(const std::byte* p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | std::to_integer<uint64_t>(p[k]);
  return v;
}
inline int32_t GetI32(const std::byte* p) { return static_cast<int32_t>(GetU32(p)); }
inline int64_t GetI64(const std::byte* p) { return static_cast<int64_t>(GetU64(p)); }

// Appends little-endian values to a byte string.
class ByteWriter {
 public:
  explicit ByteWriter(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Put<2>(v); }
  void U32(uint32_t v) { Put<4>(v); }
  void U64(uint64_t v) { Put<8>(v); }
  void I32(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Bytes(std::string_view s) { out_->append(s); }

 private:
  template <int N>
  void Put(uint64_t v) {
    for (int k = 0; k < N; ++k) out_->push_back(static_cast<char>((v >> (8 * k)) & 0xff));
  }
  std::string* out_;
};

// Bounds-checked sequential reader over untrusted bytes. Every getter returns false (and leaves
// the position unchanged) when fewer bytes remain than requested.
class ByteReader {
 public:
  ByteReader(const std::byte* data, size_t size) : data_(data), size_(size) {}
  size_t position() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  bool U8(uint8_t* v) {
    if (remaining() < 1) return false;
    *v = std::to_integer<uint8_t>(data_[pos_++]);
    return true;
  }
  bool U16(uint16_t* v) { return Get(2, [&](const std::byte* p) { *v = GetU16(p); }); }
  bool U32(uint32_t* v) { return Get(4, [&](const std::byte* p) { *v = GetU32(p); }); }
  bool U64(uint64_t* v) { return Get(8, [&](const std::byte* p) { *v = GetU64(p); }); }
  bool I32(int32_t* v) { return Get(4, [&](const std::byte* p) { *v = GetI32(p); }); }
  bool I64(int64_t* v) { return Get(8, [&](const std::byte* p) { *v = GetI64(p); }); }
  // A view of the next n bytes.
  bool Bytes(uint64_t n, std::string_view* v) {
    if (remaining() < n) return false;
    *v = std::string_view(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return true;
  }

 private:
  template <typename F>
  bool Get(size_t n, F&& f) {
    if (remaining() < n) return false;
    f(data_ + pos_);
    pos_ += n;
    return true;
  }
  const std::byte* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Overflow-checked arithmetic: false on overflow, *out unspecified then.
inline bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
inline bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
// align(x, a) for a power of two a.
inline bool CheckedAlignUp(uint64_t x, uint64_t a, uint64_t* out) {
  if (!CheckedAdd(x, a - 1, out)) return false;
  *out &= ~(a - 1);
  return true;
}
inline constexpr uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

inline std::string Hex16(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int k = 15; k >= 0; --k, v >>= 4) s[k] = kDigits[v & 0xf];
  return s;
}

inline const std::byte* AsBytes(std::string_view s) {
  return reinterpret_cast<const std::byte*>(s.data());
}

}  // namespace libshard::format
