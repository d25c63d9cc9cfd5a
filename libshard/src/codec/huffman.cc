#include "codec/huffman.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <queue>
#include <string>
#include <utility>

#include "format/bytes.h"

namespace libshard::codec::huffman {
namespace {

constexpr int kStreams = 4;
constexpr size_t kTableSize = size_t{1} << kMaxBits;

// Code lengths of at most kMaxBits for the symbols with a non-zero count: Huffman's, with the
// counts halved until the longest code fits.
void BuildLengths(const uint64_t* counts, uint8_t* len) {
  std::array<uint64_t, 256> c;
  std::copy(counts, counts + 256, c.begin());
  int present = 0;
  for (int s = 0; s < 256; ++s) present += c[s] > 0;
  std::fill(len, len + 256, 0);
  if (present == 1) {
    for (int s = 0; s < 256; ++s)
      if (c[s] > 0) len[s] = 1;
    return;
  }
  for (;;) {
    std::vector<int> parent(512, -1);
    using Item = std::pair<uint64_t, int>;
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> pq;
    for (int s = 0; s < 256; ++s)
      if (c[s] > 0) pq.push({c[s], s});
    int next = 256;
    while (pq.size() > 1) {
      const Item a = pq.top();
      pq.pop();
      const Item b = pq.top();
      pq.pop();
      parent[a.second] = parent[b.second] = next;
      pq.push({a.first + b.first, next++});
    }
    int longest = 0;
    for (int s = 0; s < 256; ++s) {
      if (c[s] == 0) continue;
      int d = 0;
      for (int x = s; parent[x] >= 0; x = parent[x]) ++d;
      len[s] = static_cast<uint8_t>(d);
      longest = std::max(longest, d);
    }
    if (longest <= kMaxBits) return;
    for (auto& v : c)
      if (v > 0) v = (v + 1) / 2;
  }
}

uint32_t Reverse(uint32_t code, int bits) {
  uint32_t r = 0;
  for (int i = 0; i < bits; ++i) r |= ((code >> i) & 1) << (bits - 1 - i);
  return r;
}

// Canonical codes (DEFLATE's rule), bit-reversed for LSB-first streams. Returns false when the
// lengths over-subscribe the code space (Kraft sum > 1).
bool CanonicalCodes(const uint8_t* len, uint32_t* rcode) {
  int count[kMaxBits + 1] = {};
  for (int s = 0; s < 256; ++s) ++count[len[s]];
  count[0] = 0;
  uint32_t next[kMaxBits + 2] = {};
  uint32_t code = 0;
  uint64_t kraft = 0;
  for (int b = 1; b <= kMaxBits; ++b) {
    code = (code + static_cast<uint32_t>(count[b - 1])) << 1;
    next[b] = code;
    kraft += static_cast<uint64_t>(count[b]) << (kMaxBits - b);
  }
  if (kraft > kTableSize) return false;
  for (int s = 0; s < 256; ++s)
    if (len[s] > 0) rcode[s] = Reverse(next[len[s]]++, len[s]);
  return true;
}

struct BitWriter {
  std::vector<std::byte>* out;
  uint64_t acc = 0;
  int bits = 0;
  void Put(uint32_t v, int n) {
    acc |= static_cast<uint64_t>(v) << bits;
    bits += n;
    if (bits >= 32) {
      for (int k = 0; k < 4; ++k) out->push_back(static_cast<std::byte>(acc >> (8 * k)));
      acc >>= 32;
      bits -= 32;
    }
  }
  void Flush() {
    for (; bits > 0; bits -= 8, acc >>= 8) out->push_back(static_cast<std::byte>(acc));
    bits = 0;
  }
};

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts (x86-64, aarch64)
}

}  // namespace

void Encode(const uint8_t* src, size_t n, std::vector<std::byte>* out) {
  uint64_t counts[256] = {};
  for (size_t i = 0; i < n; ++i) ++counts[src[i]];
  uint8_t len[256];
  BuildLengths(counts, len);
  uint32_t rcode[256] = {};
  CanonicalCodes(len, rcode);
  const size_t header_at = out->size();
  out->resize(header_at + kHeaderSize);
  for (int k = 0; k < 128; ++k)
    (*out)[header_at + k] = static_cast<std::byte>(len[2 * k] | (len[2 * k + 1] << 4));
  const size_t q = (n + kStreams - 1) / kStreams;
  size_t stream_start = out->size();
  for (int k = 0; k < kStreams; ++k) {
    BitWriter w{out};
    const size_t begin = std::min(n, k * q), end = std::min(n, (k + 1) * q);
    for (size_t i = begin; i < end; ++i) w.Put(rcode[src[i]], len[src[i]]);
    w.Flush();
    if (k < kStreams - 1)
      format::PutU32(out->data() + header_at + 128 + 4 * k,
                     static_cast<uint32_t>(out->size() - stream_start));
    stream_start = out->size();
  }
}

Status Decode(const std::byte* coded, size_t size, uint8_t* dst, size_t n) {
  if (size < kHeaderSize) return Status::Corruption("huffman plane shorter than its header");
  const auto* c = reinterpret_cast<const uint8_t*>(coded);
  uint8_t len[256];
  for (int k = 0; k < 128; ++k) {
    len[2 * k] = c[k] & 0xF;
    len[2 * k + 1] = c[k] >> 4;
  }
  for (int s = 0; s < 256; ++s)
    if (len[s] > kMaxBits) return Status::Corruption("huffman code length above 11 bits");
  uint32_t rcode[256] = {};
  if (!CanonicalCodes(len, rcode))
    return Status::Corruption("huffman code lengths over-subscribe the code space");
  // Single-symbol table (holes: symbol 0, kMaxBits bits), then the multi-symbol table: up to 4
  // symbols whose codes lie wholly within the 11-bit window.
  uint16_t single[kTableSize];
  std::fill(single, single + kTableSize, static_cast<uint16_t>(kMaxBits << 8));
  for (int s = 0; s < 256; ++s) {
    if (len[s] == 0) continue;
    for (uint32_t h = 0; h < (1u << (kMaxBits - len[s])); ++h)
      single[rcode[s] | (h << len[s])] = static_cast<uint16_t>((len[s] << 8) | s);
  }
  uint64_t multi[kTableSize];
  for (uint32_t w = 0; w < kTableSize; ++w) {
    uint32_t pos = 0, syms = 0, count = 0;
    while (count < 4) {
      const uint16_t e = single[w >> pos];
      const uint32_t l = e >> 8;
      if (count > 0 && l > kMaxBits - pos) break;
      syms |= static_cast<uint32_t>(e & 0xFF) << (8 * count);
      ++count;
      pos += l;
      if (pos >= kMaxBits) break;
    }
    multi[w] = syms | (uint64_t{count} << 32) | (uint64_t{pos} << 40);
  }

  struct Stream {
    const uint8_t* p;
    size_t size;
    uint64_t bp;
    uint8_t* out;
    uint8_t* end;
  };
  Stream st[kStreams];
  const size_t q = (n + kStreams - 1) / kStreams;
  size_t offset = kHeaderSize;
  for (int k = 0; k < kStreams; ++k) {
    if (offset > size)
      return Status::Corruption("huffman stream " + std::to_string(k) + " starts past the plane");
    const size_t sz = k < kStreams - 1 ? format::GetU32(coded + 128 + 4 * k) : size - offset;
    if (sz > size - offset)
      return Status::Corruption("huffman stream " + std::to_string(k) + " runs past the plane");
    st[k] = {c + offset, sz, 0, dst + std::min(n, k * q), dst + std::min(n, (k + 1) * q)};
    offset += sz;
  }
  // Fast loops: as many steps as a stream can take without a bounds check (a step reads 8 bytes at
  // bp / 8 and writes 4 bytes): the four streams interleaved while all can, then each alone.
  auto safe_steps = [](const Stream& s) -> uint64_t {
    if (s.size < 8) return 0;
    const uint64_t limit_bits = (uint64_t{s.size} - 8) * 8;
    const uint64_t by_input = s.bp <= limit_bits ? (limit_bits - s.bp) / kMaxBits + 1 : 0;
    return std::min<uint64_t>(by_input, static_cast<uint64_t>(s.end - s.out) / 4);
  };
#define LIBSHARD_HUFF_STEP(s)                                                               \
  {                                                                                         \
    const uint64_t e = multi[(Load64(s.p + (s.bp >> 3)) >> (s.bp & 7)) & (kTableSize - 1)]; \
    const uint32_t v = static_cast<uint32_t>(e);                                            \
    std::memcpy(s.out, &v, 4);                                                              \
    s.out += (e >> 32) & 0xFF;                                                              \
    s.bp += e >> 40;                                                                        \
  }
  for (;;) {
    uint64_t steps = UINT64_MAX;
    for (const Stream& s : st) steps = std::min(steps, safe_steps(s));
    if (steps == 0) break;
    Stream s0 = st[0], s1 = st[1], s2 = st[2], s3 = st[3];
    for (uint64_t i = 0; i < steps; ++i) {
      LIBSHARD_HUFF_STEP(s0)
      LIBSHARD_HUFF_STEP(s1)
      LIBSHARD_HUFF_STEP(s2)
      LIBSHARD_HUFF_STEP(s3)
    }
    st[0] = s0;
    st[1] = s1;
    st[2] = s2;
    st[3] = s3;
  }
  for (Stream& s : st) {
    for (uint64_t steps = safe_steps(s); steps > 0; steps = safe_steps(s))
      for (uint64_t i = 0; i < steps; ++i) LIBSHARD_HUFF_STEP(s)
  }
#undef LIBSHARD_HUFF_STEP
  // Tail: one symbol at a time, every read and write checked.
  for (int k = 0; k < kStreams; ++k) {
    Stream& s = st[k];
    const uint64_t total_bits = uint64_t{s.size} * 8;
    while (s.out < s.end) {
      uint64_t v = 0;
      const uint64_t byte = s.bp >> 3;
      for (uint64_t i = 0; i < 3 && byte + i < s.size; ++i)
        v |= uint64_t{s.p[byte + i]} << (8 * i);
      const uint16_t e = single[(v >> (s.bp & 7)) & (kTableSize - 1)];
      if (s.bp + (e >> 8) > total_bits)
        return Status::Corruption("huffman stream " + std::to_string(k) + " ends early");
      *s.out++ = static_cast<uint8_t>(e & 0xFF);
      s.bp += e >> 8;
    }
    if ((s.bp + 7) / 8 != s.size)
      return Status::Corruption("huffman stream " + std::to_string(k) + " has bytes left over");
  }
  return Status::OK();
}

}  // namespace libshard::codec::huffman
