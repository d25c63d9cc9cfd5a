// libshard::torch: the tensors are the loader's bytes for every dtype, zero-copy on the CPU, and
// stay valid after the Sample, the Loader and the Dataset are gone.
#include "libshard/torch.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "libshard/dataset.h"
#include "libshard/loader.h"
#include "libshard/writer.h"
#include "testutil/testutil.h"

namespace libshard {
namespace {

using libshard::testing::TempDir;

constexpr uint64_t kSamples = 24;

// One field per DType, named after it. input_ids (int64, [L]) is the length field; float64 is a
// scalar; int8 is [L % 3, L], so some samples hold an empty tensor.
Schema AllDTypesSchema() {
  Schema schema;
  for (uint32_t code = 1; code <= kMaxDTypeCode; ++code) {
    const auto dtype = static_cast<DType>(code);
    Field field;
    field.dtype = dtype;
    field.name = std::string(DTypeName(dtype));
    field.rank = 2;
    field.seq_dim = 1;
    if (dtype == DType::kInt64) {
      field.name = "input_ids";
      field.rank = 1;
      field.seq_dim = 0;
      schema.length_field = static_cast<int32_t>(schema.fields.size());
    } else if (dtype == DType::kFloat64) {
      field.rank = 0;
      field.seq_dim = -1;
    }
    schema.fields.push_back(field);
  }
  return schema;
}

Shape ShapeOf(const Field& field, uint64_t length) {
  if (field.rank == 0) return {};
  if (field.rank == 1) return {length};
  if (field.dtype == DType::kInt8) return {length % 3, length};
  return {2, length};
}

// Arbitrary bytes (any bit pattern, NaNs included), except bool: 0 or 1.
std::vector<std::byte> FieldBytes(const Field& field, uint64_t sample, uint64_t nbytes) {
  std::mt19937_64 rng(sample * 131 + static_cast<uint64_t>(field.dtype));
  std::vector<std::byte> bytes(nbytes);
  for (auto& b : bytes) {
    b = static_cast<std::byte>(field.dtype == DType::kBool ? rng() & 1 : rng() & 0xff);
  }
  return bytes;
}

void WriteAllDTypes(const std::string& dir, Compression compression) {
  const Schema schema = AllDTypesSchema();
  WriterOptions options;
  options.fsync = false;
  options.shard_size = 64 << 10;  // several shards
  options.compression = compression;
  auto writer = Writer::Create(dir, schema, options);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  for (uint64_t i = 0; i < kSamples; ++i) {
    const uint64_t length = 1 + (i * 37) % 300;
    std::vector<std::vector<std::byte>> storage;
    SampleInput input;
    input.source.path = "sample_" + std::to_string(i) + ".pt";
    for (const Field& field : schema.fields) {
      TensorInput tensor;
      tensor.name = field.name;
      tensor.dtype = field.dtype;
      tensor.shape = ShapeOf(field, length);
      storage.push_back(FieldBytes(field, i, NumElements(tensor.shape) * DTypeSize(field.dtype)));
      tensor.data = storage.back().data();
      input.tensors.push_back(std::move(tensor));
    }
    const Status appended = (*writer)->Append(input);
    ASSERT_TRUE(appended.ok()) << appended.ToString();
  }
  auto summary = (*writer)->Finish();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
}

// Checks that `tensors` are exactly sample `index`'s tensors as written, dtype, shape and bytes.
void ExpectWritten(const TensorDict& tensors, uint64_t index) {
  const Schema schema = AllDTypesSchema();
  ASSERT_EQ(tensors.size(), schema.fields.size());
  const uint64_t length = 1 + (index * 37) % 300;
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    const Field& field = schema.fields[f];
    SCOPED_TRACE("sample " + std::to_string(index) + " field " + field.name);
    EXPECT_EQ(tensors[f].key(), field.name);  // schema order
    const at::Tensor& t = tensors[field.name];
    EXPECT_EQ(t.scalar_type(), *ToScalarType(field.dtype));
    EXPECT_EQ(t.element_size(), static_cast<int64_t>(DTypeSize(field.dtype)));
    const Shape shape = ShapeOf(field, length);
    ASSERT_EQ(t.dim(), static_cast<int64_t>(shape.size()));
    for (size_t d = 0; d < shape.size(); ++d) EXPECT_EQ(t.size(d), static_cast<int64_t>(shape[d]));
    ASSERT_TRUE(t.is_contiguous());
    const std::vector<std::byte> want = FieldBytes(field, index, t.nbytes());
    if (!want.empty()) EXPECT_EQ(std::memcmp(t.const_data_ptr(), want.data(), want.size()), 0);
  }
}

TEST(TorchScalarType, EveryDTypeMapsBothWays) {
  for (uint32_t code = 1; code <= kMaxDTypeCode; ++code) {
    const auto dtype = static_cast<DType>(code);
    const auto type = ToScalarType(dtype);
    ASSERT_TRUE(type.has_value()) << DTypeName(dtype);
    EXPECT_EQ(c10::elementSize(*type), DTypeSize(dtype)) << DTypeName(dtype);
    EXPECT_EQ(FromScalarType(*type), dtype) << DTypeName(dtype);
  }
  EXPECT_EQ(ToScalarType(static_cast<DType>(0)), std::nullopt);
  EXPECT_EQ(ToScalarType(static_cast<DType>(kMaxDTypeCode + 1)), std::nullopt);
  EXPECT_EQ(FromScalarType(c10::ScalarType::ComplexFloat), std::nullopt);
}

class TorchAdapterTest : public ::testing::TestWithParam<Compression> {
 protected:
  void SetUp() override { WriteAllDTypes(dir_.path().string(), GetParam()); }
  TempDir dir_;
};

TEST_P(TorchAdapterTest, DatasetReadIsZeroCopyAndExact) {
  auto dataset = Dataset::Open(dir_.path().string());
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  for (uint64_t i = 0; i < kSamples; ++i) {
    auto sample = (*dataset)->Read(i);
    ASSERT_TRUE(sample.ok()) << sample.status().ToString();
    auto tensors = ToTensors(*sample);
    ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
    ExpectWritten(*tensors, i);
    for (const TensorView& view : sample->tensors()) {
      if (view.nbytes == 0) continue;
      EXPECT_EQ((*tensors)[std::string(view.name)].const_data_ptr(), view.data) << view.name;
    }
  }
}

TEST_P(TorchAdapterTest, LoaderBatchesEqualTheWrittenBytes) {
  auto dataset = Dataset::Open(dir_.path().string());
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  LoaderOptions options;
  options.order = Order::Shuffled(7);
  options.batch_size = 3;
  options.memory_budget = 4 << 20;
  options.verify_checksums = true;
  auto loader = Loader::Create(*dataset, options);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  std::vector<bool> seen(kSamples, false);
  while (true) {
    auto batch = (*loader)->Next();
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    if (!batch->has_value()) break;
    auto tensors = ToTensors(**batch);
    ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
    ASSERT_EQ(tensors->size(), (*batch)->samples.size());
    for (size_t s = 0; s < tensors->size(); ++s) {
      const uint64_t index = (*batch)->samples[s].index();
      ASSERT_LT(index, kSamples);
      seen[index] = true;
      ExpectWritten((*tensors)[s], index);
    }
  }
  for (uint64_t i = 0; i < kSamples; ++i) EXPECT_TRUE(seen[i]) << "sample " << i;
}

TEST_P(TorchAdapterTest, CollatedBatchIsOneZeroCopyTensorPerFieldPlusLengths) {
  auto dataset = Dataset::Open(dir_.path().string());
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  LoaderOptions options;
  options.batch_size = 3;
  options.memory_budget = 4 << 20;
  options.collate = Collate::kPack;
  options.fields = {"input_ids", "bfloat16", "float64"};  // int8 [L % 3, L] cannot be batched
  auto loader = Loader::Create(*dataset, options);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto batch = (*loader)->Next();
  ASSERT_TRUE(batch.ok() && batch->has_value()) << batch.status().ToString();
  auto as_samples = ToTensors(**batch);
  EXPECT_EQ(as_samples.status().code(), StatusCode::kInvalidArgument);
  const CollatedBatch& c = *(**batch).collated;
  auto dict = ToTensors(c);
  ASSERT_TRUE(dict.ok()) << dict.status().ToString();
  ASSERT_EQ(dict->size(), c.tensors.size() + 2);
  for (const TensorView& view : c.tensors) {
    const at::Tensor& t = (*dict)[std::string(view.name)];
    EXPECT_EQ(t.data_ptr(), static_cast<const void*>(view.data)) << view.name;  // zero-copy
    ASSERT_EQ(static_cast<size_t>(t.dim()), view.shape.size());
    for (size_t d = 0; d < view.shape.size(); ++d)
      EXPECT_EQ(static_cast<uint64_t>(t.size(static_cast<int64_t>(d))), view.shape[d]);
  }
  const at::Tensor& lengths = (*dict)["lengths"];
  ASSERT_EQ(lengths.scalar_type(), c10::ScalarType::Long);
  ASSERT_EQ(lengths.numel(), 3);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(lengths[i].item<int64_t>(), c.lengths[i]);
  const at::Tensor& cu = (*dict)["cu_seqlens"];
  ASSERT_EQ(cu.scalar_type(), c10::ScalarType::Int);
  EXPECT_EQ(cu[3].item<int32_t>(), (*dict)["input_ids"].size(0));
}

TEST_P(TorchAdapterTest, TensorsOutliveSampleLoaderAndDataset) {
  std::vector<std::pair<uint64_t, TensorDict>> kept;
  at::Tensor slice;
  {
    auto dataset = Dataset::Open(dir_.path().string());
    ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
    LoaderOptions options;
    options.order = Order::Unshuffled();
    options.memory_budget = 8 << 20;
    auto loader = Loader::Create(*dataset, options);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    for (int i = 0; i < 4; ++i) {
      auto batch = (*loader)->Next();
      ASSERT_TRUE(batch.ok() && batch->has_value()) << batch.status().ToString();
      const Sample& sample = (*batch)->samples.at(0);
      auto tensors = ToTensors(sample);
      ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
      kept.emplace_back(sample.index(), std::move(*tensors));
    }
    // A view of a view keeps the memory too.
    slice = kept[1].second["bfloat16"].select(0, 1);
  }  // the batches, the loader and the dataset die here; the tensors hold the arena slots
  for (const auto& [index, tensors] : kept) ExpectWritten(tensors, index);
  const at::Tensor full = kept[1].second["bfloat16"];
  kept.clear();
  EXPECT_TRUE(at::equal(slice.view(at::kShort), full.select(0, 1).view(at::kShort)));
}

INSTANTIATE_TEST_SUITE_P(Compression, TorchAdapterTest,
                         ::testing::Values(Compression::kNone, Compression::kZstd),
                         [](const auto& info) {
                           return info.param == Compression::kNone ? "Stored" : "Zstd";
                         });

// A hand-made sample over `bytes`, owned by a shared_ptr that counts its holders.
Sample HandMade(uint64_t index, std::shared_ptr<std::vector<std::byte>> bytes, DType dtype,
                Shape shape) {
  TensorView view;
  view.name = "t";
  view.dtype = dtype;
  view.shape = std::move(shape);
  view.data = bytes->data();
  view.nbytes = bytes->size();
  return Sample(index, {view}, {}, std::move(bytes));
}

TEST(TorchAdapter, DeleterReleasesTheMemoryWithTheLastTensor) {
  auto bytes = std::make_shared<std::vector<std::byte>>(64, std::byte{3});
  std::weak_ptr<std::vector<std::byte>> watch = bytes;
  at::Tensor view;
  {
    Sample sample = HandMade(0, std::move(bytes), DType::kUInt8, {8, 8});
    auto tensors = ToTensors(sample);
    ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
    view = (*tensors)["t"][2];
  }
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(view.sum().item<int64_t>(), 8 * 3);
  view = at::Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(TorchAdapter, BoolByteOtherThanZeroOrOneIsCorruption) {
  auto bytes = std::make_shared<std::vector<std::byte>>(6, std::byte{1});
  (*bytes)[4] = std::byte{2};
  auto tensors = ToTensors(HandMade(7, bytes, DType::kBool, {2, 3}));
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().code(), StatusCode::kCorruption);
  EXPECT_NE(tensors.status().message().find("sample 7"), std::string::npos)
      << tensors.status().message();
  EXPECT_NE(tensors.status().message().find("byte 4 is 2"), std::string::npos)
      << tensors.status().message();
}

TEST(TorchAdapter, SizeThatDoesNotMatchTheShapeIsRejected) {
  auto bytes = std::make_shared<std::vector<std::byte>>(10);
  auto tensors = ToTensors(HandMade(3, bytes, DType::kFloat32, {3}));
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tensors.status().message().find("sample 3"), std::string::npos);
  EXPECT_NE(tensors.status().message().find("10 bytes"), std::string::npos);

  auto huge = ToTensors(HandMade(3, bytes, DType::kUInt8, {uint64_t{1} << 63}));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
}

TEST(TorchAdapter, DeviceCopyKeepsDTypeAndShape) {
  // The meta device exists in every LibTorch build: it exercises the device branch.
  auto bytes = std::make_shared<std::vector<std::byte>>(24);
  TorchOptions options;
  options.device = c10::Device(c10::kMeta);
  auto tensors = ToTensors(HandMade(0, bytes, DType::kBFloat16, {3, 4}), options);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  const at::Tensor& t = (*tensors)["t"];
  EXPECT_TRUE(t.is_meta());
  EXPECT_EQ(t.scalar_type(), at::kBFloat16);
  EXPECT_EQ(t.sizes(), at::IntArrayRef({3, 4}));
}

TEST(TorchAdapter, UnavailableDeviceIsAnErrorNotAnException) {
  if (at::hasCUDA()) GTEST_SKIP() << "CUDA is available";
  auto bytes = std::make_shared<std::vector<std::byte>>(8);
  TorchOptions options;
  options.device = c10::Device(c10::kCUDA);
  auto tensors = ToTensors(HandMade(5, bytes, DType::kInt64, {1}), options);
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tensors.status().message().find("sample 5"), std::string::npos);
  EXPECT_NE(tensors.status().message().find("LibTorch"), std::string::npos);
}

TEST(TorchAdapter, ToTensorInputRoundTripsThroughTheWriter) {
  TempDir dir;
  const std::vector<at::Tensor> sources = {
      at::randn({5, 16}).to(at::kBFloat16), at::randint(0, 1000, {5}, at::kLong),
      at::randn({5, 3}).to(at::kFloat8_e4m3fn), at::ones({2}, at::kBool)};
  const std::vector<std::string> names = {"hidden_state", "input_ids", "fp8", "mask"};
  Schema schema;
  for (size_t i = 0; i < sources.size(); ++i) {
    Field field;
    field.name = names[i];
    field.dtype = *FromScalarType(sources[i].scalar_type());
    field.rank = static_cast<uint32_t>(sources[i].dim());
    schema.fields.push_back(field);
  }
  WriterOptions options;
  options.fsync = false;
  {
    auto writer = Writer::Create(dir.path().string(), schema, options);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    SampleInput input;
    for (size_t i = 0; i < sources.size(); ++i) {
      auto tensor = ToTensorInput(names[i], sources[i]);
      ASSERT_TRUE(tensor.ok()) << tensor.status().ToString();
      input.tensors.push_back(std::move(*tensor));
    }
    const Status appended = (*writer)->Append(input);
    ASSERT_TRUE(appended.ok()) << appended.ToString();
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  auto dataset = Dataset::Open(dir.path().string());
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  auto sample = (*dataset)->Read(0);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  auto tensors = ToTensors(*sample);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  for (size_t i = 0; i < sources.size(); ++i) {
    const at::Tensor& got = (*tensors)[names[i]];
    EXPECT_EQ(got.scalar_type(), sources[i].scalar_type()) << names[i];
    EXPECT_EQ(got.sizes(), sources[i].sizes()) << names[i];
    EXPECT_EQ(std::memcmp(got.const_data_ptr(), sources[i].const_data_ptr(), got.nbytes()), 0)
        << names[i];
  }

  auto strided = ToTensorInput("x", at::zeros({4, 4}).t());
  EXPECT_EQ(strided.status().code(), StatusCode::kInvalidArgument);
  auto complex = ToTensorInput("z", at::zeros({2}, at::kComplexFloat));
  EXPECT_EQ(complex.status().code(), StatusCode::kUnsupported);
  // No plain bytes: refused with what to do, not with LibTorch's exception.
  auto sparse = ToTensorInput("s", at::eye(3).to_sparse());
  EXPECT_EQ(sparse.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sparse.status().message().find("to_dense"), std::string::npos)
      << sparse.status().message();
  auto meta = ToTensorInput("m", at::empty({2}, at::TensorOptions().device(at::kMeta)));
  EXPECT_EQ(meta.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(meta.status().message().find("meta device"), std::string::npos)
      << meta.status().message();
}

// --- Deferred release behind device events, with stand-in events --------------------------------
//
// The real case (a pinned arena, t.to(kCUDA, non_blocking) then the tensor dropped) runs in the
// GPU check (tests/gpu/torch_nonblocking_check.cc); here stand-in events say when "the device"
// has finished, so the ordering is checked without a GPU.

class FakeEvents final : public DeviceEventSource {
 public:
  bool MayBeReadAsynchronously(const void*) override { return async.load(); }
  std::unique_ptr<DeviceEvent> Record(std::optional<c10::Device>) override {
    auto done = std::make_shared<std::atomic<bool>>(born_done.load());
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(done);
    return std::make_unique<Event>(std::move(done));
  }
  size_t recorded() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size();
  }
  void Complete(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.at(i)->store(true);
  }
  void CompleteAll() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : events_) e->store(true);
  }

  std::atomic<bool> async{true};
  std::atomic<bool> born_done{false};  // events recorded from now on have completed at once

 private:
  struct Event final : DeviceEvent {
    explicit Event(std::shared_ptr<std::atomic<bool>> d) : done(std::move(d)) {}
    bool Query() override { return done->load(); }
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mu_;
  std::vector<std::shared_ptr<std::atomic<bool>>> events_;
};

// Polls `done` for up to 10 s (the poller thread releases within about a millisecond).
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

constexpr uint64_t kReleaseSamples = 24;
constexpr uint64_t kReleaseLength = 256;
constexpr uint64_t kReleaseHidden = 32;

std::vector<std::byte> ReleaseBytes(uint64_t sample) {
  std::vector<std::byte> bytes(kReleaseLength * kReleaseHidden * 2);
  std::mt19937_64 rng(sample + 1000);
  for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
  return bytes;
}

// Samples of one size, {input_ids int64 [L], hidden_state bf16 [L, H]}, hidden_state's bytes
// from ReleaseBytes(i).
void WriteReleaseDataset(const std::string& dir) {
  Schema schema;
  schema.fields = {Field{"input_ids", DType::kInt64, 1, 0},
                   Field{"hidden_state", DType::kBFloat16, 2, 0}};
  schema.length_field = 0;
  WriterOptions options;
  options.fsync = false;
  auto writer = Writer::Create(dir, schema, options);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  for (uint64_t i = 0; i < kReleaseSamples; ++i) {
    std::vector<int64_t> ids(kReleaseLength, static_cast<int64_t>(i));
    const std::vector<std::byte> hs = ReleaseBytes(i);
    SampleInput input;
    input.source.path = "s" + std::to_string(i);
    input.tensors = {TensorInput{"input_ids", DType::kInt64, {kReleaseLength}, ids.data()},
                     TensorInput{"hidden_state", DType::kBFloat16,
                                 {kReleaseLength, kReleaseHidden}, hs.data()}};
    const Status appended = (*writer)->Append(input);
    ASSERT_TRUE(appended.ok()) << appended.ToString();
  }
  ASSERT_TRUE((*writer)->Finish().ok());
}

class TorchDeferredReleaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteReleaseDataset(dir_.path().string());
    auto dataset = Dataset::Open(dir_.path().string());
    ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
    dataset_ = *dataset;
  }
  std::unique_ptr<Loader> MakeLoader() {
    LoaderOptions options;
    options.order = Order::Unshuffled();
    options.memory_budget = 10 * 24 << 10;  // about ten samples
    options.verify_checksums = true;
    auto loader = Loader::Create(dataset_, options);
    EXPECT_TRUE(loader.ok()) << loader.status().ToString();
    return loader.ok() ? std::move(*loader) : nullptr;
  }
  TorchOptions Options() {
    TorchOptions options;
    options.release = release_;
    return options;
  }

  // A sample taken from the loader whose views were dropped while its event is pending.
  struct Held {
    uint64_t index;
    const std::byte* data;
    std::weak_ptr<const void> memory;
  };
  // Takes the next sample, checks its hidden_state, drops every view; returns what it held.
  Held TakeAndDrop(Loader& loader) {
    auto batch = loader.Next();
    EXPECT_TRUE(batch.ok() && batch->has_value()) << batch.status().ToString();
    if (!batch.ok() || !batch->has_value()) return Held{};
    const Sample& sample = (*batch)->samples.at(0);
    Held held{sample.index(), nullptr, sample.memory_owner()};
    const size_t before = events_->recorded();
    {
      auto tensors = ToTensors(sample, Options());
      EXPECT_TRUE(tensors.ok()) << tensors.status().ToString();
      const at::Tensor& hs = (*tensors)["hidden_state"];
      const std::vector<std::byte> want = ReleaseBytes(held.index);
      EXPECT_EQ(std::memcmp(hs.const_data_ptr(), want.data(), want.size()), 0)
          << "sample " << held.index;
      held.data = static_cast<const std::byte*>(hs.const_data_ptr());
      EXPECT_EQ(events_->recorded(), before) << "an event is recorded at the release, not before";
      // What a trainer does here: hs.to(kCUDA, /*non_blocking=*/true), then drops the views.
    }
    *batch = std::nullopt;
    EXPECT_EQ(events_->recorded(), before + 1) << "one event per sample, at its last view's death";
    return held;
  }

  TempDir dir_;
  std::shared_ptr<Dataset> dataset_;
  std::shared_ptr<FakeEvents> events_ = std::make_shared<FakeEvents>();
  std::shared_ptr<DeferredRelease> release_ = DeferredRelease::Create(
      DeferredReleaseOptions{events_, 1024, uint64_t{1} << 30, std::chrono::seconds(10)});
};

TEST_F(TorchDeferredReleaseTest, MemoryIsNotReusedWhileItsEventIsPendingAndIsOnceItCompleted) {
  std::unique_ptr<Loader> loader = MakeLoader();
  ASSERT_NE(loader, nullptr);
  std::vector<Held> held;
  for (int i = 0; i < 3; ++i) held.push_back(TakeAndDrop(*loader));
  EXPECT_EQ(release_->stats().pending, 3u);
  // Every later sample's event completes at once: the loader cycles through the rest of its
  // arena (the whole epoch, many times the free memory) while the three stay held.
  events_->born_done = true;
  for (uint64_t n = 3; n < kReleaseSamples; ++n) {
    const Held next = TakeAndDrop(*loader);
    EXPECT_EQ(next.index, n);
    for (const Held& h : held) {
      ASSERT_FALSE(h.memory.expired()) << "sample " << h.index << " released early";
      const std::vector<std::byte> want = ReleaseBytes(h.index);
      ASSERT_EQ(std::memcmp(h.data, want.data(), want.size()), 0)
          << "sample " << h.index << "'s bytes were reused while its copy could be reading them";
    }
  }
  auto end = loader->Next();
  ASSERT_TRUE(end.ok() && !end->has_value());
  // The device finishes: the held memory goes back.
  events_->CompleteAll();
  EXPECT_TRUE(release_->Drain(std::chrono::seconds(10)));
  for (const Held& h : held) {
    EXPECT_TRUE(Eventually([&] { return h.memory.expired(); })) << "sample " << h.index;
  }
  const DeferredReleaseStats stats = release_->stats();
  EXPECT_EQ(stats.deferred, kReleaseSamples);
  EXPECT_EQ(stats.released, kReleaseSamples);
  EXPECT_EQ(stats.waited, 0u);
  EXPECT_EQ(stats.pending, 0u);
  // And the arena serves another epoch from the memory it got back.
  ASSERT_TRUE(loader->SetEpoch(1).ok());
  for (uint64_t n = 0; n < kReleaseSamples; ++n) EXPECT_EQ(TakeAndDrop(*loader).index, n);
}

TEST_F(TorchDeferredReleaseTest, NothingIsDeferredWhenNoDeviceCanReadTheMemory) {
  events_->async = false;
  std::unique_ptr<Loader> loader = MakeLoader();
  ASSERT_NE(loader, nullptr);
  auto batch = loader->Next();
  ASSERT_TRUE(batch.ok() && batch->has_value());
  std::weak_ptr<const void> memory = (*batch)->samples.at(0).memory_owner();
  {
    auto tensors = ToTensors((*batch)->samples.at(0), Options());
    ASSERT_TRUE(tensors.ok());
  }
  *batch = std::nullopt;
  EXPECT_TRUE(memory.expired());
  EXPECT_EQ(events_->recorded(), 0u);
  EXPECT_EQ(release_->stats().deferred, 0u);
}

TEST_F(TorchDeferredReleaseTest, DestroyingTheLoaderWithPendingEventsIsSafe) {
  std::vector<Held> held;
  {
    std::unique_ptr<Loader> loader = MakeLoader();
    ASSERT_NE(loader, nullptr);
    for (int i = 0; i < 2; ++i) held.push_back(TakeAndDrop(*loader));
    dataset_.reset();
  }  // the loader and the dataset are gone; the pending releases hold their arena
  for (const Held& h : held) {
    ASSERT_FALSE(h.memory.expired());
    const std::vector<std::byte> want = ReleaseBytes(h.index);
    EXPECT_EQ(std::memcmp(h.data, want.data(), want.size()), 0) << "sample " << h.index;
  }
  events_->CompleteAll();
  EXPECT_TRUE(release_->Drain(std::chrono::seconds(10)));
  for (const Held& h : held) EXPECT_TRUE(Eventually([&] { return h.memory.expired(); }));
}

// A hand-made sample of `n` bytes whose views are made and dropped at once.
std::weak_ptr<std::vector<std::byte>> DropViews(uint64_t index, size_t n,
                                                const TorchOptions& options) {
  auto bytes = std::make_shared<std::vector<std::byte>>(n, std::byte{7});
  std::weak_ptr<std::vector<std::byte>> watch = bytes;
  auto tensors = ToTensors(HandMade(index, std::move(bytes), DType::kUInt8,
                                    {static_cast<uint64_t>(n)}),
                           options);
  EXPECT_TRUE(tensors.ok()) << tensors.status().ToString();
  return watch;
}

TEST(TorchDeferredRelease, TheBoundMakesTheReleaseWaitForTheOldestEvent) {
  auto events = std::make_shared<FakeEvents>();
  TorchOptions options;
  options.release = DeferredRelease::Create(DeferredReleaseOptions{
      events, /*max_pending=*/2, uint64_t{1} << 30, std::chrono::seconds(20)});
  auto a = DropViews(0, 64, options);
  auto b = DropViews(1, 64, options);
  EXPECT_EQ(options.release->stats().pending, 2u);
  std::atomic<bool> returned{false};
  std::weak_ptr<std::vector<std::byte>> c;
  std::thread third([&] {
    c = DropViews(2, 64, options);
    returned = true;
  });
  // The third release waits for room; nothing is released to make it.
  ASSERT_TRUE(Eventually([&] { return options.release->stats().waited == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load());
  EXPECT_FALSE(a.expired());
  EXPECT_FALSE(b.expired());
  events->Complete(0);  // the oldest copy completes: its memory goes, the third gets its place
  third.join();
  EXPECT_TRUE(returned.load());
  EXPECT_TRUE(Eventually([&] { return a.expired(); }));
  EXPECT_FALSE(b.expired());
  EXPECT_FALSE(c.expired());
  DeferredReleaseStats stats = options.release->stats();
  EXPECT_EQ(stats.pending, 2u);
  EXPECT_EQ(stats.peak_pending, 2u);
  EXPECT_EQ(stats.over_bound, 0u);
  events->CompleteAll();
  EXPECT_TRUE(options.release->Drain(std::chrono::seconds(10)));
  EXPECT_TRUE(Eventually([&] { return b.expired() && c.expired(); }));
}

TEST(TorchDeferredRelease, PastMaxWaitTheMemoryIsHeldBeyondTheBoundNeverReleasedEarly) {
  auto events = std::make_shared<FakeEvents>();
  TorchOptions options;
  options.release = DeferredRelease::Create(DeferredReleaseOptions{
      events, 100, /*max_pending_bytes=*/100, std::chrono::milliseconds(30)});
  auto a = DropViews(0, 64, options);  // admitted: the first is always
  auto b = DropViews(1, 64, options);  // 128 bytes > 100: waits 30 ms, then is held anyway
  DeferredReleaseStats stats = options.release->stats();
  EXPECT_EQ(stats.waited, 1u);
  EXPECT_EQ(stats.over_bound, 1u);
  EXPECT_EQ(stats.pending, 2u);
  EXPECT_EQ(stats.pending_bytes, 128u);
  EXPECT_FALSE(a.expired());
  EXPECT_FALSE(b.expired());
  EXPECT_FALSE(options.release->Drain(std::chrono::milliseconds(5)));
  events->CompleteAll();
  EXPECT_TRUE(options.release->Drain(std::chrono::seconds(10)));
  EXPECT_TRUE(Eventually([&] { return a.expired() && b.expired(); }));
}

TEST(TorchDeferredRelease, DestroyedWithAPendingEventItKeepsTheMemory) {
  auto events = std::make_shared<FakeEvents>();
  TorchOptions options;
  options.release = DeferredRelease::Create(
      DeferredReleaseOptions{events, 100, uint64_t{1} << 30, std::chrono::milliseconds(20)});
  auto done = DropViews(0, 64, options);
  auto stuck = DropViews(1, 64, options);
  events->Complete(0);
  const auto start = std::chrono::steady_clock::now();
  options.release.reset();  // waits up to max_wait for the pending events, then keeps the rest
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(done.expired());
  EXPECT_FALSE(stuck.expired()) << "memory a copy may still read must never be handed back";
}

TEST(TorchDeferredRelease, ToTensorOfOneViewDefersToo) {
  auto events = std::make_shared<FakeEvents>();
  TorchOptions options;
  options.release = DeferredRelease::Create(DeferredReleaseOptions{events});
  auto bytes = std::make_shared<std::vector<std::byte>>(16, std::byte{1});
  std::weak_ptr<std::vector<std::byte>> watch = bytes;
  {
    Sample sample = HandMade(0, std::move(bytes), DType::kUInt8, {16});
    auto tensor = ToTensor(sample.tensors()[0], sample.memory_owner(), options);
    ASSERT_TRUE(tensor.ok());
  }
  EXPECT_EQ(events->recorded(), 1u);
  EXPECT_FALSE(watch.expired());
  events->CompleteAll();
  EXPECT_TRUE(Eventually([&] { return watch.expired(); }));
}

TEST(TorchDeferredRelease, TheCudaSourceDefersNothingWithoutCuda) {
  if (at::hasCUDA()) GTEST_SKIP() << "CUDA is available";
  std::vector<std::byte> bytes(64);
  EXPECT_FALSE(CudaEventSource()->MayBeReadAsynchronously(bytes.data()));
  EXPECT_FALSE(DeferredRelease::Default()->MayBeReadAsynchronously(bytes.data()));
}

}  // namespace
}  // namespace libshard
