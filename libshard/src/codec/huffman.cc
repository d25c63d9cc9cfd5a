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

namespace {

// A decode table entry: up to 7 symbols (bytes 0..6), how many (bits 56..59) and the bits their
// codes take (bits 60..63). Index: the next `window` bits of a stream, first bit lowest.
constexpr uint64_t Entry(uint64_t syms, uint32_t count, uint32_t bits) {
  return syms | (uint64_t{count} << 56) | (uint64_t{bits} << 60);
}
// The widest decode window: codes stay at most kMaxBits (11) long on disk; a decoder may look
// at more bits at once, to take more of the short codes of a low-entropy plane per lookup.
constexpr int kMaxWindow = 12;
constexpr size_t kMaxTableSize = size_t{1} << kMaxWindow;

struct Tables {
  // Single symbol per kMaxBits window: (length << 8) | symbol; windows no code claims: symbol 0,
  // 11 bits.
  uint16_t single[kTableSize];
  // Multi-symbol, indexed by `window` bits: the longest run of up to `run` symbols whose codes lie
  // wholly within the window (at least one). The same as decoding `single` repeatedly while the
  // next code fits.
  uint64_t multi[kMaxTableSize];
  // Present symbols by code length, for the enumeration.
  uint8_t sym[256];
  uint8_t sym_len[256];
  uint32_t sym_code[256];
  int present = 0;
  uint32_t window = kMaxBits;
  uint32_t run = 6;

  // Fills every window whose low `pos` bits are `code` with `value`.
  void Fill(uint32_t code, uint32_t pos, uint64_t value) {
    for (uint32_t w = code; w < (1u << window); w += 1u << pos) multi[w] = value;
  }
  // The windows that begin with the codes of the `count` symbols in `syms` (`pos` bits, `code`):
  // those whose next code does not fit end here; the others take one more symbol.
  void Build(uint32_t code, uint32_t pos, uint64_t syms, uint32_t count) {
    Fill(code, pos, Entry(syms, count, pos));
    if (count == run) return;
    for (int i = 0; i < present && pos + sym_len[i] <= window; ++i)
      Build(code | (sym_code[i] << pos), pos + sym_len[i], syms | (uint64_t{sym[i]} << (8 * count)),
            count + 1);
  }
};

// Decodes with a `Window`-bit multi-symbol table of runs of at most `Run` symbols, `Lookups`
// lookups per refill of the bit buffer (each lookup takes at most Window bits; a refill leaves at
// least 56, so Lookups · Window ≤ 56).
template <uint32_t Window, uint32_t Run, uint32_t Lookups>
Status DecodeWith(const std::byte* coded, size_t size, uint8_t* dst, size_t n) {
  static_assert(Window >= kMaxBits && Window <= kMaxWindow && Run >= 1 && Run <= 7);
  static_assert(Lookups * Window <= 56);
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
  // The tables: ~20-40 KB, built per plane. Building `multi` by enumerating the symbol runs costs
  // about one store per entry and level, where probing 4 windows per entry mispredicted a
  // branch per entry (the fixed cost that dominated planes of ~10^5 symbols).
  thread_local Tables t;
  t.window = Window;
  t.run = Run;
  std::fill(t.single, t.single + kTableSize, static_cast<uint16_t>(kMaxBits << 8));
  t.present = 0;
  for (int l = 1; l <= kMaxBits; ++l)
    for (int s = 0; s < 256; ++s)
      if (len[s] == l) {
        t.sym[t.present] = static_cast<uint8_t>(s);
        t.sym_len[t.present] = static_cast<uint8_t>(l);
        t.sym_code[t.present] = rcode[s];
        ++t.present;
        for (uint32_t w = rcode[s]; w < kTableSize; w += 1u << l)
          t.single[w] = static_cast<uint16_t>((l << 8) | s);
      }
  // Windows no code claims (an incomplete code): symbol 0 of 11 bits, as `single` says.
  t.Fill(0, 0, Entry(0, 1, kMaxBits));
  for (int i = 0; i < t.present; ++i)
    t.Build(t.sym_code[i], t.sym_len[i], t.sym[i], 1);
  const uint64_t* multi = t.multi;
  constexpr uint64_t kWindowMask = (uint64_t{1} << Window) - 1;

  struct Stream {
    const uint8_t* begin;  // the stream's first byte
    size_t size;           // its bytes
    const uint8_t* p;      // next byte to load into buf
    uint64_t buf;          // bits loaded, not yet consumed, first bit lowest
    uint32_t cnt;          // how many
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
    st[k] = {c + offset, sz, c + offset, 0, 0, dst + std::min(n, k * q),
             dst + std::min(n, (k + 1) * q)};
    offset += sz;
  }
  // Fast loop: a 64-bit bit buffer per stream, refilled without branches (8 bytes loaded, the
  // whole bytes that fit kept: 56..63 bits), then Lookups lookups of at most Window bits each,
  // each storing 8 bytes and advancing by its run (at most Run symbols). A step so reads at most
  // 8 bytes at p (p advances at most 7), advances out by at most Lookups * Run and writes below
  // out + Lookups * Run + 8 (what safe_steps allows per step); it may load bytes past its
  // stream's end (never past the plane's), which only a corrupt stream consumes, and the bit
  // count checks that below. The four streams interleaved while all can, then each alone.
  const uint8_t* plane_end = c + size;
  auto safe_steps = [plane_end](const Stream& s) -> uint64_t {
    const size_t in_left = static_cast<size_t>(plane_end - s.p);
    if (in_left < 8) return 0;
    return std::min<uint64_t>((in_left - 8) / 7 + 1,
                              static_cast<uint64_t>(s.end - s.out) / (Lookups * Run + 8));
  };
#define LIBSHARD_HUFF_REFILL(s)                 \
  s.buf |= Load64(s.p) << s.cnt;                \
  s.p += (63 - s.cnt) >> 3;                     \
  s.cnt |= 56;
#define LIBSHARD_HUFF_LOOKUP(s)                                     \
  {                                                                 \
    const uint64_t e = multi[s.buf & kWindowMask];                  \
    std::memcpy(s.out, &e, 8);                                      \
    s.out += (e >> 56) & 0xF;                                       \
    const uint32_t b = static_cast<uint32_t>(e >> 60);              \
    s.buf >>= b;                                                    \
    s.cnt -= b;                                                     \
  }
  for (;;) {
    uint64_t steps = UINT64_MAX;
    for (const Stream& s : st) steps = std::min(steps, safe_steps(s));
    if (steps == 0) break;
    Stream s0 = st[0], s1 = st[1], s2 = st[2], s3 = st[3];
    for (uint64_t i = 0; i < steps; ++i) {
      LIBSHARD_HUFF_REFILL(s0)
      LIBSHARD_HUFF_REFILL(s1)
      LIBSHARD_HUFF_REFILL(s2)
      LIBSHARD_HUFF_REFILL(s3)
      for (uint32_t j = 0; j < Lookups; ++j) {
        LIBSHARD_HUFF_LOOKUP(s0)
        LIBSHARD_HUFF_LOOKUP(s1)
        LIBSHARD_HUFF_LOOKUP(s2)
        LIBSHARD_HUFF_LOOKUP(s3)
      }
    }
    st[0] = s0;
    st[1] = s1;
    st[2] = s2;
    st[3] = s3;
  }
  for (Stream& s : st) {
    for (uint64_t steps = safe_steps(s); steps > 0; steps = safe_steps(s))
      for (uint64_t i = 0; i < steps; ++i) {
        LIBSHARD_HUFF_REFILL(s)
        for (uint32_t j = 0; j < Lookups; ++j) LIBSHARD_HUFF_LOOKUP(s)
      }
  }
#undef LIBSHARD_HUFF_LOOKUP
#undef LIBSHARD_HUFF_REFILL
  // Tail: one symbol at a time, bytes loaded one by one, every read and write checked, and no
  // code may take a bit past the stream's end.
  for (int k = 0; k < kStreams; ++k) {
    Stream& s = st[k];
    const uint64_t total_bits = uint64_t{s.size} * 8;
    // Bits consumed so far: loaded minus buffered.
    uint64_t used = static_cast<uint64_t>(s.p - s.begin) * 8 - s.cnt;
    if (used > total_bits)
      return Status::Corruption("huffman stream " + std::to_string(k) + " ends early");
    while (s.out < s.end) {
      while (s.cnt <= 56 && s.p < plane_end) {
        s.buf |= uint64_t{*s.p++} << s.cnt;
        s.cnt += 8;
      }
      const uint16_t e = t.single[s.buf & (kTableSize - 1)];
      const uint32_t l = e >> 8;
      if (used + l > total_bits)
        return Status::Corruption("huffman stream " + std::to_string(k) + " ends early");
      *s.out++ = static_cast<uint8_t>(e & 0xFF);
      s.buf >>= l;
      s.cnt -= l;
      used += l;
    }
    if ((used + 7) / 8 != s.size)
      return Status::Corruption("huffman stream " + std::to_string(k) + " has bytes left over");
  }
  return Status::OK();
}

}  // namespace

// Window 11, runs of 6, 5 lookups a refill: measured (codec_bench huffman-variants, real hidden
// states of MiniLM, SmolLM2 and MPNet, 2026-12-02) the fastest or tied on both the codec 2 and the
// codec 5 planes. Runs of 7 gained nothing (a lookup yields ~5.8 of the exponent plane's symbols
// at most 6, few windows hold 7 codes), and the 12-bit window lost 3-10%: its 32 KiB table and
// 4 lookups a refill cost more than the longer runs give.
Status Decode(const std::byte* coded, size_t size, uint8_t* dst, size_t n) {
  return DecodeWith<kMaxBits, 6, 5>(coded, size, dst, n);
}

Status DecodeVariant(DecoderVariant v, const std::byte* coded, size_t size, uint8_t* dst,
                     size_t n) {
  switch (v) {
    case DecoderVariant::kWindow11Run6: return DecodeWith<11, 6, 5>(coded, size, dst, n);
    case DecoderVariant::kWindow11Run7: return DecodeWith<11, 7, 5>(coded, size, dst, n);
    case DecoderVariant::kWindow12Run6: return DecodeWith<12, 6, 4>(coded, size, dst, n);
    case DecoderVariant::kWindow12Run7: return DecodeWith<12, 7, 4>(coded, size, dst, n);
  }
  return Status::InvalidArgument("unknown huffman decoder variant");
}

}  // namespace libshard::codec::huffman
