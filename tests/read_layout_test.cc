// Tests for the loader's read planning (libshard/src/loader/read_layout.cc): whole reads, partial
// reads for `fields` and `max_len` of a dataset without row blocks (index version 3: 4 KiB
// aligned and covering exactly the selected tensors), compressed samples always read whole, the
// `whole` flag, and BuildSample over a partial read giving the same tensors as Dataset::Read.
// Row-range reads with row blocks (index version 4): slice_read_test.cc.
#include "loader/read_layout.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/writer.h"
#include "testutil/testutil.h"

namespace libshard {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kPage = 4096;

// Samples long enough that hidden_state spans several pages and starts past the first page; an
// index of version 3 (no row blocks), whose partial reads are these tests' subject.
std::shared_ptr<Dataset> WriteDataset(const fs::path& dir, uint64_t n, bool zstd) {
  WriterOptions o = testing::FastOptions();
  if (zstd) o.compression = Compression::kZstd;
  auto w = Writer::Create(dir.string(), testing::EagleSchema(), o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return nullptr;
  for (uint64_t i = 0; i < n; ++i) {
    testing::OwnedSample s = testing::MakeEagleSample(i, 700 + 37 * i, 64, zstd);
    Status st = (*w)->Append(s.input);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  auto summary = (*w)->Finish();
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  testing::RewriteIndexAsV3(dir);
  auto ds = Dataset::Open(dir.string());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? *ds : nullptr;
}

void ExpectWhole(const ReadLayout& r, const SampleLocation& loc) {
  EXPECT_TRUE(r.whole);
  EXPECT_EQ(r.file_offset, loc.offset);
  EXPECT_EQ(r.read_length, (loc.stored_size + kPage - 1) / kPage * kPage);
  EXPECT_EQ(r.needed, loc.stored_size);
  EXPECT_EQ(r.payload_begin, 0u);
  EXPECT_EQ(r.payload_end, loc.stored_size);
  EXPECT_EQ(r.skew, 0u);
}

// The partial read is page aligned, covers [begin, end) of the payload exactly, and reads no
// page that holds none of it.
void ExpectPartial(const ReadLayout& r, const SampleLocation& loc, uint64_t begin, uint64_t end) {
  EXPECT_FALSE(r.whole);
  EXPECT_EQ(r.payload_begin, begin);
  EXPECT_EQ(r.payload_end, end);
  EXPECT_EQ(r.file_offset % kPage, 0u);
  EXPECT_EQ(r.read_length % kPage, 0u);
  EXPECT_EQ(r.file_offset, loc.offset + begin / kPage * kPage);
  EXPECT_EQ(r.skew, begin % kPage);
  EXPECT_EQ(r.needed, end - begin / kPage * kPage);
  EXPECT_GE(r.file_offset + r.read_length, loc.offset + end);
  EXPECT_EQ(r.read_length, (end + kPage - 1) / kPage * kPage - begin / kPage * kPage);
}

// Reads the planned range from the shard file (pread, no O_DIRECT needed for a test).
std::vector<std::byte> ReadPlanned(const Dataset& ds, const SampleLocation& loc,
                                   const ReadLayout& r) {
  std::vector<std::byte> buf(r.read_length);
  const int fd = ::open(ds.shards()[loc.shard].path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  if (fd < 0) return {};
  const ssize_t got = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(r.file_offset));
  ::close(fd);
  EXPECT_GE(got, static_cast<ssize_t>(r.needed));
  return buf;
}

TEST(ReadLayoutTest, NoSelectionReadsTheWholeSample) {
  testing::TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", 3, false);
  ASSERT_NE(ds, nullptr);
  for (uint64_t i = 0; i < ds->size(); ++i) {
    const SampleLocation loc = ds->location(i);
    ExpectWhole(PlanRead(*ds, i, loc, {}, 0, PartialCheck::kNone), loc);
  }
}

TEST(ReadLayoutTest, FieldsSelectExactlyTheirTensors) {
  testing::TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", 3, false);
  ASSERT_NE(ds, nullptr);
  for (uint64_t i = 0; i < ds->size(); ++i) {
    const SampleLocation loc = ds->location(i);
    const TensorLocation hidden = ds->tensor(i, 2);
    ASSERT_GT(hidden.offset, kPage) << "the sample must put hidden_state past the first page";
    const std::vector<size_t> only_hidden = {2};
    const ReadLayout r = PlanRead(*ds, i, loc, only_hidden, 0, PartialCheck::kNone);
    ExpectPartial(r, loc, hidden.offset, hidden.offset + hidden.nbytes);
    EXPECT_LT(r.read_length, (loc.stored_size + kPage - 1) / kPage * kPage + kPage);

    // Two fields: the range spans from the first one's start to the last one's end.
    const TensorLocation ids = ds->tensor(i, 0);
    const TensorLocation mask = ds->tensor(i, 1);
    const std::vector<size_t> ids_and_mask = {1, 0};
    ExpectPartial(PlanRead(*ds, i, loc, ids_and_mask, 0, PartialCheck::kNone), loc,
                  std::min(ids.offset, mask.offset),
                  std::max(ids.offset + ids.nbytes, mask.offset + mask.nbytes));
  }
}

TEST(ReadLayoutTest, MaxLenReadsOnlyTheKeptRows) {
  testing::TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", 2, false);
  ASSERT_NE(ds, nullptr);
  const uint64_t max_len = 600;  // shorter than every sample (700 + 37 i tokens)
  for (uint64_t i = 0; i < ds->size(); ++i) {
    const SampleLocation loc = ds->location(i);
    const TensorLocation hidden = ds->tensor(i, 2);
    ASSERT_GT(hidden.shape[1], max_len);
    const uint64_t row = hidden.nbytes / hidden.shape[1];  // hidden_state is [1, L, H]: one block
    const std::vector<size_t> only_hidden = {2};
    ExpectPartial(PlanRead(*ds, i, loc, only_hidden, max_len, PartialCheck::kNone), loc, hidden.offset,
                  hidden.offset + max_len * row);
    // All fields with max_len: from the first tensor to the kept rows of the last one.
    uint64_t begin = UINT64_MAX, end = 0;
    for (size_t f = 0; f < 3; ++f) {
      const TensorLocation t = ds->tensor(i, f);
      begin = std::min(begin, t.offset);
      end = std::max(end, t.offset + t.nbytes / t.shape[f == 2 ? 1 : 0] * max_len);
    }
    ExpectPartial(PlanRead(*ds, i, loc, {}, max_len, PartialCheck::kNone), loc, begin, end);
  }
}

TEST(ReadLayoutTest, WholeFlagForcesAWholeRead) {
  testing::TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", 2, false);
  ASSERT_NE(ds, nullptr);
  const std::vector<size_t> only_hidden = {2};
  for (uint64_t i = 0; i < ds->size(); ++i) {
    const SampleLocation loc = ds->location(i);
    ExpectWhole(PlanRead(*ds, i, loc, only_hidden, 100, PartialCheck::kWhole), loc);
  }
}

// Checked by field (FORMAT.md §3.9): a selection reads each selected field whole, also under
// max_len, and no other field past them; the layout says to check it field by field.
TEST(ReadLayoutTest, FieldCheckReadsTheSelectedFieldsWhole) {
  testing::TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", 2, false);
  ASSERT_NE(ds, nullptr);
  const std::vector<size_t> only_hidden = {2};
  for (uint64_t i = 0; i < ds->size(); ++i) {
    const SampleLocation loc = ds->location(i);
    const TensorLocation hidden = ds->tensor(i, 2);
    const ReadLayout r = PlanRead(*ds, i, loc, only_hidden, 100, PartialCheck::kFields);
    EXPECT_TRUE(r.check_fields);
    ExpectPartial(r, loc, hidden.offset, hidden.offset + hidden.nbytes);
    EXPECT_FALSE(PlanRead(*ds, i, loc, only_hidden, 100, PartialCheck::kNone).check_fields);
    // No selection: a whole read, checked by the sample checksum.
    const ReadLayout whole = PlanRead(*ds, i, loc, {}, 0, PartialCheck::kFields);
    EXPECT_FALSE(whole.check_fields);
    ExpectWhole(whole, loc);
  }
}

TEST(ReadLayoutTest, CompressedSamplesAreAlwaysReadWhole) {
  testing::TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", 2, true);
  ASSERT_NE(ds, nullptr);
  const std::vector<size_t> only_hidden = {2};
  for (uint64_t i = 0; i < ds->size(); ++i) {
    const SampleLocation loc = ds->location(i);
    ASSERT_NE(loc.flags & kSampleFlagZstd, 0u) << "sample " << i << " was stored uncompressed";
    ExpectWhole(PlanRead(*ds, i, loc, only_hidden, 0, PartialCheck::kNone), loc);
    ExpectWhole(PlanRead(*ds, i, loc, only_hidden, 100, PartialCheck::kNone), loc);
  }
}

// The bytes of a partial read, handed to BuildSample, give the same tensors as Dataset::Read
// (cut to max_len rows where it applies).
TEST(ReadLayoutTest, BuildSampleOverAPartialReadMatchesRead) {
  testing::TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", 2, false);
  ASSERT_NE(ds, nullptr);
  const uint64_t max_len = 650;
  const std::vector<size_t> fields = {0, 2};
  for (uint64_t i = 0; i < ds->size(); ++i) {
    const SampleLocation loc = ds->location(i);
    const ReadLayout r = PlanRead(*ds, i, loc, fields, max_len, PartialCheck::kNone);
    ASSERT_FALSE(r.whole);
    std::vector<std::byte> buf = ReadPlanned(*ds, loc, r);
    ASSERT_FALSE(buf.empty());
    auto got = BuildSample(*ds, i, buf.data() + r.skew, r.payload_begin,
                           r.payload_end - r.payload_begin, nullptr, fields, max_len);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    auto want = ds->Read(i);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ASSERT_EQ(got->tensors().size(), 2u);
    for (const TensorView& g : got->tensors()) {
      const TensorView* w = want->Find(g.name);
      ASSERT_NE(w, nullptr) << g.name;
      const size_t seq_dim = g.name == "hidden_state" ? 1 : 0;
      EXPECT_EQ(g.shape[seq_dim], max_len) << g.name;
      ASSERT_EQ(g.nbytes, w->nbytes / w->shape[seq_dim] * max_len) << g.name;
      EXPECT_EQ(std::memcmp(g.data, w->data, g.nbytes), 0) << "sample " << i << " " << g.name;
    }
  }
}

// A buffer that does not hold the selected tensors is Corruption naming the tensor, not a read
// past the buffer.
TEST(ReadLayoutTest, BuildSampleRefusesTensorsOutsideTheBuffer) {
  testing::TempDir tmp;
  auto ds = WriteDataset(tmp / "ds", 1, false);
  ASSERT_NE(ds, nullptr);
  const TensorLocation hidden = ds->tensor(0, 2);
  std::vector<std::byte> buf(kPage);
  const std::vector<size_t> only_hidden = {2};
  auto got = BuildSample(*ds, 0, buf.data(), 0, buf.size(), nullptr, only_hidden, 10);
  ASSERT_GT(hidden.offset, buf.size());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCorruption);
  EXPECT_NE(got.status().message().find("hidden_state"), std::string::npos)
      << got.status().ToString();
}

}  // namespace
}  // namespace libshard
