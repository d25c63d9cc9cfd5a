// The shared part of the option tables (libshard/option_table.h): values, wording, text parsing.
#include "libshard/option_table.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "libshard_support/units.h"

namespace libshard {

OptionValue OptionValue::Bool(bool b) {
  OptionValue v;
  v.kind = Kind::kBool;
  v.boolean = b;
  return v;
}
OptionValue OptionValue::Integer(uint64_t magnitude, bool negative) {
  OptionValue v;
  v.kind = Kind::kInteger;
  v.integer = magnitude;
  v.negative = negative && magnitude != 0;
  return v;
}
OptionValue OptionValue::Number(double d) {
  OptionValue v;
  v.kind = Kind::kNumber;
  v.number = d;
  return v;
}
OptionValue OptionValue::Text(std::string s) {
  OptionValue v;
  v.kind = Kind::kText;
  v.text = std::move(s);
  return v;
}
OptionValue OptionValue::TextList(std::vector<std::string> list) {
  OptionValue v;
  v.kind = Kind::kTextList;
  v.texts = std::move(list);
  return v;
}
OptionValue OptionValue::NumberMap(std::vector<std::pair<std::string, double>> map) {
  OptionValue v;
  v.kind = Kind::kNumberMap;
  v.numbers = std::move(map);
  return v;
}

OptionValue OptionValue::Group(std::vector<OptionEntry> entries) {
  OptionValue v;
  v.kind = Kind::kGroup;
  v.entries = std::move(entries);
  return v;
}

std::string OptionValue::Describe() const {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return boolean ? "True" : "False";
    case Kind::kInteger: return (negative ? "-" : "") + std::to_string(integer);
    case Kind::kNumber: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%g", number);
      return buf;
    }
    case Kind::kText: return "'" + text + "'";
    case Kind::kTextList: {
      std::string out = "[";
      for (size_t i = 0; i < texts.size(); ++i) out += (i ? ", '" : "'") + texts[i] + "'";
      return out + "]";
    }
    case Kind::kNumberMap: return "a dict";
    case Kind::kGroup: {
      std::string out = "{";
      for (size_t i = 0; i < entries.size(); ++i)
        out += (i ? ", " : "") + entries[i].name + ": " + entries[i].value.Describe();
      return out + "}";
    }
  }
  return "?";
}

namespace option_table {

Status Bad(std::string_view what, std::string_view spelled, std::string_view problem) {
  return Status::InvalidArgument(std::string(what) + " '" + std::string(spelled) + "' " +
                                 std::string(problem));
}

std::string Accepted(uint64_t min, uint64_t max, std::string_view unset) {
  std::string out = std::to_string(min) + ".." + std::to_string(max);
  if (!unset.empty()) out += " or None (" + std::string(unset) + ")";
  return out;
}

Status ToCount(std::string_view what, std::string_view spelled, const OptionValue& value,
               uint64_t min, uint64_t max, std::string_view unset, std::string_view doc,
               uint64_t* out) {
  const std::string use = "; use " + Accepted(min, max, unset) + " (" + std::string(doc) + ")";
  if (value.kind == OptionValue::Kind::kNone && !unset.empty()) {
    *out = 0;
    return Status::OK();
  }
  if (value.kind != OptionValue::Kind::kInteger)
    return Bad(what, spelled, "= " + value.Describe() + " is not a number" + use);
  if (value.negative || value.integer < min || value.integer > max)
    return Bad(what, spelled, "= " + value.Describe() + " is out of range" + use);
  *out = value.integer;
  return Status::OK();
}

Status ToBytes(std::string_view what, std::string_view spelled, const OptionValue& value,
               uint64_t min, uint64_t max, std::string_view doc, uint64_t* out) {
  const std::string use = "; use " + std::to_string(min) + ".." + std::to_string(max) +
                          " bytes, or a size such as '2GiB' (" + std::string(doc) + ")";
  uint64_t bytes = 0;
  if (value.kind == OptionValue::Kind::kText) {
    Result<uint64_t> parsed = ParseByteSize(value.text);
    // ParseByteSize's message quotes the text: "invalid size '2Gigs'; ...".
    if (!parsed.ok())
      return Status::InvalidArgument(std::string(what) + " '" + std::string(spelled) +
                                     "': " + parsed.status().message());
    bytes = *parsed;
  } else if (value.kind == OptionValue::Kind::kInteger && !value.negative) {
    bytes = value.integer;
  } else {
    return Bad(what, spelled, "must be a byte count, got " + value.Describe() + use);
  }
  if (bytes < min || bytes > max)
    return Bad(what, spelled, "= " + std::to_string(bytes) + " is out of range" + use);
  *out = bytes;
  return Status::OK();
}

Status ToBool(std::string_view what, std::string_view spelled, const OptionValue& value,
              bool* out) {
  // 0 and 1 too: what the CLI's shuffle=0 and Python's shuffle=args.flag (an int) mean.
  if (value.kind == OptionValue::Kind::kInteger && !value.negative && value.integer <= 1) {
    *out = value.integer == 1;
    return Status::OK();
  }
  if (value.kind != OptionValue::Kind::kBool)
    return Bad(what, spelled, "must be True or False, got " + value.Describe());
  *out = value.boolean;
  return Status::OK();
}

Status ToNumber(std::string_view what, std::string_view spelled, const OptionValue& value,
                bool non_negative, std::string_view doc, double* out) {
  double d = 0;
  if (value.kind == OptionValue::Kind::kNumber) {
    d = value.number;
  } else if (value.kind == OptionValue::Kind::kInteger) {
    d = static_cast<double>(value.integer) * (value.negative ? -1.0 : 1.0);
  } else {
    return Bad(what, spelled, "must be a number, got " + value.Describe() + " (" +
                                  std::string(doc) + ")");
  }
  if (std::isnan(d) || std::isinf(d) || (non_negative && d < 0))
    return Bad(what, spelled, value.Describe() + " must be a " +
                                  (non_negative ? "number >= 0" : "finite number") + " (" +
                                  std::string(doc) + ")");
  *out = d;
  return Status::OK();
}

Status ToText(std::string_view what, std::string_view spelled, const OptionValue& value,
              std::string* out) {
  if (value.kind != OptionValue::Kind::kText)
    return Bad(what, spelled, "must be a string, got " + value.Describe());
  *out = value.text;
  return Status::OK();
}

OptionValue FromText(OptionType type, std::string_view text) {
  if (text == "None") return OptionValue::None();
  switch (type) {
    case OptionType::kBool:
      if (text == "1" || text == "true" || text == "True") return OptionValue::Bool(true);
      if (text == "0" || text == "false" || text == "False") return OptionValue::Bool(false);
      return OptionValue::Text(std::string(text));
    case OptionType::kCount:
    case OptionType::kBytes:
    case OptionType::kNumber:
    case OptionType::kGroup: {  // a group's short form is a number (the loader's "order=2")
      const bool negative = !text.empty() && text[0] == '-';
      const std::string_view digits = negative ? text.substr(1) : text;
      uint64_t v = 0;
      const char* end = digits.data() + digits.size();
      auto [ptr, ec] = std::from_chars(digits.data(), end, v);
      if (!digits.empty() && ec == std::errc() && ptr == end)
        return OptionValue::Integer(v, negative);
      if (type == OptionType::kNumber) {
        double d = 0;
        auto [dp, dec] = std::from_chars(text.data(), text.data() + text.size(), d);
        if (!text.empty() && dec == std::errc() && dp == text.data() + text.size())
          return OptionValue::Number(d);
      }
      return OptionValue::Text(std::string(text));
    }
    case OptionType::kNames: {
      std::vector<std::string> names;
      for (std::string_view rest = text; !rest.empty();) {
        const size_t bar = rest.find('|');
        names.emplace_back(rest.substr(0, bar));
        rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
      }
      return OptionValue::TextList(std::move(names));
    }
    default:
      return OptionValue::Text(std::string(text));
  }
}

}  // namespace option_table
}  // namespace libshard
