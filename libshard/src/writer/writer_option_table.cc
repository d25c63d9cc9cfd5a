// The writer configuration's option tables (libshard/writer_config.h): one per part, each row
// declared once with how it is set, bounded and printed; WriterOptionTable composes them and
// pack's table (converters/pack/pack_option_table.cc) takes them whole.
#include <cstdio>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "libshard/option_rows.h"
#include "libshard/writer_config.h"

namespace libshard {
namespace {

using Kind = OptionValue::Kind;

// A row of a part's table and how it prints the part's value, as the row reads it back.
template <typename Part>
struct Row {
  using PartType = Part;
  OptionSpec<Part> spec;
  std::function<std::string(const Part&)> print;
};

// "4GiB", "64MiB", "8KiB" for exact multiples, else the byte count: what ParseByteSize reads.
std::string FormatSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"TiB", "GiB", "MiB", "KiB"};
  for (int i = 0; i < 4; ++i) {
    const uint64_t unit = uint64_t{1} << (10 * (4 - i));
    if (bytes != 0 && bytes % unit == 0) return std::to_string(bytes / unit) + kUnits[i];
  }
  return std::to_string(bytes);
}

std::string Quoted(const std::string& text) { return "'" + text + "'"; }

// ---- how samples are stored -------------------------------------------------------------------

Status SetCompress(std::string_view what, EncodingOptions& e, const OptionValue& v,
                   std::string_view spelled) {
  EncodingOptions parsed;  // None: no compression
  if (v.kind == Kind::kText) {
    Result<EncodingOptions> r = ParseCompression(v.text);
    // ParseCompression's message quotes the text and lists the forms.
    if (!r.ok())
      return Status::InvalidArgument(std::string(what) + " '" + std::string(spelled) +
                                     "': " + r.status().message());
    parsed = *r;
  } else if (v.kind != Kind::kNone) {
    return option_table::Bad(what, spelled, "must be a string or None, got " + v.Describe());
  }
  e.compression = parsed.compression;
  e.zstd_level = parsed.zstd_level;
  e.field_codecs = parsed.field_codecs;
  return Status::OK();
}

std::string PrintCompress(const EncodingOptions& e) {
  if (e.compression == Compression::kZstd) return "zstd:" + std::to_string(e.zstd_level);
  switch (e.field_codecs) {
    case FieldCodecPolicy::kAuto: return "auto";
    case FieldCodecPolicy::kPlanes: return "planes";
    case FieldCodecPolicy::kPlanes2: return "planes2";
    case FieldCodecPolicy::kNone: break;
  }
  return "none";
}

Status SetStoreDType(std::string_view what, EncodingOptions& e, const OptionValue& v,
                     std::string_view spelled) {
  bool fp8 = false;  // None: the tensors' own dtypes
  if (v.kind == Kind::kText) {
    Result<bool> parsed = ParseStoreDType(v.text);
    if (!parsed.ok())
      return Status::InvalidArgument(std::string(what) + " '" + std::string(spelled) +
                                     "': " + parsed.status().message());
    fp8 = *parsed;
  } else if (v.kind != Kind::kNone) {
    return option_table::Bad(what, spelled, "must be a string or None, got " + v.Describe());
  }
  e.store_fp8 = fp8;
  return Status::OK();
}

// ---- row builders of this file ----------------------------------------------------------------

// A count where None and 0 mean `unset` (an automatic value), any other value within [min, max]:
// the same answer from Python (threads=0), the CLI (--threads 0) and capture.
template <typename Part>
OptionSpec<Part> AutoCount(std::string_view what, std::string_view name, std::string_view member,
                           unsigned& (*ref)(Part&), uint64_t min, uint64_t max,
                           std::string_view unset, std::string_view doc) {
  OptionSpec<Part> s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kCount;
  s.py_type = "Optional[int]";
  s.default_value = "None";
  s.min = min;
  s.max = max;
  s.unset = unset;
  s.doc = doc;
  s.set = [what, ref, min, max, unset, doc](Part& o, const OptionValue& v,
                                            std::string_view spelled) -> Status {
    if (v.kind == Kind::kInteger && v.integer == 0) {
      ref(o) = 0;
      return Status::OK();
    }
    uint64_t x = 0;
    LIBSHARD_RETURN_IF_ERROR(option_table::ToCount(what, spelled, v, min, max, unset, doc, &x));
    ref(o) = static_cast<unsigned>(x);
    return Status::OK();
  };
  s.get = [ref](const Part& o) { return static_cast<uint64_t>(ref(const_cast<Part&>(o))); };
  return s;
}

// A byte count whose None and 0 give `fallback` (the default; existing callers spell "the
// default" both ways), any other value within [1, max].
template <typename Part>
OptionSpec<Part> DefaultingBytes(std::string_view what, std::string_view name,
                                 std::string_view member, uint64_t& (*ref)(Part&),
                                 std::string_view default_value, uint64_t fallback,
                                 std::string_view unset, std::string_view doc) {
  OptionSpec<Part> s =
      option_rows::OptionalBytes<Part>(what, name, member, ref, 1, UINT64_MAX, unset, doc);
  s.default_value = default_value;
  s.set = [inner = s.set, ref, fallback](Part& o, const OptionValue& v,
                                         std::string_view spelled) -> Status {
    LIBSHARD_RETURN_IF_ERROR(inner(o, v, spelled));
    if (ref(o) == 0) ref(o) = fallback;
    return Status::OK();
  };
  return s;
}

// A byte count whose text of digits is the integer it spells: "0" from Python is refused as 0
// is, in the same words, as the command line's "0" (ParseByteSize would say it otherwise).
template <typename Part>
OptionSpec<Part> DigitsAsInteger(OptionSpec<Part> s) {
  s.set = [inner = s.set](Part& o, const OptionValue& v, std::string_view spelled) {
    return inner(o, v.kind == Kind::kText ? option_table::FromText(OptionType::kBytes, v.text) : v,
                 spelled);
  };
  return s;
}

template <typename Part>
Row<Part> R(OptionSpec<Part> spec,
            std::type_identity_t<std::function<std::string(const Part&)>> print,
            std::vector<std::string_view> aliases) {
  spec.aliases = std::move(aliases);
  return Row<Part>{std::move(spec), std::move(print)};
}

std::vector<Row<EncodingOptions>> EncodingRows(std::string_view what) {
  std::vector<Row<EncodingOptions>> t;
  {
    OptionSpec<EncodingOptions> s;
    s.name = "compress";
    s.member = "compression, zstd_level, field_codecs";
    s.type = OptionType::kChoice;
    s.py_type = "Optional[str]";
    s.default_value = "None";
    s.choices = {"none", "zstd", "zstd:LEVEL", "auto", "planes", "planes2"};
    // kMinZstdLevel..kMaxZstdLevel (writer_option_table_test checks the two agree).
    s.doc = "zstd per sample (LEVEL -7..22), or field codecs chosen per field (auto, planes, "
            "planes2)";
    s.set = [what](EncodingOptions& e, const OptionValue& v, std::string_view spelled) {
      return SetCompress(what, e, v, spelled);
    };
    t.push_back(R(std::move(s), PrintCompress, {"compression", "--compress"}));
  }
  {
    OptionSpec<EncodingOptions> s;
    s.name = "store_dtype";
    s.member = "store_fp8";
    s.type = OptionType::kChoice;
    s.py_type = "Optional[str]";
    s.default_value = "None";
    s.choices = {"none", "float8_e4m3fn"};
    s.doc = "float8_e4m3fn: bf16/fp16 hidden states as fp8, a scale per token (lossy)";
    s.set = [what](EncodingOptions& e, const OptionValue& v, std::string_view spelled) {
      return SetStoreDType(what, e, v, spelled);
    };
    t.push_back(R(
        std::move(s),
        +[](const EncodingOptions& e) -> std::string {
          return e.store_fp8 ? "float8_e4m3fn" : "none";
        },
        {"--store-dtype"}));
  }
  return t;
}

std::vector<Row<LayoutOptions>> LayoutRows(std::string_view what) {
  using option_rows::Bool;
  using option_rows::Bytes;
  using L = LayoutOptions;
  std::vector<Row<L>> t;
  t.push_back(R(DigitsAsInteger(Bytes<L>(what, "shard_size", "shard_size",
                                         +[](L& l) -> uint64_t& { return l.shard_size; },
                                         "'4GiB'", 1, UINT64_MAX,
                                         "roll to a new shard file past this many bytes")),
                +[](const L& l) { return FormatSize(l.shard_size); }, {"--shard-size"}));
  // "--fsync" names the row on the command line, where it is "--no-fsync" (CommandLineSpellingOf).
  t.push_back(R(Bool<L>(what, "fsync", "fsync", +[](L& l) -> bool& { return l.fsync; }, "True",
                        "fsync shards, journal, index and manifest"),
                +[](const L& l) -> std::string { return l.fsync ? "true" : "false"; },
                {"--fsync"}));
  t.push_back(R(DefaultingBytes<L>(what, "journal_every", "journal_every_bytes",
                                   +[](L& l) -> uint64_t& { return l.journal_every_bytes; },
                                   "'1GiB'", kDefaultJournalEveryBytes, "the default, 1 GiB",
                                   "bytes between journal checkpoints (what a crash keeps)"),
                +[](const L& l) { return FormatSize(l.journal_every_bytes); },
                {"journal_every_bytes", "--journal-every"}));
  t.push_back(R(option_rows::Number<L>(
                    what, "commit_interval", "commit_interval_seconds",
                    +[](L& l) -> double& { return l.commit_interval_seconds; }, "5.0", true,
                    "seconds a written sample may wait before the journal makes it durable and "
                    "visible to followers (Loader(follow=True)); 0: only every journal_every "
                    "bytes"),
                +[](const L& l) {
                  char buf[32];
                  std::snprintf(buf, sizeof(buf), "%.17g", l.commit_interval_seconds);
                  return std::string(buf);
                },
                {"commit_interval_seconds", "--commit-interval"}));
  return t;
}

std::vector<Row<ParallelismOptions>> ParallelismRows(std::string_view what) {
  using P = ParallelismOptions;
  std::vector<Row<P>> t;
  t.push_back(R(AutoCount<P>(what, "threads", "threads",
                             +[](P& p) -> unsigned& { return p.threads; }, 1, kMaxWriterThreads,
                             "one per CPU for pack, at most 4 beside a generator",
                             "threads encoding samples (layout, compression, checksums; pack's "
                             "also read the sources)"),
                +[](const P& p) {
                  return p.threads == 0 ? std::string("None") : std::to_string(p.threads);
                },
                {"--threads"}));
  t.push_back(R(option_rows::OptionalBytes<P>(
                    what, "in_flight_bytes", "in_flight_bytes",
                    +[](P& p) -> uint64_t& { return p.in_flight_bytes; }, 1, UINT64_MAX,
                    "2 x threads x the largest source, at least 64 MiB, for pack; 1 GiB beside "
                    "a generator",
                    "bytes of samples in flight (given, not yet in a shard) before more wait"),
                +[](const P& p) {
                  return p.in_flight_bytes == 0 ? std::string("None")
                                                : FormatSize(p.in_flight_bytes);
                },
                // queue_size / --queue-size: libshard.Writer's and capture's name; window_bytes /
                // --window: pack's former name; queue_bytes: the core's.
                {"queue_size", "queue_bytes", "window_bytes", "--in-flight-bytes", "--queue-size",
                 "--window"}));
  return t;
}

std::vector<Row<ProvenanceOptions>> ProvenanceRows(std::string_view what) {
  using option_rows::Text;
  using V = ProvenanceOptions;
  std::vector<Row<V>> t;
  {
    OptionSpec<V> s;
    s.name = "attrs";
    s.member = "attributes";
    s.type = OptionType::kState;
    s.py_type = "Optional[Mapping[str, Union[str, int]]]";
    s.default_value = "None";
    s.doc = "what produced the data, recorded in the manifest ({key: str or int})";
    // No setter: a dict (Python) or KEY=VALUE words (command lines), converted by the front end.
    t.push_back(R(std::move(s),
                  +[](const V& v) {
                    std::string out = "{";
                    for (const auto& [key, value] : v.attributes)
                      out += (out.size() > 1 ? "," : "") + key + "=" + AttributeText(value);
                    return out + "}";
                  },
                  {"attributes", "--attr"}));
  }
  t.push_back(R(option_rows::Bool<V>(
                    what, "allow_identity_change", "allow_identity_change",
                    +[](V& v) -> bool& { return v.allow_identity_change; }, "False",
                    "where the output holds a write or dataset of another identity (other "
                    "attrs), set it aside (moved to OUT.stale-TIME, kept) and start afresh "
                    "instead of refusing"),
                +[](const V& v) -> std::string {
                  return v.allow_identity_change ? "true" : "false";
                },
                {"--allow-identity-change"}));
  t.push_back(R(Text<V>(what, "created_by", "created_by",
                        +[](V& v) -> std::string& { return v.created_by; }, "''",
                        "free text recorded in the manifest"),
                +[](const V& v) { return Quoted(v.created_by); }, {}));
  t.push_back(R(Text<V>(what, "source_root", "source_root",
                        +[](V& v) -> std::string& { return v.source_root; }, "''",
                        "recorded in the manifest's provenance summary"),
                +[](const V& v) { return Quoted(v.source_root); }, {}));
  return t;
}

std::vector<Row<WriterConfig>> WriterRows(std::string_view what) {
  std::vector<Row<WriterConfig>> t;
  const auto add = [&t](auto rows) {
    using Part = typename decltype(rows)::value_type::PartType;
    for (auto& r : rows)
      t.push_back(Row<WriterConfig>{option_rows::Lift<WriterConfig>(r.spec),
                                    [print = r.print](const WriterConfig& c) {
                                      return print(static_cast<const Part&>(c));
                                    }});
  };
  add(EncodingRows(what));
  add(LayoutRows(what));
  add(ParallelismRows(what));
  add(ProvenanceRows(what));
  return t;
}

template <typename Part>
std::vector<OptionSpec<Part>> Specs(std::vector<Row<Part>> rows) {
  std::vector<OptionSpec<Part>> out;
  for (auto& r : rows) out.push_back(std::move(r.spec));
  return out;
}

}  // namespace

std::vector<OptionSpec<EncodingOptions>> EncodingOptionRows(std::string_view what) {
  return Specs(EncodingRows(what));
}
std::vector<OptionSpec<LayoutOptions>> LayoutOptionRows(std::string_view what) {
  return Specs(LayoutRows(what));
}
std::vector<OptionSpec<ParallelismOptions>> ParallelismOptionRows(std::string_view what) {
  return Specs(ParallelismRows(what));
}
std::vector<OptionSpec<ProvenanceOptions>> ProvenanceOptionRows(std::string_view what) {
  return Specs(ProvenanceRows(what));
}
std::vector<OptionSpec<WriterConfig>> WriterConfigRows(std::string_view what) {
  return Specs(WriterRows(what));
}

const OptionTable<WriterConfig>& WriterOptionTable() {
  static const OptionTable<WriterConfig> table("Writer option", WriterConfigRows("Writer option"));
  return table;
}

std::string FormatWriterConfig(const WriterConfig& c) {
  std::string out;
  for (const auto& r : WriterRows("Writer option")) {
    if (!out.empty()) out += ' ';
    out += std::string(r.spec.name) + "=" + r.print(c);
  }
  return out;
}

}  // namespace libshard
