// The writer's journal `_journal.lsj` (FORMAT.md §6). Bytes only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "format/index_common.h"
#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard::format {

inline constexpr char kJournalName[] = "_journal.lsj";

// The header entry (kind 1) for `schema`. `codecs` is empty (every field raw: a version 1
// journal) or one codec id per field (a version 2 journal, §6).
// `field_checksums`: header flags bit 0, every samples entry then carries each sample's field
// checksums (§6, §3.9). `block_tables` (only with field_checksums): header flags bit 1, every
// samples entry then carries each sample's block table (§6, §3.10).
std::string EncodeJournalHeader(const Schema& schema, std::span<const uint8_t> codecs = {},
                                bool field_checksums = false, bool block_tables = false);
// A samples entry (kind 2) describing `samples`, the first of which is sample `first`; `codecs`
// as given to the header (each sample's field_stored_sizes is then per field), and so are
// `field_checksums` (each sample's field_checksums then has one per field) and `block_tables`
// (each sample's block_table, "" when it has none).
std::string EncodeJournalSamples(const Schema& schema, uint64_t first,
                                 std::span<const IndexSample> samples,
                                 std::span<const uint8_t> codecs = {},
                                 bool field_checksums = false, bool block_tables = false);

// The header entry's contents (§6).
struct JournalHeader {
  Schema schema;
  std::vector<uint8_t> codecs;  // empty for a version 1 journal (every field raw)
  bool field_checksums = false;  // header flags bit 0: the samples carry field checksums
  bool block_tables = false;     // header flags bit 1: the samples carry block tables
  bool operator==(const JournalHeader&) const = default;
};

// The entry framing (§6): u32 magic, u32 kind, u64 payload_size, payload, u64 xxh3.
inline constexpr uint64_t kJournalEntryOverhead = 24;

// Incremental reading, for a journal read while it is written (§6.1) and by ParseJournal. Each
// reads the one entry at the start of `bytes` and returns the bytes it spans, or 0 when that
// entry is not there (incomplete, wrong magic or kind, checksum mismatch, or a payload that does
// not parse: a torn or corrupt tail, to be read again later or ignored). A header of a version
// or with flags this reader does not know is Unsupported.
Result<uint64_t> ParseJournalHeaderEntry(std::span<const std::byte> bytes, const std::string& file,
                                         JournalHeader* out);
// A samples entry (kind 2) whose `first` must be `next`; appends its samples to `out` (nothing
// when it returns 0). The samples are as written, not checked: CheckJournalSample checks one.
uint64_t ParseJournalSamplesEntry(std::span<const std::byte> bytes, const JournalHeader& header,
                                  uint64_t next, std::vector<IndexSample>* out);

// Checks one journaled sample as a record of an index is checked (§3.3, §3.8.7, §5): offset
// aligned and past the shard header, known flags, dims giving the canonical layout (tensor
// offsets and sizes, raw_size, length), the stored layout of the header's codecs, the limits,
// metadata and source path, and (block_tables) the block table against the dims (§3.10.2).
// Corruption saying what is wrong (the caller names the file and the sample).
[[nodiscard]] Status CheckJournalSample(const JournalHeader& header, const IndexSample& sample);

struct JournalContents {
  Schema schema;
  std::vector<uint8_t> codecs;  // empty for a version 1 journal (every field raw)
  bool field_checksums = false;  // header flags bit 0: the samples carry field checksums
  bool block_tables = false;     // header flags bit 1: the samples carry block tables
  std::vector<IndexSample> samples;
  uint64_t valid_size = 0;  // bytes up to the end of the last good entry
};

// Parses a journal, stopping at a torn or corrupt tail (§6). Fails only when the header entry is
// missing or invalid; `file` names the journal in messages.
Result<JournalContents> ParseJournal(std::span<const std::byte> bytes, const std::string& file);

}  // namespace libshard::format
