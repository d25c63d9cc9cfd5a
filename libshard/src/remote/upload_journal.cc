// The upload journal (upload_journal.h).
#include "remote/upload_journal.h"

#include <charconv>
#include <vector>

namespace libshard::remote {

UploadJournal ParseUploadJournal(std::string_view text) {
  UploadJournal out;
  const size_t complete = text.rfind('\n');
  if (complete == std::string_view::npos) return out;  // a kill may tear the last line
  text = text.substr(0, complete + 1);
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = text.find('\n', pos);
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    std::vector<std::string_view> f;
    for (size_t p = 0; p < line.size() && f.size() <= 4;) {
      while (p < line.size() && (line[p] == ' ' || line[p] == '\t' || line[p] == '\r')) ++p;
      size_t q = p;
      while (q < line.size() && line[q] != ' ' && line[q] != '\t' && line[q] != '\r') ++q;
      if (q > p) f.push_back(line.substr(p, q - p));
      p = q;
    }
    if (f.size() != 4 || (f[0] != "upload" && f[0] != "done")) continue;
    const std::string_view name = f[1];
    if (name.empty() || name.size() > 255 || name == "." || name == ".." ||
        name.find('/') != std::string_view::npos || f[3].size() > kMaxJournalField)
      continue;
    uint64_t size = 0;
    const auto [ptr, ec] = std::from_chars(f[2].data(), f[2].data() + f[2].size(), size);
    if (ec != std::errc() || ptr != f[2].data() + f[2].size()) continue;
    (f[0] == "upload" ? out.uploads : out.done)[std::string(name)] =
        UploadRecord{size, std::string(f[3])};
  }
  return out;
}

}  // namespace libshard::remote
