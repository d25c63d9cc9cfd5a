// libFuzzer target for the writer's journal (FORMAT.md §6): ParseJournal and the invariants a
// resuming writer relies on (a valid prefix inside the input, samples shaped by the schema).
//
// Input: one flag byte, then the journal. Flag bit 0 clear: every complete entry's xxh3 is
// recomputed so mutations reach the payload checks behind it; set: parsed as it is.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/journal.h"

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
  return 0;
}
