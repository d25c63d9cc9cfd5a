// libFuzzer target for the upload journal of s3:// writes (remote/upload_journal.h): whatever
// upload.journal holds after a crash or damage. Checks that every entry names a plain file and
// stays within the field bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "remote/upload_journal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace libshard::remote;
  const UploadJournal j =
      ParseUploadJournal(std::string_view(reinterpret_cast<const char*>(data), size));
  for (const auto* m : {&j.uploads, &j.done})
    for (const auto& [name, rec] : *m) {
      if (name.empty() || name.size() > 255 || name.find('/') != std::string::npos || name == "." ||
          name == "..")
        __builtin_trap();
      if (rec.value.empty() || rec.value.size() > kMaxJournalField) __builtin_trap();
    }
  return 0;
}
