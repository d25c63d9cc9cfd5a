// libFuzzer target for the writer's journal (FORMAT.md §6): ParseJournal and the invariants a
// resuming writer relies on (a valid prefix inside the input, samples shaped by the schema), and
// a follower's reading of it (§6.1): the entry-by-entry parse agrees with ParseJournal, and
// CheckJournalSample accepts only samples whose layout holds.
//
// Input: one flag byte, then the journal. Flag bit 0 clear: every complete entry's xxh3 is
// recomputed so mutations reach the payload checks behind it; set: parsed as it is.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/journal.h"
#include "format/payload.h"

namespace {

// Rewrites the trailing xxh3 of each complete entry (u32 magic, u32 kind, u64 payload_size,
// payload, u64 xxh3 over the first 16 + payload_size bytes).
void FixChecksums(std::vector<std::byte>& b) {
  using namespace libshard::format;
  size_t pos = 0;
  while (b.size() - pos >= 24) {
    const uint64_t payload = GetU64(b.data() + pos + 8);
    if (payload > b.size() - pos - 24) return;
    PutU64(b.data() + pos + 16 + payload, Xxh3(b.data() + pos, 16 + payload));
    pos += 24 + payload;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard;
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1),
                               reinterpret_cast<const std::byte*>(data + size));
  if ((flags & 1) == 0) FixChecksums(bytes);
  auto j = format::ParseJournal(bytes, "fuzz.lsj");
  if (!j.ok()) return 0;
  if (j->valid_size > bytes.size() || !j->schema.Validate().ok()) __builtin_trap();
  if (!j->codecs.empty() && j->codecs.size() != j->schema.fields.size()) __builtin_trap();
  for (uint64_t i = 0; i < j->samples.size(); ++i) {
    const format::IndexSample& s = j->samples[i];
    if (s.dims.size() != j->schema.DimsPerSample() ||
        s.tensor_offsets.size() != j->schema.fields.size() ||
        s.tensor_sizes.size() != j->schema.fields.size() ||
        // Version 2 (field codecs): one stored size per field, none for version 1.
        s.field_stored_sizes.size() != (j->codecs.empty() ? 0 : j->schema.fields.size()))
      __builtin_trap();
  }
  // The follower's path: entry by entry, as a journal being written is read (follow/).
  format::JournalHeader header;
  auto used = format::ParseJournalHeaderEntry(bytes, "fuzz.lsj", &header);
  if (!used.ok() || *used == 0) __builtin_trap();  // ParseJournal found it
  uint64_t pos = *used;
  std::vector<format::IndexSample> samples;
  while (pos < bytes.size()) {
    const uint64_t n = format::ParseJournalSamplesEntry(std::span(bytes).subspan(pos), header,
                                                        samples.size(), &samples);
    if (n == 0) break;
    pos += n;
  }
  if (pos != j->valid_size || samples.size() != j->samples.size()) __builtin_trap();
  for (const format::IndexSample& s : samples) {
    if (!format::CheckJournalSample(header, s).ok()) continue;
    format::PayloadLayout layout;
    if (!format::ComputeLayout(header.schema, s.dims, &layout).ok() ||
        layout.raw_size != s.record.raw_size || s.record.offset % 4096 != 0)
      __builtin_trap();
  }
  return 0;
}
