// Field codecs end to end (FORMAT.md §3.8.4, §4.3, §6): the writer stores each field under its
// codec, Dataset::Read and the loader decode them (bit-exact for codecs 1, 2 and 5, within the
// §4.3.5 bound for fp8), a damaged region is a Corruption naming sample, shard and offset, and a
// resumed write with codecs equals an uninterrupted one byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/writer.h"
#include "loader/read_scheduler.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

constexpr uint64_t kHidden = 128;  // >= 64: the channel base table is written (§4.3.4)

float Bf16ToFloat(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }
uint16_t FloatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even (finite inputs)
  return static_cast<uint16_t>(u >> 16);
}

// An EAGLE-3-like sample whose hidden state looks like activations: per-channel scales, a few
// outlier channels, a sign that depends on the channel. Deterministic.
OwnedSample ActivationSample(uint64_t i, uint64_t len) {
  OwnedSample s = MakeEagleSample(i, len, kHidden);
  uint64_t state = i * 31 + 7;
  auto* h = reinterpret_cast<uint16_t*>(s.bytes[2].data());
  for (uint64_t t = 0; t < len; ++t)
    for (uint64_t c = 0; c < kHidden; ++c) {
      const double u = static_cast<double>(SplitMix(&state) >> 11) / 9007199254740992.0;
      const double v = (u - 0.5) * (c % 17 == 0 ? 40.0 : 1.0 + static_cast<double>(c % 5));
      h[t * kHidden + c] = FloatToBf16(static_cast<float>(v));
    }
  // Token ids from a small vocabulary, a 0/1 mask: what the zstd field codec sees in practice.
  auto* ids = reinterpret_cast<int64_t*>(s.bytes[0].data());
  auto* mask = reinterpret_cast<int64_t*>(s.bytes[1].data());
  for (uint64_t t = 0; t < len; ++t) {
    ids[t] = static_cast<int64_t>(SplitMix(&state) % 3000);
    mask[t] = t > len / 3 ? 1 : 0;
  }
  return s;
}

uint64_t LenOf(uint64_t i) { return 20 + (i * 37) % 300; }

WriterOptions CodecOptions(FieldCodecPolicy policy, bool fp8 = false) {
  WriterOptions o = FastOptions();
  o.field_codecs = policy;
  o.store_fp8 = fp8;
  o.shard_uid_seed = 11;
  o.shard_size = 256 << 10;
  return o;
}

void WriteActivations(const std::filesystem::path& dir, uint64_t n, const WriterOptions& o) {
  auto w = Writer::Create(dir.string(), EagleSchema(), o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_TRUE((*w)->Append(ActivationSample(i, LenOf(i)).input).ok());
  auto sum = (*w)->Finish();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
}

// Arena bytes of a sample's loader item: its read (alignment skew included) and its decoded
// slot.
uint64_t ItemArenaBytes(const SampleLocation& loc) {
  return (loc.stored_size + 2 * 4096) / 4096 * 4096 + (loc.raw_size + 4095) / 4096 * 4096;
}

std::shared_ptr<Dataset> OpenOrDie(const std::filesystem::path& dir,
                                   const DatasetOptions& o = {}) {
  auto ds = Dataset::Open(dir.string(), o);
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? *ds : nullptr;
}

TEST(CodecDatasetTest, ChooseFieldCodecsFollowsThePolicy) {
  const Schema s = EagleSchema();
  EXPECT_EQ(ChooseFieldCodecs(s, FieldCodecPolicy::kNone, false), (std::vector<uint8_t>{0, 0, 0}));
  // auto: planes2 (codec 5) for bf16/fp16; codec 2 only when asked for by name.
  EXPECT_EQ(ChooseFieldCodecs(s, FieldCodecPolicy::kAuto, false), (std::vector<uint8_t>{1, 1, 5}));
  EXPECT_EQ(ChooseFieldCodecs(s, FieldCodecPolicy::kPlanes, false),
            (std::vector<uint8_t>{0, 0, 2}));
  EXPECT_EQ(ChooseFieldCodecs(s, FieldCodecPolicy::kPlanes2, false),
            (std::vector<uint8_t>{0, 0, 5}));
  EXPECT_EQ(ChooseFieldCodecs(s, FieldCodecPolicy::kNone, true), (std::vector<uint8_t>{0, 0, 3}));
  EXPECT_EQ(ChooseFieldCodecs(s, FieldCodecPolicy::kAuto, true), (std::vector<uint8_t>{1, 1, 6}));
  EXPECT_EQ(ChooseFieldCodecs(s, FieldCodecPolicy::kPlanes, true), (std::vector<uint8_t>{0, 0, 6}));
}

TEST(CodecDatasetTest, FieldCodecsAndWholeSampleZstdAreExclusive) {
  TempDir dir;
  WriterOptions o = CodecOptions(FieldCodecPolicy::kAuto);
  o.compression = Compression::kZstd;
  ExpectError(Writer::Create((dir / "ds").string(), EagleSchema(), o).status(),
              StatusCode::kInvalidArgument, {"exclusive"});
}

// Codecs 1, 2 and 5: Read returns the written bytes exactly, the stored bytes are smaller, and the
// per-field stored sizes add up to the stored size (§3.8.4).
TEST(CodecDatasetTest, AutoRoundTripsBitExact) {
  for (FieldCodecPolicy p :
       {FieldCodecPolicy::kAuto, FieldCodecPolicy::kPlanes, FieldCodecPolicy::kPlanes2}) {
    SCOPED_TRACE(static_cast<int>(p));
    TempDir dir;
    const uint64_t n = 12;
    WriteActivations(dir / "ds", n, CodecOptions(p));
    auto ds = OpenOrDie(dir / "ds");
    ASSERT_TRUE(ds);
    EXPECT_EQ(ds->field_codecs(), ChooseFieldCodecs(EagleSchema(), p, false));
    for (uint64_t i = 0; i < n; ++i) {
      SCOPED_TRACE("sample " + std::to_string(i));
      auto s = ds->Read(i);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ExpectSampleEq(*s, ActivationSample(i, LenOf(i)));
      const SampleLocation loc = ds->location(i);
      EXPECT_NE(loc.flags & kSampleFlagFieldCodecs, 0u);
      EXPECT_LT(loc.stored_size, loc.raw_size);
      auto sizes = ds->field_stored_sizes(i);
      ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
      EXPECT_LT((*sizes)[2], ds->tensor(i, 2).nbytes);  // the planes codec saved space
      uint64_t end = 0;
      for (uint64_t sz : *sizes) end = (end + 63) / 64 * 64 + sz;
      EXPECT_EQ(end, loc.stored_size);
    }
    EXPECT_LT(ds->total_stored_bytes(), ds->total_raw_bytes());
  }
}

void ExpectLoaderMatchesRead(const std::shared_ptr<Dataset>& ds, const LoaderOptions& o,
                             uint64_t max_len, const std::vector<std::string>& fields) {
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  uint64_t count = 0;
  while (true) {
    auto next = (*loader)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    const Sample& got = (*next)->samples[0];
    Sample want = *ds->Read(got.index());
    const std::vector<std::string> names =
        fields.empty() ? std::vector<std::string>{"input_ids", "loss_mask", "hidden_state"}
                       : fields;
    ASSERT_EQ(got.tensors().size(), names.size());
    for (const std::string& name : names) {
      const TensorView* g = got.Find(name);
      const TensorView* w = want.Find(name);
      ASSERT_NE(g, nullptr) << name;
      const size_t d = name == "hidden_state" ? 1 : 0;
      const uint64_t rows = max_len ? std::min<uint64_t>(w->shape[d], max_len) : w->shape[d];
      Shape expect_shape = w->shape;
      expect_shape[d] = rows;
      EXPECT_EQ(g->shape, expect_shape) << name;
      ASSERT_EQ(g->nbytes, w->nbytes / w->shape[d] * rows) << name;
      EXPECT_EQ(std::memcmp(g->data, w->data, g->nbytes), 0) << name;
    }
    ++count;
  }
  EXPECT_EQ(count, ds->size());
  EXPECT_EQ((*loader)->stats().checksum_failures, 0u);
}

// The loader decodes on its worker threads into the arena: whole samples, max_len prefixes and
// field subsets equal Dataset::Read's bytes, which equal the source (previous test).
TEST(CodecDatasetTest, LoaderDecodesBitExactWithMaxLenAndFields) {
  TempDir dir;
  WriteActivations(dir / "ds", 16, CodecOptions(FieldCodecPolicy::kAuto));
  auto ds = OpenOrDie(dir / "ds");
  ASSERT_TRUE(ds);
  for (uint32_t workers : {0u, 1u, 3u}) {  // 0: AutoWorkerThreads
    LoaderOptions o;
    o.memory_budget = 8 << 20;
    o.queue_depth = 8;
    o.read_size = 16 << 10;
    o.pin_memory = PinMemory::kOff;
    o.worker_threads = workers;
    o.slow_wait_warning_seconds = 30;
    ExpectLoaderMatchesRead(ds, o, 0, {});
    o.max_len = 57;
    ExpectLoaderMatchesRead(ds, o, 57, {});
    o.fields = {"hidden_state", "input_ids"};
    ExpectLoaderMatchesRead(ds, o, 57, {"hidden_state", "input_ids"});
    o.max_len = 0;
    o.fields = {"loss_mask"};
    o.verify_checksums = false;
    ExpectLoaderMatchesRead(ds, o, 0, {"loss_mask"});
  }
}

// The loader reads a compressed dataset only as far ahead as its decoding threads can use: with
// reads (O_DIRECT where the file system has it) faster than one decoding thread, the samples
// read and waiting to be decoded hold at most the backlog bound (two items per worker and
// ComputeDecodeAheadBounds: here a quarter of the arena, as two full queues of reads of
// these small samples are less) plus the items started when it was
// reached (at most queue_depth + 1). Without the bound they held most of the dataset, and the
// arena grew to its whole budget, each page of it zeroed by the kernel on first use.
TEST(CodecDatasetTest, LoaderReadsNoFurtherAheadThanTheDecodersUse) {
  TempDir dir;
  const uint64_t n = 600;
  WriteActivations(dir / "ds", n, CodecOptions(FieldCodecPolicy::kAuto));
  auto ds = OpenOrDie(dir / "ds");
  ASSERT_TRUE(ds);
  uint64_t largest = 0, footprint = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t item = ItemArenaBytes(ds->location(i));
    largest = std::max(largest, item);
    footprint += item;
  }
  LoaderOptions o;
  o.memory_budget = uint64_t{1} << 30;  // capped at the dataset's footprint
  o.queue_depth = 16;
  o.read_size = 1 << 20;  // a sample a read
  o.pin_memory = PinMemory::kOff;
  o.worker_threads = 1;
  o.order = Order::Unshuffled();
  auto loader = Loader::Create(ds, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  uint64_t count = 0;
  while (true) {
    auto next = (*loader)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    ++count;
  }
  EXPECT_EQ(count, n);
  const LoaderStats s = (*loader)->stats();
  // Two full queues: at most 2 * queue_depth items (a sample a read).
  const uint64_t bound =
      std::max({2 * largest, std::min<uint64_t>(64 << 20, s.arena_budget / 4),
                std::min<uint64_t>(2 * o.queue_depth * largest, s.arena_budget / 4 * 3)});
  const DecodeAheadBounds b =
      ComputeDecodeAheadBounds(*ds, 1, o.queue_depth, o.read_size, s.arena_budget);
  EXPECT_EQ(b.reading_bytes, s.arena_budget / 4);
  EXPECT_EQ(b.backlog_bytes,
            std::max<uint64_t>(s.arena_budget / 4,
                               2 * FullQueueSlotBytes(*ds, o.queue_depth, o.read_size)));
  EXPECT_LE(b.backlog_bytes, bound);
  EXPECT_GT(s.worker_backlog_peak, 0u);
  const uint64_t started = (o.queue_depth + 1) * largest;  // items started when it was reached
  EXPECT_LE(s.worker_backlog_peak, bound + started)
      << "arena budget " << s.arena_budget << ", largest item " << largest;
  EXPECT_LE(s.arena_peak, s.arena_budget);
  // The bound is under a third of this dataset, so the test tells a bounded backlog from none
  // (unbounded, this one held 26-35 MiB of the 50 MiB dataset; bounded, at most ~15 MiB).
  EXPECT_LT(bound + started, footprint / 3);
}

// How far the reads of a compressed dataset run ahead of its decoders: reads in flight hold at
// most 32 MiB of slots per worker (a quarter of the arena at most; two samples per worker at
// least, within half of it), and the decode backlog 64 MiB per worker (a quarter of the arena at
// most) and at least two queues of reads, each the smaller of a full queue and the reading
// bound, so a queue of reads landing at once - as a virtual disk completes them - does not stop
// the reads until the workers have decoded half of it. Both stay within the arena.
TEST(CodecDatasetTest, DecodeAheadBoundsCoverTwoQueuesOfReads) {
  TempDir dir;
  const uint64_t n = 40;
  WriteActivations(dir / "ds", n, CodecOptions(FieldCodecPolicy::kAuto));
  auto ds = OpenOrDie(dir / "ds");
  ASSERT_TRUE(ds);
  const uint64_t stored = ds->total_stored_bytes() / n;
  const uint64_t raw = ds->total_raw_bytes() / n;
  ASSERT_GT(raw, stored);  // compressed
  const auto slots = [](uint64_t b) { return (b + 4095) / 4096 * 4096; };
  const uint64_t item = slots(stored + 4096) + slots(raw);
  // A sample a read: queue_depth items.
  EXPECT_EQ(FullQueueSlotBytes(*ds, 64, 4 << 20), 64 * item);
  // Reads smaller than a sample: ceil(stored / read_size) sub-reads each.
  const uint64_t read = 4096;
  const uint64_t subs = (stored + read - 1) / read;
  ASSERT_GT(subs, 1u);
  EXPECT_EQ(FullQueueSlotBytes(*ds, 64, read), std::max<uint64_t>(1, 64 / subs) * item);
  EXPECT_EQ(FullQueueSlotBytes(*ds, 1, read), item);  // at least one sample

  const uint64_t mib32 = uint64_t{32} << 20;
  const uint64_t big_arena = uint64_t{64} << 30;
  // Few small samples in flight: 32 MiB a worker for the reads, 64 MiB a worker for the backlog.
  DecodeAheadBounds b = ComputeDecodeAheadBounds(*ds, 2, 4, 4 << 20, big_arena);
  EXPECT_EQ(b.reading_bytes, 2 * mib32);
  EXPECT_EQ(b.backlog_bytes, 4 * mib32);
  // A queue deeper than the reading bound: the reads stop at it, the backlog holds two of it.
  const uint32_t deep = static_cast<uint32_t>(4 * (mib32 / item + 1));
  ASSERT_GT(FullQueueSlotBytes(*ds, deep, 4 << 20), mib32);
  b = ComputeDecodeAheadBounds(*ds, 1, deep, 4 << 20, big_arena);
  EXPECT_EQ(b.reading_bytes, mib32);
  EXPECT_EQ(b.backlog_bytes, 2 * mib32);
  // A small arena: a quarter of it for the reads, and at most three quarters for the backlog.
  const uint64_t small_arena = 16 * item;
  b = ComputeDecodeAheadBounds(*ds, 1, 64, 4 << 20, small_arena);
  EXPECT_EQ(b.reading_bytes, small_arena / 4);
  EXPECT_EQ(b.backlog_bytes, small_arena / 2);
  b = ComputeDecodeAheadBounds(*ds, 1, 1, 4 << 20, small_arena);
  EXPECT_EQ(b.backlog_bytes, small_arena / 4);
  // Many workers, a tight arena: two samples a worker for the reads, within half the arena; the
  // backlog two such queues, within three quarters.
  b = ComputeDecodeAheadBounds(*ds, 8, 64, 4 << 20, 8 * item);
  EXPECT_EQ(b.reading_bytes, 4 * item);
  EXPECT_EQ(b.backlog_bytes, 6 * item);
  b = ComputeDecodeAheadBounds(*ds, 2, 64, 4 << 20, 40 * item);
  EXPECT_EQ(b.reading_bytes, 10 * item);  // a quarter: more than 2 x 2 samples
  b = ComputeDecodeAheadBounds(*ds, 2, 64, 4 << 20, 12 * item);
  EXPECT_EQ(b.reading_bytes, 4 * item);  // 2 x 2 samples: more than a quarter
}

// A memory_budget of a few samples: the loader still delivers every sample of a compressed
// dataset, bit-exact, whatever the worker count (the reads in flight stop at the bound, the
// scheduler waits for memory, never for good).
TEST(CodecDatasetTest, LoaderWithATightBudgetDeliversEverySample) {
  TempDir dir;
  const uint64_t n = 48;
  WriteActivations(dir / "ds", n, CodecOptions(FieldCodecPolicy::kAuto));
  auto ds = OpenOrDie(dir / "ds");
  ASSERT_TRUE(ds);
  uint64_t largest = 0;
  for (uint64_t i = 0; i < n; ++i) largest = std::max(largest, ItemArenaBytes(ds->location(i)));
  for (uint32_t workers : {1u, 2u, 4u}) {
    LoaderOptions o;
    o.memory_budget = 3 * largest;
    o.queue_depth = 64;
    o.read_size = 4 << 20;
    o.pin_memory = PinMemory::kOff;
    o.worker_threads = workers;
    o.order = Order::Unshuffled();
    o.slow_wait_warning_seconds = 30;
    SCOPED_TRACE(std::to_string(workers) + " workers");
    ExpectLoaderMatchesRead(ds, o, 0, {});
  }
}

// worker_threads 0 gives a compressed dataset one decoding thread per core (at most
// kAutoDecodeWorkers) and an uncompressed one a single checksum thread.
TEST(CodecDatasetTest, AutoWorkerThreadsFollowTheStorage) {
  TempDir dir;
  WriteActivations(dir / "auto", 4, CodecOptions(FieldCodecPolicy::kAuto));
  WriteActivations(dir / "none", 4, CodecOptions(FieldCodecPolicy::kNone));
  auto compressed = OpenOrDie(dir / "auto");
  auto plain = OpenOrDie(dir / "none");
  ASSERT_TRUE(compressed && plain);
  LoaderOptions o;
  const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(AutoWorkerThreads(*compressed, o), std::min(cores, kAutoDecodeWorkers));
  EXPECT_EQ(AutoWorkerThreads(*plain, o), 1u);
  o.worker_threads = 5;
  EXPECT_EQ(AutoWorkerThreads(*compressed, o), 5u);
  EXPECT_EQ(AutoWorkerThreads(*plain, o), 5u);
}

// fp8 (codec 3) and fp8-planes (codec 6): lossy within the §4.3.5 bound, the other fields
// bit-exact, at least 2x smaller hidden states.
TEST(CodecDatasetTest, Fp8IsWithinTheBound) {
  for (FieldCodecPolicy p : {FieldCodecPolicy::kNone, FieldCodecPolicy::kAuto}) {
    SCOPED_TRACE(static_cast<int>(p));
    TempDir dir;
    const uint64_t n = 6;
    WriteActivations(dir / "ds", n, CodecOptions(p, /*fp8=*/true));
    auto ds = OpenOrDie(dir / "ds");
    ASSERT_TRUE(ds);
    EXPECT_EQ(ds->field_codecs()[2], p == FieldCodecPolicy::kNone ? 3 : 6);
    double max_rel = 0;
    for (uint64_t i = 0; i < n; ++i) {
      SCOPED_TRACE("sample " + std::to_string(i));
      const OwnedSample want = ActivationSample(i, LenOf(i));
      auto s = ds->Read(i);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      for (const char* name : {"input_ids", "loss_mask"}) {
        const TensorView* t = s->Find(name);
        ASSERT_NE(t, nullptr);
        EXPECT_EQ(std::memcmp(t->data, want.bytes[name[0] == 'i' ? 0 : 1].data(), t->nbytes), 0);
      }
      const TensorView* h = s->Find("hidden_state");
      ASSERT_NE(h, nullptr);
      ASSERT_EQ(h->dtype, DType::kBFloat16);
      ASSERT_EQ(h->nbytes, want.bytes[2].size());
      const auto* got = reinterpret_cast<const uint16_t*>(h->data);
      const auto* src = reinterpret_cast<const uint16_t*>(want.bytes[2].data());
      const uint64_t len = LenOf(i);
      for (uint64_t t = 0; t < len; ++t) {
        double absmax = 0;
        for (uint64_t c = 0; c < kHidden; ++c)
          absmax = std::max(absmax, std::fabs(double{Bf16ToFloat(src[t * kHidden + c])}));
        const double scale = absmax / 448.0;
        for (uint64_t c = 0; c < kHidden; ++c) {
          const double x = Bf16ToFloat(src[t * kHidden + c]);
          const double y = Bf16ToFloat(got[t * kHidden + c]);
          const double bound = std::max(std::ldexp(std::fabs(x), -4), std::ldexp(scale, -10)) +
                               std::ldexp(std::fabs(y), -8) + 1e-6 * scale;
          ASSERT_LE(std::fabs(y - x), bound) << "token " << t << " channel " << c;
          if (x != 0) max_rel = std::max(max_rel, std::fabs(y - x) / std::fabs(x));
        }
      }
      auto sizes = ds->field_stored_sizes(i);
      ASSERT_TRUE(sizes.ok());
      EXPECT_LE((*sizes)[2] * 2, ds->tensor(i, 2).nbytes + 4 * len + 4096);
    }
    EXPECT_GT(max_rel, 0.0);  // it is lossy: the test compares something
  }
}

// A damaged region: with checksums the sample checksum catches it; without, the codec's own
// checks do, and the error names the sample, the shard, the field and the offset.
TEST(CodecDatasetTest, CorruptRegionIsCorruptionNamingSampleShardAndOffset) {
  TempDir dir;
  WriteActivations(dir / "ds", 4, CodecOptions(FieldCodecPolicy::kAuto));
  auto ds = OpenOrDie(dir / "ds");
  ASSERT_TRUE(ds);
  const uint64_t i = 2;
  const SampleLocation loc = ds->location(i);
  auto sizes = ds->field_stored_sizes(i);
  ASSERT_TRUE(sizes.ok());
  // The hidden state's region starts after the two zstd regions (64-byte aligned): its magic.
  uint64_t off = (*sizes)[0];
  off = (off + 63) / 64 * 64 + (*sizes)[1];
  off = (off + 63) / 64 * 64;
  const std::string shard = ds->shards()[loc.shard].path;
  ds.reset();
  FlipByte(shard, loc.offset + off, 0xFF);
  {
    auto d = OpenOrDie(dir / "ds");
    ASSERT_TRUE(d);
    ExpectError(d->Read(i).status(), StatusCode::kCorruption,
                {"sample 2", shard, "checksum mismatch"});
    EXPECT_TRUE(d->Read(1).ok());
  }
  DatasetOptions no_sum;
  no_sum.verify_checksums = false;
  auto d = OpenOrDie(dir / "ds", no_sum);
  ASSERT_TRUE(d);
  ExpectError(d->Read(i).status(), StatusCode::kCorruption,
              {"sample 2", shard, "field 'hidden_state'",
               "at shard offset " + std::to_string(loc.offset + off)});
  // The loader reports it for that sample and goes on with the rest (on_error skip).
  LoaderOptions o;
  o.memory_budget = 8 << 20;
  o.pin_memory = PinMemory::kOff;
  o.order = Order::Unshuffled();
  o.verify_checksums = false;
  auto loader = Loader::Create(d, o);
  ASSERT_TRUE(loader.ok());
  uint64_t ok = 0, failed = 0;
  while (true) {
    auto next = (*loader)->Next();
    if (!next.ok()) {
      ExpectError(next.status(), StatusCode::kCorruption, {"sample 2", "hidden_state"});
      ++failed;
      continue;
    }
    if (!next->has_value()) break;
    ++ok;
  }
  EXPECT_EQ(ok, 3u);
  EXPECT_EQ(failed, 1u);
}

// Interrupted after k samples (the writer dropped without Finish, as a kill -9 leaves it), then
// resumed: the same shards and index as an uninterrupted write, byte for byte (§6, journal
// version 2 carries the codecs and each sample's region sizes).
TEST(CodecDatasetTest, ResumeWithCodecsEqualsUninterruptedWrite) {
  WriterOptions o = CodecOptions(FieldCodecPolicy::kAuto, /*fp8=*/false);
  o.shard_size = 64 << 10;
  o.journal_every_bytes = 8 << 10;
  const uint64_t n = 14;
  TempDir ref;
  WriteActivations(ref / "ds", n, o);
  for (uint64_t crash : {3u, 9u}) {
    SCOPED_TRACE("crash after " + std::to_string(crash));
    TempDir dir;
    {
      auto w = Writer::Create((dir / "ds").string(), EagleSchema(), o);
      ASSERT_TRUE(w.ok());
      for (uint64_t i = 0; i < crash; ++i)
        ASSERT_TRUE((*w)->Append(ActivationSample(i, LenOf(i)).input).ok());
    }
    // Resume with other options: the journal's codecs win.
    WriterOptions other = o;
    other.field_codecs = FieldCodecPolicy::kNone;
    auto r = Writer::Resume((dir / "ds").string(), other);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    uint64_t next = (*r)->samples_written();
    EXPECT_GT(next, 0u);
    for (; next < n; ++next)
      ASSERT_TRUE((*r)->Append(ActivationSample(next, LenOf(next)).input).ok());
    ASSERT_TRUE((*r)->Finish().ok());
    auto a = OpenOrDie(ref / "ds");
    auto b = OpenOrDie(dir / "ds");
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->shards().size(), b->shards().size());
    for (size_t k = 0; k < a->shards().size(); ++k)
      EXPECT_EQ(ReadFileToString(a->shards()[k].path), ReadFileToString(b->shards()[k].path));
    EXPECT_EQ(ReadFileToString(ref / "ds" / "index.lsi"), ReadFileToString(dir / "ds" / "index.lsi"));
    for (uint64_t i = 0; i < n; ++i) ExpectSampleEq(*b->Read(i), ActivationSample(i, LenOf(i)));
  }
}

// Append onto a dataset with codecs stores the new samples under the dataset's codecs: one
// written with codec 2 (before planes2) keeps codec 2.
TEST(CodecDatasetTest, AppendKeepsTheDatasetsCodecs) {
 for (FieldCodecPolicy p : {FieldCodecPolicy::kAuto, FieldCodecPolicy::kPlanes}) {
  SCOPED_TRACE(static_cast<int>(p));
  TempDir dir;
  WriteActivations(dir / "ds", 4, CodecOptions(p));
  {
    auto w = Writer::OpenForAppend((dir / "ds").string(), FastOptions());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (uint64_t i = 4; i < 7; ++i)
      ASSERT_TRUE((*w)->Append(ActivationSample(i, LenOf(i)).input).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto ds = OpenOrDie(dir / "ds");
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->field_codecs(), p == FieldCodecPolicy::kAuto ? (std::vector<uint8_t>{1, 1, 5})
                                                              : (std::vector<uint8_t>{0, 0, 2}));
  ASSERT_EQ(ds->size(), 7u);
  for (uint64_t i = 0; i < 7; ++i) ExpectSampleEq(*ds->Read(i), ActivationSample(i, LenOf(i)));
 }
}

}  // namespace
}  // namespace libshard::testing
