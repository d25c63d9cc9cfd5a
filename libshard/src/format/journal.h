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
// checksums (§6, §3.9).
std::string EncodeJournalHeader(const Schema& schema, std::span<const uint8_t> codecs = {},
                                bool field_checksums = false);
// A samples entry (kind 2) describing `samples`, the first of which is sample `first`; `codecs`
// as given to the header (each sample's field_stored_sizes is then per field), and so is
// `field_checksums` (each sample's field_checksums then has one per field).
std::string EncodeJournalSamples(const Schema& schema, uint64_t first,
                                 std::span<const IndexSample> samples,
                                 std::span<const uint8_t> codecs = {},
                                 bool field_checksums = false);

struct JournalContents {
  Schema schema;
  std::vector<uint8_t> codecs;  // empty for a version 1 journal (every field raw)
  bool field_checksums = false;  // header flags bit 0: the samples carry field checksums
  std::vector<IndexSample> samples;
  uint64_t valid_size = 0;  // bytes up to the end of the last good entry
};

// Parses a journal, stopping at a torn or corrupt tail (§6). Fails only when the header entry is
// missing or invalid; `file` names the journal in messages.
Result<JournalContents> ParseJournal(std::span<const std::byte> bytes, const std::string& file);

}  // namespace libshard::format
