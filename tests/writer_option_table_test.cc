// The writer configuration (libshard/writer_config.h) and its tables: every row's default is the
// struct's default, values are checked against the row's bounds, pack's table holds the writer's
// rows as they are (one declaration: the same names, spellings, bounds, defaults and docs), a
// configuration prints as text the table reads back, checks name settings as the caller spells
// them, and the command-line spelling of every row is derived once.
#include <gtest/gtest.h>

#include <string>

#include "format_test_helpers.h"
#include "libshard/parallel_writer.h"
#include "libshard/writer_config.h"
#include "pack/option_parsing.h"
#include "pack/pack.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

// A row's default (a Python literal) as a value: "'4GiB'" a text, "None", "True", "64".
OptionValue FromDefault(OptionType type, std::string_view literal) {
  if (literal.size() >= 2 && literal.front() == '\'' && literal.back() == '\'')
    return OptionValue::Text(std::string(literal.substr(1, literal.size() - 2)));
  return option_table::FromText(type, literal);
}

template <typename Options>
void ExpectDefaultsAreTheStructs(const OptionTable<Options>& table) {
  int checked = 0;
  for (const OptionSpec<Options>& row : table.specs()) {
    if (!row.set || !row.get) continue;
    Options o;
    Status st = row.set(o, FromDefault(row.type, row.default_value), row.name);
    ASSERT_TRUE(st.ok()) << row.name << ": " << st.ToString();
    EXPECT_EQ(row.get(o), row.get(Options{})) << row.name;
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST(WriterOptionTableTest, DefaultsAreTheStructs) {
  ExpectDefaultsAreTheStructs(WriterOptionTable());
  ExpectDefaultsAreTheStructs(convert::PackOptionTable());
}

TEST(WriterOptionTableTest, ValuesAreCheckedAndSet) {
  const auto& t = WriterOptionTable();
  WriterConfig c;
  ASSERT_TRUE(t.Set(c, "queue_bytes", OptionValue::Text("64MiB")).ok());  // an alias
  EXPECT_EQ(c.in_flight_bytes, uint64_t{64} << 20);
  ASSERT_TRUE(t.Set(c, "compress", OptionValue::Text("zstd:5")).ok());
  EXPECT_EQ(c.compression, Compression::kZstd);
  EXPECT_EQ(c.zstd_level, 5);
  ASSERT_TRUE(t.Set(c, "compress", OptionValue::None()).ok());
  EXPECT_EQ(c.compression, Compression::kNone);
  ASSERT_TRUE(t.Set(c, "store_dtype", OptionValue::Text(" Float8_E4M3FN")).ok());
  EXPECT_TRUE(c.store_fp8);
  ASSERT_TRUE(t.Set(c, "store_dtype", OptionValue::None()).ok());
  EXPECT_FALSE(c.store_fp8);
  ExpectError(t.Set(c, "store_dtype", OptionValue::Text("int4")), StatusCode::kInvalidArgument,
              {"Writer option 'store_dtype'", "'int4'", "float8_e4m3fn"});
  ASSERT_TRUE(t.Set(c, "threads", OptionValue::None()).ok());
  EXPECT_EQ(c.threads, 0u);  // one per CPU, at most 4: resolved by ParallelWriter
  ExpectError(t.Set(c, "threads", OptionValue::Integer(3000)), StatusCode::kInvalidArgument,
              {"Writer option 'threads' = 3000 is out of range; use 1..1024"});
  ExpectError(t.Set(c, "shard_size", OptionValue::Integer(0)), StatusCode::kInvalidArgument,
              {"'shard_size'"});
  ExpectError(t.Set(c, "shard", OptionValue::Integer(1)), StatusCode::kInvalidArgument,
              {"'shard' is not a known option"});
}

TEST(PackOptionTableTest, CliFlagsAreAliases) {
  const auto& t = convert::PackOptionTable();
  convert::PackOptions o;
  ASSERT_TRUE(t.Set(o, "--shard-size", OptionValue::Text("1MiB")).ok());
  EXPECT_EQ(o.shard_size, uint64_t{1} << 20);
  ASSERT_TRUE(t.Set(o, "--part", OptionValue::Text("2/5")).ok());
  EXPECT_EQ(o.part_index, 2u);
  EXPECT_EQ(o.part_count, 5u);
  ASSERT_TRUE(t.Set(o, "window_bytes", OptionValue::Text("64MiB")).ok());
  EXPECT_EQ(o.in_flight_bytes, uint64_t{64} << 20);
  ASSERT_TRUE(t.Set(o, "window_bytes", OptionValue::Integer(0)).ok());  // 0 or None: automatic
  EXPECT_EQ(o.in_flight_bytes, 0u);
  ExpectError(t.Set(o, "--on-error", OptionValue::Text("ignore")), StatusCode::kInvalidArgument,
              {"pack option '--on-error'", "'ignore'"});
  EXPECT_EQ(convert::PackOptionName("append", convert::OptionSpelling::kCli), "--append");
  EXPECT_EQ(convert::PackOptionName("out", convert::OptionSpelling::kCli), "--output");
  EXPECT_EQ(convert::PackOptionName("src", convert::OptionSpelling::kCli), "SRC");
  EXPECT_EQ(convert::PackOptionName("append", convert::OptionSpelling::kApi), "'append'");
}

TEST(PackOptionTableTest, ChecksSpeakTheCallersSpelling) {
  convert::PackOptions o;
  o.source_root = "src";
  o.output = "out";
  o.resume = o.append = true;
  ExpectError(convert::ValidatePackOptions(o, convert::OptionSpelling::kCli),
              StatusCode::kInvalidArgument, {"--resume and --append exclude each other"});
  const Status api = convert::ValidatePackOptions(o);
  ExpectError(api, StatusCode::kInvalidArgument, {"'resume' and 'append' exclude each other"});
  EXPECT_EQ(api.message().find("--"), std::string::npos) << api.ToString();
  o.resume = o.append = false;
  o.output.clear();
  ExpectError(convert::ValidatePackOptions(o, convert::OptionSpelling::kCli),
              StatusCode::kInvalidArgument, {"no output", "--output"});
  ExpectError(convert::ValidatePackOptions(o), StatusCode::kInvalidArgument, {"no output", "'out'"});
  o.output = "out";
  o.compression = Compression::kZstd;
  o.store_fp8 = true;
  const Status both = convert::ValidatePackOptions(o);
  ExpectError(both, StatusCode::kInvalidArgument, {"exclude each other", "'store_dtype'"});
  EXPECT_EQ(both.message().find("--"), std::string::npos) << both.ToString();
}

// Pack's table takes the writer configuration's rows as they are: every row with a flag is there
// with the same type, default, bounds, spellings and doc, and sets the same member.
TEST(WriterConfigTest, PackHasEveryWriterRowUnchanged) {
  const auto& writer = WriterOptionTable();
  const auto& pack = convert::PackOptionTable();
  int shared = 0;
  for (const auto& w : writer.specs()) {
    const CommandLineSpelling cl = CommandLineSpellingOf(w);
    const auto* p = pack.Find(w.name);
    if (cl.flags.empty() && cl.negation.empty()) {  // created_by, source_root: pack's own
      EXPECT_EQ(p, nullptr) << w.name;
      continue;
    }
    ASSERT_NE(p, nullptr) << w.name;
    ++shared;
    EXPECT_EQ(p->name, w.name);
    EXPECT_EQ(p->member, w.member) << w.name;
    EXPECT_EQ(p->type, w.type) << w.name;
    EXPECT_EQ(p->py_type, w.py_type) << w.name;
    EXPECT_EQ(p->default_value, w.default_value) << w.name;
    EXPECT_EQ(p->min, w.min) << w.name;
    EXPECT_EQ(p->max, w.max) << w.name;
    EXPECT_EQ(p->unset, w.unset) << w.name;
    EXPECT_EQ(p->choices, w.choices) << w.name;
    EXPECT_EQ(p->aliases, w.aliases) << w.name;
    EXPECT_EQ(p->doc, w.doc) << w.name;
    EXPECT_EQ(CommandLineSpellingOf(*p).help, cl.help) << w.name;
  }
  EXPECT_EQ(shared, 10);
  // The same value sets the same member through either table, and is refused in the same words
  // but for the table's name.
  const std::pair<const char*, OptionValue> values[] = {
      {"compress", OptionValue::Text("zstd:7")},    {"store_dtype", OptionValue::Text("fp8")},
      {"shard_size", OptionValue::Text("3MiB")},    {"fsync", OptionValue::Bool(false)},
      {"journal_every", OptionValue::Integer(0)},   {"commit_interval", OptionValue::Number(0.5)},
      {"threads", OptionValue::Integer(0)},         {"queue_size", OptionValue::Text("8MiB")},
      {"journal_every_bytes", OptionValue::Text("64KiB")}, {"threads", OptionValue::Integer(7)}};
  WriterConfig c;
  convert::PackOptions o;
  for (const auto& [name, value] : values) {
    ASSERT_TRUE(writer.Set(c, name, value).ok()) << name;
    ASSERT_TRUE(pack.Set(o, name, value).ok()) << name;
  }
  EXPECT_EQ(FormatWriterConfig(c), FormatWriterConfig(o));
  const std::pair<const char*, OptionValue> bad[] = {
      {"threads", OptionValue::Integer(1025)}, {"compress", OptionValue::Text("zstd:23")},
      {"shard_size", OptionValue::Integer(0)}, {"in_flight_bytes", OptionValue::Text("lots")},
      {"commit_interval", OptionValue::Number(-1)}, {"store_dtype", OptionValue::Text("int4")}};
  for (const auto& [name, value] : bad) {
    const Status a = writer.Set(c, name, value), b = pack.Set(o, name, value);
    ASSERT_FALSE(a.ok()) << name;
    ASSERT_FALSE(b.ok()) << name;
    EXPECT_EQ(a.message().substr(std::string("Writer option").size()),
              b.message().substr(std::string("pack option").size()))
        << name;
  }
}

// The defaults the table declares (as Python literals) are the structs': setting every row to
// its default leaves a default configuration, printed alike.
TEST(WriterConfigTest, DeclaredDefaultsAreTheDefaultConfiguration) {
  const auto& t = WriterOptionTable();
  WriterConfig c;
  for (const auto& row : t.specs()) {
    if (!row.set) continue;  // attrs: a dict, the front end's
    ASSERT_TRUE(row.set(c, FromDefault(row.type, row.default_value), row.name).ok()) << row.name;
  }
  EXPECT_EQ(FormatWriterConfig(c), FormatWriterConfig(WriterConfig{}));
  EXPECT_EQ(FormatWriterConfig(WriterConfig{}),
            "compress=none store_dtype=none shard_size=4GiB fsync=true journal_every=1GiB "
            "commit_interval=5 threads=None in_flight_bytes=None attrs={} "
            "allow_identity_change=false created_by='' source_root=''");
  // Every struct that takes a part starts from the part's defaults.
  EXPECT_EQ(FormatWriterConfig(convert::PackOptions{}), FormatWriterConfig(WriterConfig{}));
  WriterConfig from_writer;
  static_cast<EncodingOptions&>(from_writer) = WriterOptions{};
  static_cast<LayoutOptions&>(from_writer) = WriterOptions{};
  static_cast<ParallelismOptions&>(from_writer) = ParallelWriterOptions{};
  EXPECT_EQ(FormatWriterConfig(from_writer), FormatWriterConfig(WriterConfig{}));
}

// A configuration prints as name=value pairs the table reads back to the same configuration.
TEST(WriterConfigTest, PrintedConfigurationReadsBack) {
  const auto& t = WriterOptionTable();
  WriterConfig c;
  c.compression = Compression::kZstd;
  c.zstd_level = -3;
  c.shard_size = (uint64_t{3} << 20) + 5;
  c.fsync = false;
  c.journal_every_bytes = 64 << 10;
  c.commit_interval_seconds = 0.125;
  c.threads = 3;
  c.in_flight_bytes = uint64_t{5} << 30;
  c.allow_identity_change = true;
  for (const WriterConfig& want : {c, [] {
         WriterConfig d;
         d.field_codecs = FieldCodecPolicy::kPlanes2;
         d.store_fp8 = true;
         return d;
       }()}) {
    const std::string text = FormatWriterConfig(want);
    WriterConfig got;
    got.threads = 9;  // overwritten by the text
    size_t pairs = 0;
    for (size_t at = 0; at < text.size();) {
      const size_t end = std::min(text.find(' ', at), text.size());
      const std::string pair = text.substr(at, end - at);
      at = end + 1;
      const size_t eq = pair.find('=');
      const std::string name = pair.substr(0, eq);
      if (name == "attrs" || name == "created_by" || name == "source_root") continue;
      ASSERT_TRUE(t.SetFromText(got, name, pair.substr(eq + 1)).ok()) << pair;
      ++pairs;
    }
    EXPECT_EQ(pairs, 9u);
    EXPECT_EQ(FormatWriterConfig(got), text);
  }
}

// One check (ValidateWriterConfig) for a configuration set in C++, naming the setting as the
// caller spells it; the Writer applies it with its caller's spelling.
TEST(WriterConfigTest, OneCheckNamesTheSettingAsTheCallerSpellsIt) {
  const auto spell = [](Caller caller) {
    return [caller](std::string_view row) { return SpellWriterOption(row, caller); };
  };
  WriterConfig c;
  c.threads = 2000;
  ExpectError(ValidateWriterConfig(c, spell(Caller::kCli)), StatusCode::kInvalidArgument,
              {"--threads = 2000 is out of range; use 1..1024"});
  ExpectError(ValidateWriterConfig(c, spell(Caller::kPython)), StatusCode::kInvalidArgument,
              {"'threads' = 2000"});
  ExpectError(ValidateWriterConfig(c, spell(Caller::kCpp)), StatusCode::kInvalidArgument,
              {"WriterConfig::threads = 2000"});
  c = WriterConfig{};
  c.compression = Compression::kZstd;
  c.zstd_level = kMaxZstdLevel + 1;
  ExpectError(ValidateWriterConfig(c, spell(Caller::kCli)), StatusCode::kInvalidArgument,
              {"--compress", "zstd level 23 is outside -7..22"});
  c.zstd_level = kMaxZstdLevel;
  EXPECT_TRUE(ValidateWriterConfig(c, spell(Caller::kCli)).ok());
  c.field_codecs = FieldCodecPolicy::kAuto;
  ExpectError(ValidateWriterConfig(c, spell(Caller::kCli)), StatusCode::kInvalidArgument,
              {"exclude each other", "--compress", "--store-dtype"});
  c = WriterConfig{};
  c.commit_interval_seconds = 2e9;
  ExpectError(ValidateWriterConfig(c, spell(Caller::kPython)), StatusCode::kInvalidArgument,
              {"'commit_interval'", "0..1e9"});
  c = WriterConfig{};
  c.fsync = false;
  EXPECT_EQ(SpellWriterOption("fsync", Caller::kCli), "--no-fsync");
  EXPECT_EQ(SpellWriterOption("queue_size", Caller::kCli), "--in-flight-bytes");
  EXPECT_EQ(SpellWriterOption("journal_every", Caller::kCpp), "WriterConfig::journal_every_bytes");
  // The Writer itself: a C++ caller gets the member's name.
  TempDir dir;
  WriterOptions w = FastOptions();
  w.shard_size = 0;
  ExpectError(Writer::Create(dir.path().string(), EagleSchema(), w).status(),
              StatusCode::kInvalidArgument, {"WriterConfig::shard_size = 0 is out of range"});
  w = FastOptions();
  w.store_fp8 = true;
  w.compression = Compression::kZstd;
  w.caller = Caller::kPython;
  ExpectError(Writer::Create(dir.path().string(), EagleSchema(), w).status(),
              StatusCode::kInvalidArgument, {"'compress' zstd", "'store_dtype'"});
  // The compress row's doc states the range the check applies.
  const std::string range = std::to_string(kMinZstdLevel) + ".." + std::to_string(kMaxZstdLevel);
  EXPECT_NE(WriterOptionTable().Find("compress")->doc.find(range), std::string_view::npos);
}

// 0 asks for the automatic value, through the table (Python's 0 or None, the CLI's "0") and in
// C++; the automatic values are decided once.
TEST(WriterConfigTest, AutomaticValuesAreDecidedOnce) {
  const auto& t = WriterOptionTable();
  WriterConfig c;
  c.threads = 5;
  ASSERT_TRUE(t.SetFromText(c, "--threads", "0").ok());
  EXPECT_EQ(c.threads, 0u);
  c.in_flight_bytes = 5;
  ASSERT_TRUE(t.SetFromText(c, "--queue-size", "0").ok());
  EXPECT_EQ(c.in_flight_bytes, 0u);
  ASSERT_TRUE(t.SetFromText(c, "journal_every", "0").ok());
  EXPECT_EQ(c.journal_every_bytes, kDefaultJournalEveryBytes);
  EXPECT_EQ(AutomaticThreads(6, WriteDriver::kGenerator), 6u);
  EXPECT_LE(AutomaticThreads(0, WriteDriver::kGenerator), 4u);
  EXPECT_GE(AutomaticThreads(0, WriteDriver::kConversion),
            AutomaticThreads(0, WriteDriver::kGenerator));
  EXPECT_EQ(AutomaticInFlightBytes(123, 4, 1 << 20), 123u);
  EXPECT_EQ(AutomaticInFlightBytes(0, 4, 0), uint64_t{1} << 30);
  EXPECT_EQ(AutomaticInFlightBytes(0, 4, 1 << 20), uint64_t{64} << 20);
  EXPECT_EQ(AutomaticInFlightBytes(0, 4, uint64_t{100} << 20), uint64_t{800} << 20);
}

// Every row's command-line spelling, derived once (libshard pack's flags and capture's).
TEST(WriterConfigTest, CommandLineSpellings) {
  const auto& t = WriterOptionTable();
  const CommandLineSpelling fsync = CommandLineSpellingOf(*t.Find("fsync"));
  EXPECT_TRUE(fsync.flags.empty());
  EXPECT_EQ(fsync.negation, "--no-fsync");
  EXPECT_EQ(fsync.help, "Do not fsync shards, journal, index and manifest");
  const CommandLineSpelling bound = CommandLineSpellingOf(*t.Find("in_flight_bytes"));
  EXPECT_EQ(bound.flags,
            (std::vector<std::string>{"--in-flight-bytes", "--queue-size", "--window"}));
  EXPECT_NE(bound.help.find("default or 0: "), std::string::npos) << bound.help;
  const CommandLineSpelling compress = CommandLineSpellingOf(*t.Find("compress"));
  EXPECT_NE(compress.help.find("one of: none zstd zstd:LEVEL auto planes planes2; default: none"),
            std::string::npos)
      << compress.help;
  EXPECT_TRUE(CommandLineSpellingOf(*t.Find("created_by")).flags.empty());
  EXPECT_EQ(CommandLineSpellingOf(*t.Find("shard_size")).help,
            "roll to a new shard file past this many bytes (default: 4GiB)");
}

}  // namespace
}  // namespace libshard::testing
