// libFuzzer target for every parser of untrusted dataset bytes (FORMAT.md §2.2, §3, §6): the
// index, the manifest, the journal, per-sample metadata and the shard header. The first input byte
// picks the parser; for the index, the checksum is recomputed so the fuzzer reaches the checks
// behind it. Whatever a parser accepts is then used, to catch accessors that trust bad data.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/bytes.h"
#include "format/checksum.h"
#include "format/index_format.h"
#include "format/journal.h"
#include "format/manifest.h"
#include "format/metadata_codec.h"
#include "format/shard_format.h"

using namespace libshard;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = data[0] % 5;
  std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  auto* p = reinterpret_cast<std::byte*>(bytes.data());
  switch (which) {
    case 0: {
      if (bytes.size() >= format::kIndexHeaderSize)
        format::PutU64(p + format::kIndexChecksumOffset,
                       format::Xxh3WithHole({p, bytes.size()}, format::kIndexChecksumOffset));
      auto v = format::IndexView::Parse({p, bytes.size()}, "fuzz.lsi");
      if (v.ok())
        for (uint64_t i = 0; i < v->sample_count(); ++i) {
          format::IndexSample s = v->Entry(i);
          Metadata m;
          if (!format::DecodeMetadata(v->metadata_bytes(i), &m).ok()) __builtin_trap();
          for (size_t f = 0; f < v->schema().fields.size(); ++f) (void)v->shape(i, f);
        }
      break;
    }
    case 1: {
      auto m = format::ParseManifest(bytes, "fuzz.json");
      if (m.ok()) (void)format::EncodeManifest(*m);
      break;
    }
    case 2: {
      auto j = format::ParseJournal({p, bytes.size()}, "fuzz.lsj");
      if (j.ok() && j->valid_size > bytes.size()) __builtin_trap();
      break;
    }
    case 3: {
      Metadata m;
      if (format::DecodeMetadata({p, bytes.size()}, &m).ok()) {
        std::string again;
        if (format::EncodeMetadata(m, &again).ok() && again != bytes && !bytes.empty() &&
            !m.empty())
          __builtin_trap();  // decoding then encoding must give the same bytes back
      }
      break;
    }
    case 4:
      (void)format::CheckShardHeader({p, bytes.size()}, "fuzz.lss");
      break;
  }
  return 0;
}
