// codec_bench: the field codecs (FORMAT.md §4.3) against no compression and against the v1
// per-sample byte-shuffled zstd frame (`pack --compress zstd:L`), on one thread, in memory.
//
//   codec_bench INPUT LABEL [--chunk=ELEMS] [--level=L] [METHOD...]
//
// INPUT is written by bench/codec_bench.py from a directory of .pt samples: "LSCB0001", u32
// samples, then per sample u32 fields and per field u32 dtype, u64 rows, u64 row_elems, u64
// nbytes, the tensor's bytes (geometry as FORMAT.md §4.3.1). Prints one tab-separated line per
// method: label, method, raw bytes, stored bytes, ratio, encode MB/s, decode GB/s, decode CPU-s
// per decoded GB, and for lossy methods the max relative error (elements in e4m3's normal range),
// the mean relative error (all non-zero finite elements) and the max error over the row's absmax.
#include <time.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "codec/field_codec.h"
#include "codec/float8.h"
#include "codec/huffman.h"
#include "format/bytes.h"

using namespace libshard;
using codec::CodecId;

namespace {

struct Field {
  codec::FieldGeometry g;
  std::vector<std::byte> bytes;
};
using Sample = std::vector<Field>;

double Now(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

[[noreturn]] void Die(const std::string& m) {
  std::fprintf(stderr, "codec_bench: %s\n", m.c_str());
  std::exit(1);
}

std::vector<Sample> Load(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  format::ByteReader r(reinterpret_cast<const std::byte*>(all.data()), all.size());
  std::string_view magic;
  uint32_t n = 0;
  if (!r.Bytes(8, &magic) || magic != "LSCB0001" || !r.U32(&n)) Die("bad input file");
  std::vector<Sample> samples(n);
  for (auto& s : samples) {
    uint32_t f = 0;
    if (!r.U32(&f)) Die("truncated input");
    s.resize(f);
    for (auto& field : s) {
      uint32_t dtype = 0;
      uint64_t nbytes = 0;
      std::string_view b;
      if (!r.U32(&dtype) || !r.U64(&field.g.rows) || !r.U64(&field.g.row_elems) ||
          !r.U64(&nbytes) || !r.Bytes(nbytes, &b))
        Die("truncated input");
      field.g.dtype = static_cast<DType>(dtype);
      field.bytes.assign(reinterpret_cast<const std::byte*>(b.data()),
                         reinterpret_cast<const std::byte*>(b.data()) + b.size());
    }
  }
  return samples;
}

bool IsHalf(DType d) { return d == DType::kBFloat16 || d == DType::kFloat16; }

struct Row {
  std::string method;
  uint64_t raw = 0, stored = 0;
  double enc_s = 0, dec_wall = 0, dec_cpu = 0, decoded = 0;
  double max_rel = -1, mean_rel = -1, max_abs_over_absmax = -1;
};

void Print(const std::string& label, const Row& r) {
  std::printf("%s\t%s\t%llu\t%llu\t%.3f\t%.0f\t%.2f\t%.3f", label.c_str(), r.method.c_str(),
              static_cast<unsigned long long>(r.raw), static_cast<unsigned long long>(r.stored),
              static_cast<double>(r.raw) / static_cast<double>(r.stored), r.raw / r.enc_s / 1e6,
              r.decoded / r.dec_wall / 1e9, r.dec_cpu / (r.decoded / 1e9));
  if (r.max_rel >= 0) std::printf("\t%.4f\t%.4f\t%.4f", r.max_rel, r.mean_rel, r.max_abs_over_absmax);
  std::printf("\n");
  std::fflush(stdout);
}

// Runs `decode_all` at least 5 times and for at least min_seconds; keeps the fastest pass (by
// thread CPU time, with its wall time), the figure least disturbed by other work on the machine.
template <typename F>
void TimeDecode(Row* row, uint64_t decoded_per_pass, F&& decode_all, double min_seconds = 1.0) {
  int passes = 0;
  const double start = Now(CLOCK_MONOTONIC);
  row->dec_cpu = row->dec_wall = 1e30;
  do {
    const double w0 = Now(CLOCK_MONOTONIC), c0 = Now(CLOCK_THREAD_CPUTIME_ID);
    decode_all();
    const double cpu = Now(CLOCK_THREAD_CPUTIME_ID) - c0;
    if (cpu < row->dec_cpu) {
      row->dec_cpu = cpu;
      row->dec_wall = Now(CLOCK_MONOTONIC) - w0;
    }
    ++passes;
  } while (passes < 5 || Now(CLOCK_MONOTONIC) - start < min_seconds);
  row->decoded = static_cast<double>(decoded_per_pass);
}

uint64_t RawBytes(const std::vector<Sample>& samples) {
  uint64_t n = 0;
  for (const auto& s : samples)
    for (const auto& f : s) n = format::AlignUp(n, 64) + f.bytes.size();
  return n;
}

// v1's --compress zstd:L: the raw payload with 2-byte tensors byte-shuffled, one frame a sample.
Row V1Zstd(const std::vector<Sample>& samples, int level) {
  Row row;
  row.method = "zstd:" + std::to_string(level) + " (v1, shuffled)";
  std::vector<std::vector<std::byte>> frames;
  std::vector<std::vector<std::byte>> payloads;
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  const double t0 = Now(CLOCK_THREAD_CPUTIME_ID);
  for (const auto& s : samples) {
    uint64_t size = 0;
    for (const auto& f : s) size = format::AlignUp(size, 64) + f.bytes.size();
    std::vector<std::byte> payload(size);
    uint64_t off = 0;
    for (const auto& f : s) {
      off = format::AlignUp(off, 64);
      const size_t n = f.bytes.size();
      if (DTypeSize(f.g.dtype) == 2) {
        for (size_t i = 0; i < n / 2; ++i) {
          payload[off + i] = f.bytes[2 * i];
          payload[off + n / 2 + i] = f.bytes[2 * i + 1];
        }
      } else {
        std::memcpy(payload.data() + off, f.bytes.data(), n);
      }
      off += n;
    }
    std::vector<std::byte> frame(ZSTD_compressBound(size));
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    const size_t z = ZSTD_compress2(cctx, frame.data(), frame.size(), payload.data(), size);
    if (ZSTD_isError(z)) Die("zstd failed");
    frame.resize(z);
    row.stored += z;
    row.raw += size;
    frames.push_back(std::move(frame));
    payloads.push_back(std::vector<std::byte>(size));
  }
  row.enc_s = Now(CLOCK_THREAD_CPUTIME_ID) - t0;
  ZSTD_freeCCtx(cctx);
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  std::vector<std::byte> scratch;
  TimeDecode(&row, row.raw, [&] {
    for (size_t k = 0; k < samples.size(); ++k) {
      auto& out = payloads[k];
      scratch.resize(out.size());
      if (ZSTD_decompressDCtx(dctx, scratch.data(), scratch.size(), frames[k].data(),
                              frames[k].size()) != out.size())
        Die("zstd decode failed");
      uint64_t off = 0;
      for (const auto& f : samples[k]) {
        off = format::AlignUp(off, 64);
        const size_t n = f.bytes.size();
        if (DTypeSize(f.g.dtype) == 2) {
          const std::byte* lo = scratch.data() + off;
          const std::byte* hi = lo + n / 2;
          for (size_t i = 0; i < n / 2; ++i) {
            out[off + 2 * i] = lo[i];
            out[off + 2 * i + 1] = hi[i];
          }
        } else {
          std::memcpy(out.data() + off, scratch.data() + off, n);
        }
        off += n;
      }
    }
  });
  ZSTD_freeDCtx(dctx);
  for (size_t k = 0; k < samples.size(); ++k) {
    uint64_t off = 0;
    for (const auto& f : samples[k]) {
      off = format::AlignUp(off, 64);
      if (std::memcmp(payloads[k].data() + off, f.bytes.data(), f.bytes.size()) != 0)
        Die("zstd round trip differs");
      off += f.bytes.size();
    }
  }
  return row;
}

// v2: each 2-byte float field under `half_codec`, every other field under the zstd field codec
// (level 1), regions 64-aligned within the sample.
Row V2(const std::vector<Sample>& samples, CodecId half_codec, const std::string& name,
       const codec::EncodeOptions& options) {
  Row row;
  row.method = name;
  std::vector<std::vector<std::vector<std::byte>>> regions(samples.size());
  std::vector<std::vector<std::vector<std::byte>>> outs(samples.size());
  auto codec_of = [&](const Field& f) {
    return IsHalf(f.g.dtype) ? half_codec : CodecId::kZstd;
  };
  codec::EncodeOptions int_options;
  int_options.level = 1;
  const double t0 = Now(CLOCK_THREAD_CPUTIME_ID);
  for (size_t k = 0; k < samples.size(); ++k) {
    uint64_t stored = 0;
    for (const auto& f : samples[k]) {
      std::vector<std::byte> region;
      const Status st = codec::Encode(codec_of(f), f.g, f.bytes,
                                      IsHalf(f.g.dtype) ? options : int_options, &region);
      if (!st.ok()) Die(st.ToString());
      stored = format::AlignUp(stored, 64) + region.size();
      row.raw = format::AlignUp(row.raw, 64) + f.bytes.size();
      regions[k].push_back(std::move(region));
      outs[k].push_back(std::vector<std::byte>(f.bytes.size()));
    }
    row.stored += stored;
  }
  row.enc_s = Now(CLOCK_THREAD_CPUTIME_ID) - t0;
  row.raw = RawBytes(samples);
  codec::Decoder decoder;
  TimeDecode(&row, row.raw, [&] {
    for (size_t k = 0; k < samples.size(); ++k)
      for (size_t f = 0; f < samples[k].size(); ++f) {
        const Field& field = samples[k][f];
        const Status st = decoder.Decode(regions[k][f], codec_of(field), field.g, UINT64_MAX,
                                         outs[k][f]);
        if (!st.ok()) Die(st.ToString());
      }
  });
  if (codec::IsLossy(half_codec)) {
    double max_rel = 0, sum_rel = 0, max_abs = 0;
    uint64_t count = 0;
    for (size_t k = 0; k < samples.size(); ++k)
      for (size_t f = 0; f < samples[k].size(); ++f) {
        const Field& field = samples[k][f];
        if (!IsHalf(field.g.dtype)) continue;
        const bool bf16 = field.g.dtype == DType::kBFloat16;
        auto get = [&](const std::vector<std::byte>& b, uint64_t i) {
          const uint16_t h = static_cast<uint16_t>(std::to_integer<uint16_t>(b[2 * i]) |
                                                   (std::to_integer<uint16_t>(b[2 * i + 1]) << 8));
          return static_cast<double>(bf16 ? codec::BF16ToF32(h) : codec::F16ToF32(h));
        };
        for (uint64_t r = 0; r < field.g.rows; ++r) {
          double absmax = 0;
          for (uint64_t c = 0; c < field.g.row_elems; ++c) {
            const double x = std::fabs(get(field.bytes, r * field.g.row_elems + c));
            if (std::isfinite(x)) absmax = std::max(absmax, x);
          }
          for (uint64_t c = 0; c < field.g.row_elems; ++c) {
            const uint64_t i = r * field.g.row_elems + c;
            const double x = get(field.bytes, i), y = get(outs[k][f], i);
            if (!std::isfinite(x) || x == 0) continue;
            const double rel = std::fabs(y - x) / std::fabs(x);
            sum_rel += rel;
            ++count;
            if (std::fabs(x) >= 0x1p-6 * absmax / 448) max_rel = std::max(max_rel, rel);
            if (absmax > 0) max_abs = std::max(max_abs, std::fabs(y - x) / absmax);
          }
        }
      }
    row.max_rel = max_rel;
    row.mean_rel = count ? sum_rel / static_cast<double>(count) : 0;
    row.max_abs_over_absmax = max_abs;
  } else {
    for (size_t k = 0; k < samples.size(); ++k)
      for (size_t f = 0; f < samples[k].size(); ++f)
        if (outs[k][f] != samples[k][f].bytes) Die(name + ": round trip differs");
  }
  return row;
}

// What the planes decode (codec 2, or 5) spends in its entropy decoder alone: every chunk's
// sign+exponent (codec 5: exponent) plane decoded into a scratch buffer, nothing interleaved (per
// decoded byte of the whole tensors).
// With `variant` >= 0, the Huffman planes are decoded by that decode table variant
// (huffman::DecoderVariant) instead of huffman::Decode.
Row PlanesEntropyOnly(const std::vector<Sample>& samples, const codec::EncodeOptions& options,
                      CodecId id = CodecId::kPlanes, int variant = -1) {
  static const char* const kVariants[] = {"window 11, run 6", "window 11, run 7",
                                          "window 12, run 6", "window 12, run 7"};
  Row row;
  row.method = variant < 0 ? std::string("  of which entropy decoding")
                           : std::string("  of which entropy decoding, ") + kVariants[variant];
  struct Plane {
    const std::byte* p;
    size_t coded, n;
    uint8_t mode;
  };
  std::vector<std::vector<std::byte>> regions;
  std::vector<Plane> planes;
  size_t largest = 0;
  for (const auto& s : samples)
    for (const auto& f : s) {
      if (!IsHalf(f.g.dtype)) continue;
      regions.emplace_back();
      if (!codec::Encode(id, f.g, f.bytes, options, &regions.back()).ok())
        Die("encode failed");
      row.raw += f.bytes.size();
    }
  size_t k = 0;
  for (const auto& s : samples)
    for (const auto& f : s) {
      if (!IsHalf(f.g.dtype)) continue;
      const auto& region = regions[k++];
      auto info = codec::ParseRegion(region, id, f.g);
      if (!info.ok()) Die(info.status().ToString());
      const std::byte* p = region.data() + info->chunks_offset;
      for (uint64_t c = 0; c < info->chunk_count; ++c) {
        const std::byte* e = region.data() + codec::kRegionHeaderSize + codec::kChunkEntrySize * c;
        const size_t coded = format::GetU32(e);
        const uint64_t rc = std::min<uint64_t>(info->chunk_rows, f.g.rows - c * info->chunk_rows);
        const size_t n = rc * f.g.row_elems;
        // The fixed part: the low bytes, and for codec 5 a sign bitmap per row (§4.3.7); codec 6:
        // the row scales and a nibble row per row (§4.3.8).
        const size_t fixed =
            id == CodecId::kFp8Planes ? rc * (4 + (f.g.row_elems + 1) / 2)
            : n + (id == CodecId::kPlanes2 ? rc * ((f.g.row_elems + 7) / 8) : 0);
        const uint8_t mode = std::to_integer<uint8_t>(e[4]);
        if (mode != 0) planes.push_back({p + fixed, coded, n, mode});
        largest = std::max(largest, n);
        p += fixed + coded;
      }
    }
  row.stored = 1;
  row.enc_s = 1e-30;
  std::vector<std::byte> scratch(largest);
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  TimeDecode(&row, row.raw, [&] {
    for (const Plane& pl : planes) {
      if (pl.mode == 2) {
        auto* out = reinterpret_cast<uint8_t*>(scratch.data());
        const Status st =
            variant < 0 ? codec::huffman::Decode(pl.p, pl.coded, out, pl.n)
                        : codec::huffman::DecodeVariant(
                              static_cast<codec::huffman::DecoderVariant>(variant), pl.p, pl.coded,
                              out, pl.n);
        if (!st.ok()) Die("huffman failed");
      } else if (ZSTD_decompressDCtx(dctx, scratch.data(), pl.n, pl.p, pl.coded) != pl.n) {
        Die("zstd failed");
      }
    }
  });
  ZSTD_freeDCtx(dctx);
  return row;
}

Row None(const std::vector<Sample>& samples) {
  Row row;
  row.method = "none";
  row.raw = row.stored = RawBytes(samples);
  row.enc_s = 1e-30;
  std::vector<std::vector<std::byte>> outs;
  for (const auto& s : samples)
    for (const auto& f : s) outs.push_back(std::vector<std::byte>(f.bytes.size()));
  TimeDecode(&row, row.raw, [&] {
    size_t j = 0;
    for (const auto& s : samples)
      for (const auto& f : s) std::memcpy(outs[j++].data(), f.bytes.data(), f.bytes.size());
  });
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) Die("usage: codec_bench INPUT LABEL [METHOD...]");
  const auto samples = Load(argv[1]);
  const std::string label = argv[2];
  std::vector<std::string> methods;
  codec::EncodeOptions planes;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--chunk=", 0) == 0) planes.chunk_elems = std::stoull(a.substr(8));
    else if (a.rfind("--level=", 0) == 0) planes.level = std::stoi(a.substr(8));
    else methods.push_back(a);
  }
  auto want = [&](const std::string& m) {
    return methods.empty() || std::find(methods.begin(), methods.end(), m) != methods.end();
  };
  codec::EncodeOptions no_base = planes;
  no_base.channel_base = false;
  if (want("none")) Print(label, None(samples));
  for (int level : {1, 3, 9, 19})
    if (want("zstd:" + std::to_string(level))) Print(label, V1Zstd(samples, level));
  codec::EncodeOptions planes_zstd = planes;
  planes_zstd.entropy = codec::EntropyCoder::kZstd;
  if (want("planes")) Print(label, V2(samples, CodecId::kPlanes, "planes (v2 codec 2)", planes));
  if (want("planes-entropy-only")) Print(label, PlanesEntropyOnly(samples, planes));
  if (want("planes-zstd")) {
    Print(label, V2(samples, CodecId::kPlanes, "planes, zstd:1 as the entropy coder", planes_zstd));
    if (want("planes-entropy-only")) Print(label, PlanesEntropyOnly(samples, planes_zstd));
  }
  if (want("planes2")) Print(label, V2(samples, CodecId::kPlanes2, "planes2 (v2 codec 5)", planes));
  if (want("planes2-entropy-only"))
    Print(label, PlanesEntropyOnly(samples, planes, CodecId::kPlanes2));
  // The Huffman decode table's variants on both planes (issue 26): what the decoder keeps.
  if (want("huffman-variants"))
    for (CodecId id : {CodecId::kPlanes, CodecId::kPlanes2}) {
      Print(label, V2(samples, id, id == CodecId::kPlanes ? "planes (v2 codec 2)" : "planes2 (v2 codec 5)",
                      planes));
      for (int v = 0; v < 4; ++v) Print(label, PlanesEntropyOnly(samples, planes, id, v));
    }
  if (want("planes-nobase"))
    Print(label, V2(samples, CodecId::kPlanes, "planes, no channel base", no_base));
  if (want("zstd-field"))
    Print(label, V2(samples, CodecId::kZstd, "zstd:1 per field (v2 codec 1)", planes));
  if (want("fp8")) Print(label, V2(samples, CodecId::kFp8, "fp8 e4m3fn (v2 codec 3)", planes));
  if (want("fp8-entropy"))
    Print(label, V2(samples, CodecId::kFp8Entropy, "fp8 + entropy (v2 codec 4)", planes));
  codec::EncodeOptions fp8_other = planes;
  fp8_other.fp8_entropy = planes.fp8_entropy == codec::EntropyCoder::kZstd
                              ? codec::EntropyCoder::kHuffman
                              : codec::EntropyCoder::kZstd;
  if (want("fp8-entropy-other"))
    Print(label, V2(samples, CodecId::kFp8Entropy,
                    fp8_other.fp8_entropy == codec::EntropyCoder::kZstd
                        ? "fp8 + entropy, zstd (mode 1)"
                        : "fp8 + entropy, Huffman (mode 2)",
                    fp8_other));
  if (want("fp8-planes"))
    Print(label, V2(samples, CodecId::kFp8Planes, "fp8-planes (v2 codec 6)", planes));
  if (want("fp8-planes-entropy-only"))
    Print(label, PlanesEntropyOnly(samples, planes, CodecId::kFp8Planes));
  if (want("fp8-planes-zstd"))
    Print(label, V2(samples, CodecId::kFp8Planes, "fp8-planes, zstd:1 as the entropy coder",
                    planes_zstd));
  return 0;
}
