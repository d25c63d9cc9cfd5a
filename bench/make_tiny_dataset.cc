// make_tiny_dataset OUT N [--seed S] [--parts K] [--payload B]
//                   [--payload-every E]: writes a dataset of N tiny samples fast with the C++
// Writer, for the index benchmark (bench/index_bench.cc, issue 14) and the start benchmark
// (bench/start_bench.py, issue 21).
// With --parts K it writes K parts of N/K samples and joins them with MergeDatasets (as
// `pack --part` and `libshard merge` do): the Writer holds every sample's index entry until
// Finish (about 1.4 KB a sample at its peak), merge about half of that, so 10^7 samples fit in
// memory that one Writer of them would not.
//
// The schema is EAGLE-3's (input_ids, loss_mask [L]; hidden_state [1, L, H]; aux_hidden_state
// [1, L, 3H]; length field hidden_state, seq_dim 1) with H = 0 and input_ids/loss_mask of shape
// [0], so every sample is empty (no shard bytes: 10^7 samples need no disk) while the index holds
// what it holds for real samples: a length per sample (1..4096, random), dims, and full
// provenance (a path under a shared prefix, the source size, mtime and a content hash). Only the
// place columns differ from real data (every empty sample lies at offset 4096 of shard 0).
// With --payload B, every E-th sample (index % E == 0; E = 1 by default) instead carries B bytes
// in loss_mask (int64 [B/8], pseudo-random): one 4 KiB block of shard per such sample (B <=
// 4096), so the loader has a real read to do, and 10^7 samples with E = 64 need 0.6 GB of disk.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include <filesystem>
#include <vector>

#include "libshard/merge.h"
#include "libshard/schema.h"
#include "libshard/writer.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: make_tiny_dataset OUT N [--seed S] [--parts K] "
               "[--payload B] [--payload-every E]\n");
  return 2;
}

libshard::Schema TinySchema() {
  using namespace libshard;
  Schema schema;
  schema.fields = {{"input_ids", DType::kInt64, 1, 0},
                   {"loss_mask", DType::kInt64, 1, 0},
                   {"hidden_state", DType::kBFloat16, 3, 1},
                   {"aux_hidden_state", DType::kBFloat16, 3, 1}};
  schema.length_field = 2;
  return schema;
}

// Samples [first, first + n) into a new dataset at `out`.
libshard::Status WriteSamples(const std::string& out, uint64_t first, uint64_t n, uint64_t seed,
                              uint64_t payload, uint64_t payload_every,
                              const libshard::WriterOptions& options) {
  using namespace libshard;
  LIBSHARD_ASSIGN_OR_RETURN(std::unique_ptr<Writer> w, Writer::Create(out, TinySchema(), options));
  std::mt19937_64 rng(seed * 1000003 + first);
  SampleInput s;
  s.tensors = {{"input_ids", DType::kInt64, {0}, nullptr, {}},
               {"loss_mask", DType::kInt64, {0}, nullptr, {}},
               {"hidden_state", DType::kBFloat16, {1, 0, 0}, nullptr, {}},
               {"aux_hidden_state", DType::kBFloat16, {1, 0, 0}, nullptr, {}}};
  std::vector<uint64_t> bytes(payload / 8);
  char path[128];
  for (uint64_t i = first; i < first + n; ++i) {
    const bool carries = !bytes.empty() && i % payload_every == 0;
    s.tensors[1].shape[0] = carries ? bytes.size() : 0;
    s.tensors[1].data = carries ? bytes.data() : nullptr;
    if (carries) {
      for (uint64_t& b : bytes) b = rng();
    }
    const uint64_t length = 1 + rng() % 4096;
    s.tensors[2].shape[1] = length;
    s.tensors[3].shape[1] = length;
    std::snprintf(path, sizeof path, "sharegpt/part_%04llu/conversation_%08llu.pt",
                  static_cast<unsigned long long>(i / 10000), static_cast<unsigned long long>(i));
    // As a hidden-state dump of H = 4096 would be: 8·H bytes a token, plus a pickle header.
    s.source = SourceFileInfo{path, length * 8 * 4096 + 1024 + rng() % 1024,
                          int64_t{1764547200} * 1000000000 + static_cast<int64_t>(i) * 1000003,
                          rng()};
    Status st = w->Append(s);
    if (!st.ok()) return st.WithContext("sample " + std::to_string(i));
  }
  return w->Finish().status();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace libshard;
  if (argc < 3) return Usage();
  const std::string out = argv[1];
  const uint64_t n = std::strtoull(argv[2], nullptr, 10);
  WriterOptions options;
  options.fsync = false;
  options.created_by = "make_tiny_dataset";
  options.source_root = "/data/eagle3";
  uint64_t seed = 1, parts = 1, payload = 0, payload_every = 1;
  for (int k = 3; k + 1 < argc; k += 2) {
    if (std::strcmp(argv[k], "--seed") == 0) {
      seed = std::strtoull(argv[k + 1], nullptr, 10);
    } else if (std::strcmp(argv[k], "--payload") == 0) {
      payload = std::strtoull(argv[k + 1], nullptr, 10);
    } else if (std::strcmp(argv[k], "--payload-every") == 0) {
      payload_every = std::max<uint64_t>(1, std::strtoull(argv[k + 1], nullptr, 10));
    } else if (std::strcmp(argv[k], "--parts") == 0) {
      parts = std::max<uint64_t>(1, std::strtoull(argv[k + 1], nullptr, 10));
    } else {
      return Usage();
    }
  }
  const auto start = std::chrono::steady_clock::now();
  Status st;
  if (parts == 1) {
    st = WriteSamples(out, 0, n, seed, payload, payload_every, options);
  } else {
    std::vector<std::string> dirs;
    for (uint64_t p = 0; p < parts && st.ok(); ++p) {
      dirs.push_back(out + ".part" + std::to_string(p));
      std::filesystem::remove_all(dirs.back());
      const uint64_t first = n * p / parts, last = n * (p + 1) / parts;
      st = WriteSamples(dirs.back(), first, last - first, seed, payload, payload_every, options);
    }
    if (st.ok()) st = MergeDatasets(out, dirs);
    for (const std::string& d : dirs) std::filesystem::remove_all(d);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "make_tiny_dataset: %s\n", st.ToString().c_str());
    return 1;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %llu samples (%llu parts) in %.1f s\n", out.c_str(),
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(parts), secs);
  return 0;
}
