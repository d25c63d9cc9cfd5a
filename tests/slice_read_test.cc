// Row-range reads (FORMAT.md §3.10): Dataset::Read(i, ReadRequest{rows}) gives, bit for bit, the
// rows of the whole read, for every codec and for fields with dims before their seq_dim; it reads
// the rows plus less than one row block at each end of each field (the cost rule, checked on the
// plan's extents), checks every block it reads (a damaged block fails a slice covering it, naming
// the sample, the field and the rows, and not one that does not), and reads older datasets and
// whole-sample zstd samples whole, saying so once. The loader's row-range layout (PlanSliceRead,
// loader/read_layout.h) reads the same extents page-aligned and gives the same tensors.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "codec/row_blocks.h"
#include "dataset/dataset_access.h"
#include "dataset/slice_plan.h"
#include "format/bytes.h"
#include "format/index.h"
#include "format_test_helpers.h"
#include "libshard/dataset.h"
#include "libshard/merge.h"
#include "libshard/upgrade.h"
#include "libshard/writer.h"
#include "loader/read_layout.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;
using internal::DatasetAccess;
using internal::SlicePlan;

constexpr uint64_t kBlockBytes = 4096;  // the writer's row blocks in these tests
constexpr uint64_t kHidden = 64;        // hidden_state rows of 128 bytes: 32 rows a block

// EAGLE-3's fields plus one with dims before its seq_dim ([2, L, 8]: two runs of rows a token
// range covers) and one without a sequence dimension.
Schema SliceSchema() {
  Schema s = EagleSchema();
  s.fields.push_back({"pairs", DType::kBFloat16, 3, 1});
  s.fields.push_back({"scale", DType::kFloat32, 1, -1});
  return s;
}

OwnedSample SliceSample(uint64_t i, uint64_t len, bool compressible) {
  return MakeSample(SliceSchema(), {{len}, {len}, {1, len, kHidden}, {2, len, 8}, {5}}, i,
                    compressible);
}

uint64_t SampleLength(uint64_t i) { return 100 + 211 * i; }  // 100 .. 1366 tokens

struct Written {
  std::shared_ptr<Dataset> ds;
  std::vector<OwnedSample> samples;
};

// A dataset of `n` samples written with row blocks of kBlockBytes.
Written WriteSliceDataset(const fs::path& dir, uint64_t n, WriterOptions o, bool compressible) {
  Written w;
  codec::ScopedWriterRowBlockBytes blocks(kBlockBytes);
  auto writer = Writer::Create(dir.string(), SliceSchema(), o);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  if (!writer.ok()) return w;
  for (uint64_t i = 0; i < n; ++i) {
    w.samples.push_back(SliceSample(i, SampleLength(i), compressible));
    Status st = (*writer)->Append(w.samples.back().input);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  auto summary = (*writer)->Finish();
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  auto ds = Dataset::Open(dir.string());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  if (ds.ok()) w.ds = *ds;
  return w;
}

// Windows of every kind: at and off block boundaries, one row, empty, to and past the end.
std::vector<RowRange> Windows(uint64_t len) {
  std::vector<RowRange> out = {{0, 1},          {0, 32},          {31, 33},        {32, 64},
                               {5, 6},          {17, 200},        {len / 2, len},  {len - 1, len},
                               {0, len},        {len - 3, len + 50}, {len, len},  {len + 5, len + 9},
                               {7, 7},          {0, RowRange::kEnd}, {len / 3, 2 * len / 3}};
  std::mt19937_64 rng(len);
  for (int k = 0; k < 6; ++k) {
    const uint64_t a = rng() % len, b = a + rng() % (len - a + 1);
    out.push_back({a, b});
  }
  return out;
}

// The options of each way a field may be stored.
struct Storage {
  const char* name;
  WriterOptions options;
  bool compressible = false;
};

std::vector<Storage> Storages() {
  std::vector<Storage> out;
  WriterOptions raw = FastOptions();
  out.push_back({"raw", raw});
  for (FieldCodecPolicy p : {FieldCodecPolicy::kAuto, FieldCodecPolicy::kPlanes}) {
    WriterOptions o = FastOptions();
    o.field_codecs = p;
    out.push_back({p == FieldCodecPolicy::kAuto ? "auto (planes2, zstd per field)" : "planes", o,
                   true});
  }
  WriterOptions fp8 = FastOptions();
  fp8.store_fp8 = true;
  out.push_back({"fp8", fp8, true});
  WriterOptions fp8_planes = FastOptions();
  fp8_planes.store_fp8 = true;
  fp8_planes.field_codecs = FieldCodecPolicy::kAuto;
  out.push_back({"fp8-planes", fp8_planes, true});
  return out;
}

TEST(SliceReadTest, RowRangesAreTheRowsOfTheWholeReadForEveryStorage) {
  for (const Storage& storage : Storages()) {
    SCOPED_TRACE(storage.name);
    TempDir tmp;
    Written w = WriteSliceDataset(tmp / "ds", 4, storage.options, storage.compressible);
    ASSERT_NE(w.ds, nullptr);
    EXPECT_EQ(w.ds->index_version(), 4u);
    EXPECT_TRUE(w.ds->has_row_blocks());
    for (uint64_t i = 0; i < w.ds->size(); ++i)
      for (RowRange rows : Windows(SampleLength(i))) ExpectRowRangeRead(*w.ds, i, rows);
  }
}

TEST(SliceReadTest, WholeSampleZstdIsReadWholeAndSaysSoOnce) {
  TempDir tmp;
  WriterOptions o = FastOptions();
  o.compression = Compression::kZstd;
  Written w = WriteSliceDataset(tmp / "ds", 3, o, /*compressible=*/true);
  ASSERT_NE(w.ds, nullptr);
  ASSERT_NE(w.ds->location(0).flags & kSampleFlagZstd, 0u);
  ::testing::internal::CaptureStderr();
  for (uint64_t i = 0; i < w.ds->size(); ++i)
    for (RowRange rows : {RowRange{3, 40}, RowRange{50, 51}}) ExpectRowRangeRead(*w.ds, i, rows);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("whole-sample zstd"), std::string::npos) << err;
  EXPECT_NE(err.find(tmp.path().string()), std::string::npos) << err;
  EXPECT_EQ(err.find("libshard:"), err.rfind("libshard:")) << "said more than once: " << err;
  auto plan = DatasetAccess::PlanSlice(*w.ds, 0, {}, RowRange{3, 40}, true);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE((*plan)->whole);
  EXPECT_EQ((*plan)->bytes(), w.ds->location(0).stored_size);
}

// The cost rule (FORMAT.md §3.10.3): a row range reads the bytes of its rows plus less than one
// block at each end of each field (plus a coded field's head), whatever the sample's size.
TEST(SliceReadTest, ARowRangeReadsItsRowsPlusAtMostABlockAtEachEnd) {
  for (const char* name : {"raw", "auto (planes2, zstd per field)"}) {
    SCOPED_TRACE(name);
    TempDir tmp;
    WriterOptions o = FastOptions();
    if (std::string_view(name) != "raw") o.field_codecs = FieldCodecPolicy::kAuto;
    Written w = WriteSliceDataset(tmp / "ds", 7, o, std::string_view(name) != "raw");
    ASSERT_NE(w.ds, nullptr);
    for (uint64_t i = 0; i < w.ds->size(); ++i) {
      const uint64_t len = SampleLength(i);
      for (RowRange rows : Windows(len)) {
        auto plan = DatasetAccess::PlanSlice(*w.ds, i, {}, rows, true);
        ASSERT_TRUE(plan.ok()) << plan.status().ToString();
        ASSERT_FALSE((*plan)->whole);
        for (const internal::FieldSlice& f : (*plan)->fields) {
          SCOPED_TRACE(w.ds->schema().fields[f.field].name);
          uint64_t read = 0;
          for (size_t k = f.first_extent; k < f.first_extent + f.extent_count; ++k)
            read += (*plan)->extents[k].size;
          const bool cut = f.end - f.begin < f.seq;
          if (!cut) {  // every row (or a field without a sequence dimension): the field
            EXPECT_LE(read, f.region_size);
            continue;
          }
          // Raw bytes of the rows, and of two blocks (a block holds at most kBlockBytes of raw
          // rows, or one row); per run of rows. A coded block's bytes are at most its raw bytes
          // plus its fixed part (planes2: 1.125 bytes an element) and its Huffman header; the
          // head is a few words a chunk.
          const uint64_t rows_bytes = f.nbytes;
          const uint64_t block = std::max(kBlockBytes, f.token_bytes);
          uint64_t bound = rows_bytes + f.outer * (2 * block + 64);
          if (f.mode == internal::SliceMode::kCoded)
            bound = bound * 2 + f.places.head_size + 256 * f.extent_count;
          EXPECT_LE(read, bound) << "rows [" << rows.start << ", " << rows.stop << ")";
          // And it is far less than the field once the sample is large.
          if (len > 1000 && rows.stop - rows.start < 64 && f.full_nbytes > 16 * kBlockBytes)
            EXPECT_LT(read, f.region_size / 4);
        }
      }
    }
  }
}

// Every byte served is checked (FORMAT.md §3.10.3): a flipped byte in a row block (raw) or a chunk
// (codec) fails a slice covering it, naming the sample, the field and the rows; a slice that does
// not cover it reads; Verify catches it; a whole read does (the sample checksum).
TEST(SliceReadTest, ADamagedBlockFailsOnlyTheSlicesThatCoverIt) {
  for (bool coded : {false, true}) {
    SCOPED_TRACE(coded ? "coded" : "raw");
    TempDir tmp;
    WriterOptions o = FastOptions();
    if (coded) o.field_codecs = FieldCodecPolicy::kAuto;
    Written w = WriteSliceDataset(tmp / "ds", 4, o, coded);
    ASSERT_NE(w.ds, nullptr);
    const uint64_t i = 3;  // 733 tokens: 23 blocks of 32 rows in hidden_state
    std::vector<uint64_t> offsets, sizes;
    ASSERT_TRUE(DatasetAccess::FieldRegions(*w.ds, i, &offsets, &sizes).ok());
    // A byte of hidden_state's rows [320, 352) (block 10), at its middle: for a coded field, a
    // byte of the chunk holding those rows (its place from the plan).
    auto plan = DatasetAccess::PlanSlice(*w.ds, i, std::vector<size_t>{2}, RowRange{330, 331}, true);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const internal::FieldSlice& f = (*plan)->fields[0];
    uint64_t at = 0;
    if (coded) {
      ASSERT_EQ(f.mode, internal::SliceMode::kCoded);
      at = f.region_offset + (f.places.chunk_offset[10] + f.places.chunk_offset[11]) / 2;
    } else {
      ASSERT_EQ(f.mode, internal::SliceMode::kRows);
      at = f.region_offset + 336 * kHidden * 2 + 7;
    }
    const SampleLocation loc = w.ds->location(i);
    const std::string shard = w.ds->shards()[loc.shard].path;
    {
      std::string bytes = ReadFileToString(shard);
      bytes[loc.offset + at] = static_cast<char>(bytes[loc.offset + at] ^ 0x40);
      WriteStringToFile(shard, bytes);
    }
    auto ds = Dataset::Open(tmp.path().string() + "/ds");
    ASSERT_TRUE(ds.ok());
    ReadRequest covering;
    covering.rows = RowRange{300, 340};
    auto bad = (*ds)->Read(i, covering);
    ASSERT_FALSE(bad.ok());
    ExpectError(bad.status(), StatusCode::kCorruption,
                {shard, "sample 3", "hidden_state", "rows [320, 352)",
                 coded ? "chunk 10" : "row block 10", "checksum mismatch"});
    for (RowRange rows : {RowRange{0, 320}, RowRange{352, 733}, RowRange{400, 410}}) {
      SCOPED_TRACE("rows " + std::to_string(rows.start));
      ReadRequest req;
      req.rows = rows;
      auto good = (*ds)->Read(i, req);
      ASSERT_TRUE(good.ok()) << good.status().ToString();
      if (!coded) {  // the rows served are the rows written
        const TensorView* h = good->Find("hidden_state");
        ASSERT_NE(h, nullptr);
        const uint64_t row = kHidden * 2;
        EXPECT_EQ(std::memcmp(h->data, w.samples[i].bytes[2].data() + rows.start * row,
                              (rows.stop - rows.start) * row),
                  0);
      }
    }
    EXPECT_EQ((*ds)->Verify(i).code(), StatusCode::kCorruption);
    EXPECT_FALSE((*ds)->Read(i).ok());
    // Other samples are untouched.
    ExpectRowRangeRead(**ds, 2, RowRange{300, 340});
  }
}

// A damaged block table (the index's tables part, FORMAT.md §3.10.1) fails the slices of its
// sample, naming the index and the sample; whole reads do not use it.
TEST(SliceReadTest, ADamagedBlockTableFailsTheSlicesOfItsSample) {
  TempDir tmp;
  Written w = WriteSliceDataset(tmp / "ds", 3, FastOptions(), false);
  ASSERT_NE(w.ds, nullptr);
  const std::string index_path = (tmp / "ds" / "index.lsi").string();
  std::string index = ReadFileToString(index_path);
  const uint64_t tables = format::GetU64(format::AsBytes(index) + format::kHeaderTablesOffset);
  ASSERT_LT(tables, index.size());
  index[tables + 9] = static_cast<char>(index[tables + 9] ^ 1);  // sample 0's table
  WriteStringToFile(index_path, index);
  auto ds = Dataset::Open((tmp / "ds").string());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();  // the head and the blocks are intact
  ReadRequest req;
  req.rows = RowRange{10, 50};
  ExpectError((*ds)->Read(0, req).status(), StatusCode::kCorruption,
              {index_path, "sample 0", "block table", "checksum mismatch"});
  EXPECT_TRUE((*ds)->Read(0).ok());
  ExpectRowRangeRead(**ds, 1, RowRange{10, 50});
}

// Verification off: only the rows are read (no block rounding), and nothing is checked.
TEST(SliceReadTest, WithoutVerificationOnlyTheRowsAreRead) {
  TempDir tmp;
  Written w = WriteSliceDataset(tmp / "ds", 3, FastOptions(), false);
  ASSERT_NE(w.ds, nullptr);
  auto plan = DatasetAccess::PlanSlice(*w.ds, 2, std::vector<size_t>{2}, RowRange{40, 41}, false);
  ASSERT_TRUE(plan.ok());
  EXPECT_LE((*plan)->bytes(), kHidden * 2 + 64);  // one row, from a 64-byte boundary
  DatasetOptions unchecked;
  unchecked.verify_checksums = false;
  auto ds = Dataset::Open((tmp / "ds").string(), unchecked);
  ASSERT_TRUE(ds.ok());
  for (RowRange rows : Windows(SampleLength(2))) ExpectRowRangeRead(**ds, 2, rows);
}

// Fields by name, in the order asked; bounds.
TEST(SliceReadTest, FieldsAndBounds) {
  TempDir tmp;
  Written w = WriteSliceDataset(tmp / "ds", 2, FastOptions(), false);
  ASSERT_NE(w.ds, nullptr);
  ReadRequest req;
  req.fields = {"hidden_state", "input_ids"};
  req.rows = RowRange{10, 20};
  auto s = w.ds->Read(1, req);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->tensors().size(), 2u);
  EXPECT_EQ(s->tensors()[0].name, "hidden_state");
  EXPECT_EQ(s->tensors()[0].shape, (Shape{1, 10, kHidden}));
  EXPECT_EQ(s->tensors()[1].name, "input_ids");
  EXPECT_EQ(s->tensors()[1].shape, (Shape{10}));
  EXPECT_EQ(std::memcmp(s->tensors()[1].data, w.samples[1].bytes[0].data() + 80, 80), 0);
  EXPECT_EQ(s->rows(), (RowRange{10, 20}));
  EXPECT_EQ(s->length(), SampleLength(1));
  // Past the end: clipped, and empty when wholly past.
  req.rows = RowRange{SampleLength(1) - 2, SampleLength(1) + 100};
  s = w.ds->Read(1, req);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->tensors()[1].shape, (Shape{2}));
  EXPECT_EQ(s->rows(), (RowRange{SampleLength(1) - 2, SampleLength(1)}));
  req.rows = RowRange{SampleLength(1) + 1, SampleLength(1) + 100};
  s = w.ds->Read(1, req);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->tensors()[1].nbytes, 0u);
  // Errors.
  req.rows = RowRange{20, 10};
  ExpectError(w.ds->Read(1, req).status(), StatusCode::kInvalidArgument, {"start past its stop"});
  req.rows.reset();
  req.fields = {"nope"};
  ExpectError(w.ds->Read(1, req).status(), StatusCode::kInvalidArgument, {"'nope'"});
  ExpectError(w.ds->Read(9, ReadRequest{}).status(), StatusCode::kInvalidArgument,
              {"out of range"});
  // A whole read says which rows it served.
  auto whole = w.ds->Read(1);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->rows(), (RowRange{0, SampleLength(1)}));
  EXPECT_EQ(whole->length(), SampleLength(1));
}

// An index of version 3 (no row blocks): row ranges read each field whole, checked by its field
// checksum, give the same rows, and say so once, naming `libshard upgrade`; after the upgrade
// the dataset has row blocks, the tables the writer would have written.
TEST(SliceReadTest, OlderIndexesReadFieldsWholeUntilUpgraded) {
  TempDir tmp;
  for (bool coded : {false, true}) {
    SCOPED_TRACE(coded ? "coded" : "raw");
    const fs::path dir = tmp / (coded ? "coded" : "raw");
    WriterOptions o = FastOptions();
    if (coded) o.field_codecs = FieldCodecPolicy::kAuto;
    Written w = WriteSliceDataset(dir, 3, o, coded);
    ASSERT_NE(w.ds, nullptr);
    std::vector<std::optional<std::string>> tables;
    for (uint64_t i = 0; i < 3; ++i) tables.push_back(*DatasetAccess::BlockTableBytes(*w.ds, i));
    w.ds.reset();
    RewriteIndexAsV3(dir);
    auto ds = Dataset::Open(dir.string());
    ASSERT_TRUE(ds.ok());
    EXPECT_EQ((*ds)->index_version(), 3u);
    EXPECT_FALSE((*ds)->has_row_blocks());
    ::testing::internal::CaptureStderr();
    for (uint64_t i = 0; i < 3; ++i)
      for (RowRange rows : {RowRange{5, 40}, RowRange{90, 95}}) ExpectRowRangeRead(**ds, i, rows);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("libshard upgrade " + dir.string()), std::string::npos) << err;
    EXPECT_EQ(err.find("libshard:"), err.rfind("libshard:")) << "said more than once: " << err;
    auto plan = DatasetAccess::PlanSlice(**ds, 2, std::vector<size_t>{2}, RowRange{5, 6}, true);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ((*plan)->fields[0].mode, internal::SliceMode::kWhole);
    ds->reset();
    {
      codec::ScopedWriterRowBlockBytes blocks(kBlockBytes);  // the rule upgrade applies
      auto upgraded = UpgradeIndex(dir.string());
      ASSERT_TRUE(upgraded.ok()) << upgraded.status().ToString();
      EXPECT_TRUE(*upgraded);
    }
    ds = Dataset::Open(dir.string());
    ASSERT_TRUE(ds.ok());
    EXPECT_TRUE((*ds)->has_row_blocks());
    for (uint64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(*DatasetAccess::BlockTableBytes(**ds, i), tables[i]) << i;
      EXPECT_TRUE((*ds)->Verify(i).ok());
      ExpectRowRangeRead(**ds, i, RowRange{5, 40});
    }
  }
}

// Merge and append keep index version 4: the parts' block tables are copied as they are stored
// (FORMAT.md §7), so the merged dataset's slices read by row blocks; a part without them makes
// the merge version 3 (then `libshard upgrade`).
TEST(SliceReadTest, MergeKeepsTheRowBlocksOfItsParts) {
  TempDir tmp;
  Written a = WriteSliceDataset(tmp / "a", 2, FastOptions(), false);
  Written b = WriteSliceDataset(tmp / "b", 3, FastOptions(), false);
  ASSERT_NE(a.ds, nullptr);
  ASSERT_NE(b.ds, nullptr);
  MergeOptions m;
  ASSERT_TRUE(MergeDatasets((tmp / "ab").string(), {(tmp / "a").string(), (tmp / "b").string()},
                            m).ok());
  auto ab = Dataset::Open((tmp / "ab").string());
  ASSERT_TRUE(ab.ok());
  EXPECT_EQ((*ab)->index_version(), 4u);
  EXPECT_TRUE((*ab)->has_row_blocks());
  for (uint64_t i = 0; i < 5; ++i) {
    const Dataset& from = i < 2 ? *a.ds : *b.ds;
    EXPECT_EQ(*DatasetAccess::BlockTableBytes(**ab, i),
              *DatasetAccess::BlockTableBytes(from, i < 2 ? i : i - 2));
    ExpectRowRangeRead(**ab, i, RowRange{40, 90});
  }
  a.ds.reset();
  RewriteIndexAsV3(tmp / "a");
  ASSERT_TRUE(MergeDatasets((tmp / "ab3").string(),
                            {(tmp / "a").string(), (tmp / "b").string()}, m).ok());
  auto ab3 = Dataset::Open((tmp / "ab3").string());
  ASSERT_TRUE(ab3.ok());
  EXPECT_EQ((*ab3)->index_version(), 3u);
  EXPECT_TRUE((*ab3)->has_field_checksums());
  ExpectRowRangeRead(**ab3, 3, RowRange{40, 90});
}

// ---- The loader's row-range layout (loader/read_layout.h) ----

// Reads the layout's page-aligned reads from the shard into one slot, as the loader's engine
// would, and finishes it.
Result<Sample> ReadSliceLayout(const Dataset& ds, uint64_t i, const ReadLayout& r) {
  const SampleLocation loc = ds.location(i);
  auto slot = std::shared_ptr<std::byte[]>(new (std::align_val_t{4096}) std::byte[r.read_length],
                                           [](std::byte* p) { operator delete[](p, std::align_val_t{4096}); });
  std::shared_ptr<std::byte[]> decoded;
  if (r.decoded_bytes > 0)
    decoded = std::shared_ptr<std::byte[]>(new (std::align_val_t{64}) std::byte[r.decoded_bytes],
                                           [](std::byte* p) { operator delete[](p, std::align_val_t{64}); });
  const int fd = ::open(ds.shards()[loc.shard].path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("open");
  for (const ReadExtent& e : r.extents) {
    EXPECT_EQ(e.file_offset % 4096, 0u);
    EXPECT_EQ(e.length % 4096, 0u);
    EXPECT_EQ(e.slot_offset % 4096, 0u);
    // Sub-reads of at most 8 KiB, as the scheduler issues them.
    for (uint64_t off = e.slot_offset; off < e.slot_offset + e.length;) {
      const ReadLayout::SubRead sub = r.SubReadAt(off, 8192);
      EXPECT_EQ(r.SlotOffsetOf(sub.file_offset), off);
      const ssize_t got = ::pread(fd, slot.get() + off, sub.length,
                                  static_cast<off_t>(sub.file_offset));
      EXPECT_EQ(got, static_cast<ssize_t>(sub.length));
      off += sub.length;
    }
  }
  ::close(fd);
  return FinishSliceRead(ds, loc, r, slot.get(), decoded.get(),
                         std::make_shared<std::pair<std::shared_ptr<std::byte[]>,
                                                    std::shared_ptr<std::byte[]>>>(slot, decoded));
}

TEST(SliceReadLayoutTest, ASliceReadGivesTheRowsOfTheWholeRead) {
  for (const char* name : {"raw", "auto (planes2, zstd per field)", "zstd sample"}) {
    SCOPED_TRACE(name);
    TempDir tmp;
    WriterOptions o = FastOptions();
    if (std::string_view(name) == "auto (planes2, zstd per field)") o.field_codecs = FieldCodecPolicy::kAuto;
    if (std::string_view(name) == "zstd sample") o.compression = Compression::kZstd;
    Written w = WriteSliceDataset(tmp / "ds", 4, o, std::string_view(name) != "raw");
    ASSERT_NE(w.ds, nullptr);
    for (uint64_t i = 0; i < w.ds->size(); ++i) {
      for (RowRange rows : Windows(SampleLength(i))) {
        SCOPED_TRACE("sample " + std::to_string(i) + " rows [" + std::to_string(rows.start) +
                     ", " + std::to_string(rows.stop) + ")");
        for (PartialCheck check : {PartialCheck::kFields, PartialCheck::kNone}) {
          auto r = PlanSliceRead(*w.ds, i, w.ds->location(i), {}, rows, check);
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          ASSERT_NE(r->slice, nullptr);
          auto got = ReadSliceLayout(*w.ds, i, *r);
          ASSERT_TRUE(got.ok()) << got.status().ToString();
          ReadRequest req;
          req.rows = rows;
          auto want = w.ds->Read(i, req);
          ASSERT_TRUE(want.ok());
          ASSERT_EQ(got->tensors().size(), want->tensors().size());
          for (size_t f = 0; f < want->tensors().size(); ++f) {
            const TensorView& a = got->tensors()[f];
            const TensorView& b = want->tensors()[f];
            EXPECT_EQ(a.shape, b.shape) << b.name;
            ASSERT_EQ(a.nbytes, b.nbytes) << b.name;
            EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 64, 0u) << b.name;
            EXPECT_TRUE(a.nbytes == 0 || std::memcmp(a.data, b.data, a.nbytes) == 0) << b.name;
          }
          EXPECT_EQ(got->rows(), want->rows());
        }
      }
    }
  }
}

// With row blocks, a checked max_len prefix of a local dataset reads each served field's prefix
// plus at most one block (and pages), not the rest of the field (FORMAT.md §3.10.3); without
// them (read_layout_test.cc) each field is read to its end.
TEST(SliceReadLayoutTest, AMaxLenPrefixReadsThePrefixPlusOneBlock) {
  TempDir tmp;
  Written w = WriteSliceDataset(tmp / "ds", 7, FastOptions(), false);
  ASSERT_NE(w.ds, nullptr);
  const uint64_t max_len = 90;
  for (uint64_t i = 1; i < w.ds->size(); ++i) {
    const SampleLocation loc = w.ds->location(i);
    const ReadLayout r = PlanRead(*w.ds, i, loc, {}, max_len, PartialCheck::kFields);
    ASSERT_NE(r.slice, nullptr);
    // Per field with a sequence dimension: the prefix's bytes plus a block (and two pages for
    // the rounding of each extent); the field without one whole.
    uint64_t bound = 5 * 2 * 4096 + 2 * 4096;
    for (const internal::FieldSlice& f : r.slice->fields)
      bound += f.nbytes + (f.end - f.begin < f.seq ? f.outer * std::max(kBlockBytes, f.token_bytes) : 0);
    EXPECT_LE(r.read_length, bound) << "sample " << i;
    if (SampleLength(i) > 700) EXPECT_LT(r.read_length, loc.stored_size / 2) << "sample " << i;
    auto got = ReadSliceLayout(*w.ds, i, r);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ReadRequest req;
    req.rows = RowRange{0, max_len};
    auto want = w.ds->Read(i, req);
    ASSERT_TRUE(want.ok());
    for (size_t f = 0; f < want->tensors().size(); ++f)
      EXPECT_EQ(std::memcmp(got->tensors()[f].data, want->tensors()[f].data,
                            want->tensors()[f].nbytes),
                0);
    EXPECT_EQ(got->rows(), (RowRange{0, max_len}));
  }
}

}  // namespace
}  // namespace libshard::testing
