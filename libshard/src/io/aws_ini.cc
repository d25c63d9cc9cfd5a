// The AWS shared config and credentials files (aws_ini.h).
#include "io/aws_ini.h"

#include <cctype>

#include "io/s3_internal.h"

namespace libshard::io {

AwsIni ParseAwsIni(std::string_view text) {
  using s3_internal::Lower;
  using s3_internal::Trim;
  AwsIni out;
  std::string section, parent;
  size_t lines = 0;
  for (size_t pos = 0; pos < text.size() && lines < kMaxIniLines; ++lines) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string line(text.substr(pos, end - pos));
    pos = end + 1;
    const bool indented = !line.empty() && std::isspace(static_cast<unsigned char>(line[0]));
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']' && t.size() >= 2) {
      section = Trim(t.substr(1, t.size() - 2));
      parent.clear();
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    std::string key = Lower(Trim(t.substr(0, eq)));
    std::string value = Trim(t.substr(eq + 1));
    if (indented && !parent.empty()) {
      out[section][parent + "." + key] = value;
      continue;
    }
    parent = value.empty() ? key : std::string();
    if (!value.empty()) out[section][key] = value;
  }
  return out;
}

}  // namespace libshard::io
