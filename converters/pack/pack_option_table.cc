// PackOptionTable and PackOptionName (pack/option_parsing.h): the settings of a pack job declared
// once, for libshard.pack() (the names), `libshard pack` (the flags, as aliases), the checks and
// the generated stubs: the source options here, and the writer configuration's rows
// (libshard/writer_config.h) as every front end of the writer reads them.
#include <string>
#include <vector>

#include "libshard/option_rows.h"
#include "libshard/writer_config.h"
#include "pack/option_parsing.h"

namespace libshard::convert {
namespace {

using Spec = OptionSpec<PackOptions>;
using Kind = OptionValue::Kind;
constexpr std::string_view kWhat = "pack option";

std::string& Src(PackOptions& o) { return o.source_root; }
std::string& Out(PackOptions& o) { return o.output; }
std::string& FilesFrom(PackOptions& o) { return o.files_from; }
std::string& SplitLayers(PackOptions& o) { return o.split_layers; }
std::vector<std::string>& Include(PackOptions& o) { return o.include; }
std::vector<std::string>& Exclude(PackOptions& o) { return o.exclude; }
std::vector<std::string>& Fields(PackOptions& o) { return o.fields; }
bool& Resume(PackOptions& o) { return o.resume; }
bool& Append(PackOptions& o) { return o.append; }
bool& AllowVaryingDims(PackOptions& o) { return o.allow_varying_dims; }
bool& HashSources(PackOptions& o) { return o.hash_sources; }
bool& VerifyCrc(PackOptions& o) { return o.source_options.verify_crc32; }

Spec With(Spec s, std::vector<std::string_view> aliases) {
  s.aliases = std::move(aliases);
  return s;
}

// A row set from a string by one of the parsers of option_parsing.h (given the caller's spelling
// of the option, for its messages); None and "" leave the default.
Spec Parsed(std::string_view name, std::string_view member, std::string_view py_type,
            std::string_view default_value, std::vector<std::string_view> choices,
            std::string_view doc,
            Status (*apply)(PackOptions&, std::string_view text, std::string_view spelled)) {
  Spec s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kChoice;
  s.py_type = py_type;
  s.default_value = default_value;
  s.choices = std::move(choices);
  s.doc = doc;
  s.set = [apply, doc](PackOptions& o, const OptionValue& v, std::string_view spelled) -> Status {
    if (v.kind == Kind::kNone) return Status::OK();
    if (v.kind != Kind::kText)
      return option_table::Bad(kWhat, spelled, "must be a string, got " + v.Describe() + " (" +
                                                   std::string(doc) + ")");
    Status st = apply(o, v.text, spelled);
    // The parsers' messages quote the text and show an accepted form.
    if (!st.ok())
      return Status::InvalidArgument(std::string(kWhat) + " '" + std::string(spelled) + "': " +
                                     st.message());
    return Status::OK();
  };
  return s;
}

// Bytes where None or 0 means "automatic" (`unset` says what that is).
Spec AutoBytes(std::string_view name, std::string_view member, uint64_t& (*ref)(PackOptions&),
               std::string_view unset, std::string_view doc) {
  Spec s;
  s.name = name;
  s.member = member;
  s.type = OptionType::kBytes;
  s.py_type = "Union[int, str, None]";
  s.default_value = "None";
  s.unset = unset;
  s.doc = doc;
  s.set = [ref, doc](PackOptions& o, const OptionValue& v, std::string_view spelled) -> Status {
    if (v.kind == Kind::kNone) {
      ref(o) = 0;
      return Status::OK();
    }
    return option_table::ToBytes(kWhat, spelled, v, 0, UINT64_MAX, doc, &ref(o));  // 0: auto
  };
  s.get = [ref](const PackOptions& o) { return ref(const_cast<PackOptions&>(o)); };
  return s;
}

uint64_t& MaxDecompressed(PackOptions& o) { return o.source_options.max_decompressed_bytes; }

Status ApplyOnError(PackOptions& o, std::string_view text, std::string_view) {
  LIBSHARD_ASSIGN_OR_RETURN(o.on_error, ParsePackOnError(text));
  return Status::OK();
}
Status ApplySourceFormat(PackOptions& o, std::string_view text, std::string_view) {
  LIBSHARD_ASSIGN_OR_RETURN(o.source_format, ParseSourceFormat(text));
  return Status::OK();
}
Status ApplyPart(PackOptions& o, std::string_view text, std::string_view spelled) {
  if (text.empty()) return Status::OK();
  LIBSHARD_ASSIGN_OR_RETURN(PartSpec part, ParsePart(text, spelled));
  o.part_index = part.index;
  o.part_count = part.count;
  return Status::OK();
}

std::vector<Spec> MakeSpecs() {
  using option_rows::Bool;
  using option_rows::Bytes;
  using option_rows::Count;
  using option_rows::Names;
  using option_rows::Text;
  using O = PackOptions;
  std::vector<Spec> t;
  t.push_back(With(Text<O>(kWhat, "src", "source_root", Src, "None",
                           "the source directory, walked recursively"),
                   {"SRC"}));
  t.push_back(With(Text<O>(kWhat, "out", "output", Out, "''", "the dataset directory to write"),
                   {"--output", "-o"}));
  t.push_back(With(Text<O>(kWhat, "files_from", "files_from", FilesFrom, "None",
                           "a file listing sources, one a line ('-': stdin)"),
                   {"--files-from"}));
  t.push_back(With(Parsed("source_format", "source_format", "str", "'auto'",
                          {"auto", "files", "deepspec", "automodel", "torchspec"},
                          "what SRC holds: sample files, or a DeepSpec, NeMo AutoModel or TorchSpec "
                          "cache whose samples are packed in its order (auto: from its manifest)",
                          ApplySourceFormat),
                   {"--from"}));
  t.push_back(With(Names<O>(kWhat, "include", "include", Include,
                            "globs of files to take (default: the known sample extensions)"),
                   {"--include"}));
  t.push_back(With(Names<O>(kWhat, "exclude", "exclude", Exclude, "globs of files to leave out"),
                   {"--exclude"}));
  // The writer configuration, whole: every row of it with a command-line flag (created_by and
  // source_root are pack's own: "libshard pack <version>" and SRC).
  for (const OptionSpec<WriterConfig>& row : WriterConfigRows(kWhat)) {
    const CommandLineSpelling cl = CommandLineSpellingOf(row);
    if (cl.flags.empty() && cl.negation.empty()) continue;
    t.push_back(option_rows::Lift<O>(row));
  }
  t.push_back(With(Names<O>(kWhat, "fields", "fields", Fields, "keep only these tensors"),
                   {"--fields"}));
  t.push_back(With(Parsed("on_error", "on_error", "str", "'raise'", {"raise", "skip", "fail"},
                          "raise: stop at the first bad source ('fail' is an alias); skip: leave it "
                          "out and list it in OUT/skipped.txt",
                          ApplyOnError),
                   {"--on-error"}));
  t.push_back(With(Bool<O>(kWhat, "resume", "resume", Resume, "False",
                           "continue an interrupted job from its journal"),
                   {"--resume"}));
  t.push_back(With(Bool<O>(kWhat, "append", "append", Append, "False",
                           "add the sources not yet in the finished dataset"),
                   {"--append"}));
  t.push_back(With(Parsed("part", "part_index, part_count", "Optional[str]", "None",
                          {"I/N", "auto"},
                          "convert only the I-th of N contiguous slices of the sources",
                          ApplyPart),
                   {"--part"}));
  t.push_back(With(Text<O>(kWhat, "split_layers", "split_layers", SplitLayers, "None",
                           "a stacked-layer tensor [tokens, layers, hidden] to split into "
                           "aux_hidden_state + hidden_state"),
                   {"--split-layers"}));
  t.push_back(With(Bool<O>(kWhat, "allow_varying_dims", "allow_varying_dims", AllowVaryingDims,
                           "False", "let dims other than the sequence dim vary across sources"),
                   {"--allow-varying-dims"}));
  t.push_back(With(Bool<O>(kWhat, "hash_sources", "hash_sources", HashSources, "True",
                           "record the xxh3-64 of each source file (CLI: --no-hash turns it off)"),
                   {"--hash"}));  // on the command line --no-hash (CommandLineSpellingOf)
  t.push_back(With(Bool<O>(kWhat, "verify_crc", "source_options.verify_crc32", VerifyCrc,
                           "True", "verify the zip CRC-32 of .pt records (CLI: --no-crc)"),
                   {"--crc"}));  // --no-crc
  t.push_back(With(AutoBytes("max_decompressed", "source_options.max_decompressed_bytes",
                             MaxDecompressed,
                             "a quarter of physical memory over threads, at least 256 MiB",
                             "refuse a .gz source that inflates past this size"),
                   {"--max-decompressed"}));
  {
    Spec s;
    s.name = "progress";
    s.member = "progress";
    s.type = OptionType::kState;
    s.py_type = "bool";
    s.default_value = "False";
    s.aliases = {"--progress"};
    s.doc = "report progress on stderr (a callback in C++)";
    t.push_back(std::move(s));  // the front end's
  }
  return t;
}

}  // namespace

const OptionTable<PackOptions>& PackOptionTable() {
  static const OptionTable<PackOptions> table(kWhat, MakeSpecs());
  return table;
}

std::string PackOptionName(std::string_view name, OptionSpelling spelling) {
  const Spec* s = PackOptionTable().Find(name);
  if (s == nullptr) return "'" + std::string(name) + "'";
  if (spelling == OptionSpelling::kCli) {
    const CommandLineSpelling cl = CommandLineSpellingOf(*s);
    for (const std::string& f : cl.flags)
      if (f.starts_with("--")) return f;
    if (!cl.negation.empty()) return cl.negation;
    if (!s->aliases.empty()) return std::string(s->aliases[0]);  // a positional: "SRC"
  }
  return "'" + std::string(s->name) + "'";
}

}  // namespace libshard::convert
