// The index (index.h): the encoder (FORMAT.md §3.8, §3.9, §3.10).
#include "format/index.h"

#include <algorithm>
#include <bit>
#include <unordered_set>

#include "format/block_table.h"
#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index_internal.h"
#include "format/index_records.h"
#include "format/metadata_codec.h"
#include "format/payload.h"
#include "format/shard_format.h"

namespace libshard::format {

using index_internal::WidthOf;
using index_internal::PutUN;
using index_internal::Align8;
using index_internal::StoredSize;

std::string EncodeIndex(const Schema& schema, const std::vector<IndexShard>& shards,
                          const std::vector<IndexSample>& samples,
                          std::span<const FieldCodec> codecs, uint32_t block_samples,
                          uint32_t index_version) {
  const uint64_t n = samples.size();
  const size_t f_count = schema.fields.size();
  bool field_sums = index_version >= kIndexVersion3;  // §3.9: only when every sample has them
  for (const IndexSample& s : samples)
    field_sums = field_sums && s.field_checksums.size() == f_count;
  // §3.10: version 4 only when every sample has a block table (and field checksums).
  bool tables = field_sums && index_version >= kIndexVersion4;
  for (const IndexSample& s : samples) tables = tables && s.block_table.has_value();
  // Each sample's table offset within the tables part: sample order, back to back.
  std::vector<uint64_t> table_at(tables ? n : 0);
  uint64_t tables_size = 0;
  uint8_t table_offset_width = 0, table_size_width = 0;
  for (uint64_t i = 0; i < table_at.size(); ++i) {
    const uint64_t size = samples[i].block_table->size();
    table_at[i] = size == 0 ? 0 : tables_size;
    tables_size += size;
    table_offset_width = std::max(table_offset_width, WidthOf(table_at[i]));
    table_size_width = std::max(table_size_width, WidthOf(size));
  }
  const uint64_t d = schema.DimsPerSample();
  std::vector<FieldCodec> codec(f_count);
  for (size_t f = 0; f < f_count && f < codecs.size(); ++f) codec[f] = codecs[f];
  const int32_t lf = schema.length_field;

  // Dims: constant, the length, or a column (§3.8.3).
  std::vector<uint64_t> field_dim_start(f_count);
  int64_t length_dim = -1;
  for (size_t f = 0, j = 0; f < f_count; j += schema.fields[f].rank, ++f) {
    field_dim_start[f] = j;
    if (static_cast<int32_t>(f) == lf) length_dim = static_cast<int64_t>(j) + schema.fields[f].seq_dim;
  }
  std::vector<DimKind> kind(d, DimKind::kConstant);
  std::vector<uint64_t> value(d, 0);
  std::vector<uint8_t> dim_width(d, 0);
  for (uint64_t j = 0; j < d; ++j) {
    if (static_cast<int64_t>(j) == length_dim) {
      kind[j] = DimKind::kLength;
      continue;
    }
    bool constant = true, is_length = lf >= 0;
    for (const IndexSample& s : samples) {
      constant = constant && s.dims[j] == samples.front().dims[j];
      is_length = is_length && s.dims[j] == s.record.length;
      if (!constant && !is_length) break;
    }
    if (constant) {
      value[j] = n ? samples.front().dims[j] : 0;
    } else if (is_length) {
      kind[j] = DimKind::kLength;
    } else {
      kind[j] = DimKind::kColumn;
      for (const IndexSample& s : samples) dim_width[j] = std::max(dim_width[j], WidthOf(s.dims[j]));
    }
  }

  // Column widths: the fewest bytes that hold every sample's value.
  std::array<uint8_t, kBaseColumns> width{};
  width[kColChecksum] = 8;
  std::vector<uint8_t> stored_width(f_count, 0);
  uint8_t length_width = 0;
  bool derived_stored = true;
  PayloadLayout layout;
  for (const IndexSample& s : samples) {
    const SampleRecord& r = s.record;
    width[kColShard] = std::max(width[kColShard], WidthOf(r.shard));
    width[kColOffsetPages] = std::max(width[kColOffsetPages], WidthOf(r.offset / kSampleAlignment));
    width[kColStoredSize] = std::max(width[kColStoredSize], WidthOf(r.stored_size));
    width[kColFlags] = std::max(width[kColFlags], WidthOf(r.flags));
    width[kColSourceBytes] = std::max(width[kColSourceBytes], WidthOf(r.source_bytes));
    width[kColSourceMtime] =
        std::max(width[kColSourceMtime], WidthOf(static_cast<uint64_t>(r.source_mtime_ns)));
    width[kColSourceHash] = std::max(width[kColSourceHash], WidthOf(r.source_hash));
    if (lf >= 0) length_width = std::max(length_width, WidthOf(r.length));
    for (size_t f = 0; f < f_count; ++f)
      if (codec[f].codec != 0)
        stored_width[f] = std::max(stored_width[f], WidthOf(StoredSize(s, f)));
    if (derived_stored) {
      uint64_t total = 0;
      derived_stored = ComputeLayout(schema, s.dims, &layout).ok() &&
                       ComputeStoredLayout(codec, layout.sizes, s.field_stored_sizes, nullptr,
                                           &total) &&
                       total == r.stored_size;
    }
  }
  if (derived_stored) width[kColStoredSize] = 0;
  for (size_t f = 0; f < f_count; ++f)
    if (codec[f].codec != 0) stored_width[f] = std::max<uint8_t>(stored_width[f], 1);

  // Blocks: records, then the path area and the metadata area (§3.8.6). The area end columns'
  // widths need the areas, so the areas are built first.
  const uint64_t k_count = (n + block_samples - 1) / block_samples;
  std::vector<std::string> path_areas(k_count), meta_areas(k_count);
  std::vector<std::vector<uint64_t>> path_ends(k_count), meta_ends(k_count);
  for (uint64_t b = 0; b < k_count; ++b) {
    const uint64_t first = b * block_samples, count = std::min<uint64_t>(block_samples, n - first);
    std::string_view prev;
    for (uint64_t k = 0; k < count; ++k) {
      const IndexSample& s = samples[first + k];
      std::string& pa = path_areas[b];
      if (k % kPathRestartInterval == 0) prev = {};
      if (!s.source_path.empty()) {
        size_t shared = 0;
        const size_t limit = std::min({prev.size(), s.source_path.size() - 1, size_t{65535}});
        while (shared < limit && prev[shared] == s.source_path[shared]) ++shared;
        PutUN(&pa, shared, 2);
        pa.append(s.source_path, shared);
      }
      prev = s.source_path;
      path_ends[b].push_back(pa.size());
      meta_areas[b].append(s.metadata);
      meta_ends[b].push_back(meta_areas[b].size());
      width[kColPathEnd] = std::max(width[kColPathEnd], WidthOf(pa.size()));
      width[kColMetaEnd] = std::max(width[kColMetaEnd], WidthOf(meta_areas[b].size()));
    }
  }

  // Strings: field names, then shard names.
  std::string strings;
  std::vector<uint64_t> name_at(f_count), shard_name_at(shards.size());
  for (size_t f = 0; f < f_count; ++f) {
    name_at[f] = strings.size();
    strings.append(schema.fields[f].name);
  }
  for (size_t k = 0; k < shards.size(); ++k) {
    shard_name_at[k] = strings.size();
    strings.append(shards[k].name);
  }
  std::vector<uint64_t> counts(shards.size(), 0);
  uint64_t total_raw = 0;
  for (const IndexSample& s : samples) {
    if (s.record.shard < counts.size()) ++counts[s.record.shard];
    total_raw += s.record.raw_size;
  }
  bool uids = false;
  for (const IndexShard& sh : shards) uids = uids || sh.uid != 0;

  // Head: the header (written last, when its sizes and checksums are known), the field, dim and
  // shard tables, the block directory, the strings.
  std::string out(kIndexHeaderSize, '\0');
  auto append = [&out](const auto& record, uint64_t size) {
    out.resize(out.size() + size);
    record.EncodeTo(reinterpret_cast<std::byte*>(out.data() + out.size() - size));
  };
  for (size_t f = 0; f < f_count; ++f) {
    const Field& field = schema.fields[f];
    FieldRecord r;
    r.dtype = static_cast<uint32_t>(field.dtype);
    r.rank = static_cast<uint16_t>(field.rank);
    r.codec = codec[f].codec;
    r.seq_dim = field.seq_dim;
    r.name_size = static_cast<uint16_t>(field.name.size());
    r.stored_width = stored_width[f];
    r.name_offset = name_at[f];
    if (codec[f].codec != 0) r.codec_params = codec[f].params;
    append(r, kFieldRecordSize);
  }
  for (uint64_t j = 0; j < d; ++j) {
    DimRecord r;
    r.kind = static_cast<uint8_t>(kind[j]);
    r.width = dim_width[j];
    r.value = value[j];
    append(r, kDimRecordSize);
  }
  for (size_t k = 0; k < shards.size(); ++k) {
    ShardRecord r;
    r.name_offset = shard_name_at[k];
    r.name_size = shards[k].name.size();
    r.file_size = shards[k].file_size;
    r.sample_count = counts[k];
    r.uid = shards[k].uid;
    append(r, kShardRecordSize);
  }
  const uint64_t directory_at = out.size();
  out.resize(out.size() + kBlockEntrySize * k_count);
  out.append(strings);
  out.resize(Align8(out.size()), '\0');
  const uint64_t head_size = out.size();

  // Lengths.
  for (const IndexSample& s : samples) PutUN(&out, s.record.length, length_width);
  out.resize(Align8(out.size()), '\0');
  const uint64_t lengths_checksum =
      Xxh3(AsBytes(out) + head_size, out.size() - head_size);

  // Blocks.
  for (uint64_t b = 0; b < k_count; ++b) {
    const uint64_t begin = out.size();
    const uint64_t first = b * block_samples, count = std::min<uint64_t>(block_samples, n - first);
    for (uint64_t k = 0; k < count; ++k) {
      const IndexSample& s = samples[first + k];
      const SampleRecord& r = s.record;
      PutUN(&out, r.shard, width[kColShard]);
      PutUN(&out, r.offset / kSampleAlignment, width[kColOffsetPages]);
      PutUN(&out, r.stored_size, width[kColStoredSize]);
      PutUN(&out, r.checksum, width[kColChecksum]);
      PutUN(&out, r.flags, width[kColFlags]);
      PutUN(&out, r.source_bytes, width[kColSourceBytes]);
      PutUN(&out, static_cast<uint64_t>(r.source_mtime_ns), width[kColSourceMtime]);
      PutUN(&out, r.source_hash, width[kColSourceHash]);
      PutUN(&out, path_ends[b][k], width[kColPathEnd]);
      PutUN(&out, meta_ends[b][k], width[kColMetaEnd]);
      for (uint64_t j = 0; j < d; ++j)
        if (kind[j] == DimKind::kColumn) PutUN(&out, s.dims[j], dim_width[j]);
      for (size_t f = 0; f < f_count; ++f)
        if (codec[f].codec != 0) PutUN(&out, StoredSize(s, f), stored_width[f]);
      if (field_sums)
        for (size_t f = 0; f < f_count; ++f)
          PutUN(&out, s.field_checksums[f], kFieldChecksumWidth);
      if (tables) {
        const std::string& t = *s.block_table;
        PutUN(&out, table_at[first + k], table_offset_width);
        PutUN(&out, t.size(), table_size_width);
        PutUN(&out, t.empty() ? 0 : BlockTableChecksum({AsBytes(t), t.size()}),
              kFieldChecksumWidth);
      }
    }
    out.append(path_areas[b]);
    out.append(meta_areas[b]);
    auto* e = reinterpret_cast<std::byte*>(out.data() + directory_at + kBlockEntrySize * b);
    PutU64(e, begin);
    PutU64(e + 8, Xxh3(AsBytes(out) + begin, out.size() - begin));
  }

  // Tables (§3.10.1).
  const uint64_t tables_offset = out.size();
  if (tables)
    for (const IndexSample& s : samples) out.append(*s.block_table);

  IndexHeader header;
  header.version = tables                               ? kIndexVersion4
                   : index_version >= kIndexVersion3 ? kIndexVersion3
                                                       : kIndexVersion2;
  header.flags = (uids ? kIndexFlagShardUids : 0) | (field_sums ? kIndexFlagFieldChecksums : 0);
  header.sample_count = n;
  header.field_count = static_cast<uint32_t>(f_count);
  header.shard_count = static_cast<uint32_t>(shards.size());
  header.block_samples = block_samples;
  header.length_field = lf;
  header.strings_size = strings.size();
  header.lengths_checksum = lengths_checksum;
  header.file_size = out.size();
  header.total_raw_bytes = total_raw;
  header.length_width = length_width;
  header.column_widths = width;
  header.dims_per_sample = static_cast<uint32_t>(d);
  if (tables) {
    header.tables_offset = tables_offset;
    header.table_offset_width = table_offset_width;
    header.table_size_width = table_size_width;
  }
  auto* h = reinterpret_cast<std::byte*>(out.data());
  header.EncodeTo(h);  // checksum 0: the checksum's own bytes count as zero (§3.8.2)
  header.checksum = Xxh3WithHole({h, head_size}, kIndexChecksumOffset);
  header.EncodeTo(h);
  return out;
}

}  // namespace libshard::format
