// The writer's configuration, one part per concern, composed (the model: RocksDB's Options, made
// of DBOptions and ColumnFamilyOptions, each part with its own type table):
//
//   EncodingOptions     how samples are stored: whole-sample zstd and its level, or field codecs
//                       chosen per field, and the fp8 store dtype (FORMAT.md §4.2, §4.3)
//   LayoutOptions       how the dataset is laid down: shard size, fsync, the journal's byte and
//                       time intervals (FORMAT.md §4, §6)
//   ParallelismOptions  encode threads and the one bound on the bytes in flight
//   ProvenanceOptions   what made the dataset, recorded in its manifest (FORMAT.md §2.2)
//
// WriterConfig is the four together: what libshard.Writer, `libshard pack` / libshard.pack and
// `python -m libshard.capture` set. Each part is declared once, in its option table (names, other
// spellings, types, defaults, bounds, one line of doc; writer_option_table.cc); WriterOptionTable
// composes them, pack's table (converters/pack) takes them whole beside its source options, and
// the Python keywords, the CLI's flags and --help, capture's argparse flags and the generated
// stubs are all read from it, so no two front ends can spell, bound or default a setting
// differently. The C++ structs that take a part inherit it (WriterOptions: encoding, layout,
// provenance; ParallelWriterOptions: parallelism; convert::PackOptions: all four), so a field
// added to a part reaches every one of them without a copy by hand.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "libshard/attributes.h"
#include "libshard/caller.h"
#include "libshard/option_table.h"
#include "libshard/status.h"

namespace libshard {

enum class Compression : uint32_t {
  kNone = 0,
  kZstd = 1,  // per sample; 2-byte dtypes are byte-shuffled first (FORMAT.md §4.2)
};

// How the writer chooses each field's codec (FORMAT.md §4.3; index version 2 only, and not with
// Compression::kZstd: whole-sample zstd and field codecs are exclusive, §3.8.6).
enum class FieldCodecPolicy : uint32_t {
  kNone = 0,     // every field raw
  kAuto = 1,     // bfloat16/float16: planes2 (codec 5); other dtypes except strings of bytes:
                 // zstd per field (codec 1)
  kPlanes = 2,   // bfloat16/float16: planes (codec 2); others raw
  kPlanes2 = 3,  // bfloat16/float16: planes2 (codec 5); others raw
};

// zstd levels the writer accepts (EncodingOptions::zstd_level, "zstd:LEVEL").
inline constexpr int kMinZstdLevel = -7;
inline constexpr int kMaxZstdLevel = 22;
inline constexpr int kDefaultZstdLevel = 3;

// How samples are stored. Create only: Resume keeps the journal's codecs and OpenForAppend the
// dataset's. The option rows: `compress` (compression, zstd_level, field_codecs) and
// `store_dtype` (store_fp8).
struct EncodingOptions {
  Compression compression = Compression::kNone;
  int zstd_level = kDefaultZstdLevel;  // with Compression::kZstd
  // Field codecs (FORMAT.md §4.3), chosen per field by ChooseFieldCodecs (writer.h).
  FieldCodecPolicy field_codecs = FieldCodecPolicy::kNone;
  // Store bfloat16/float16 hidden states as float8_e4m3fn with a scale per token (lossy, §4.3.5).
  bool store_fp8 = false;
};
// The name ParseCompression's result had before it became the encoding itself.
using CompressionSpec = EncodingOptions;

// A compression as users write it (`compress`): "none"; "zstd" or "zstd:LEVEL" (LEVEL in
// kMinZstdLevel..kMaxZstdLevel): whole-sample zstd; "auto", "planes", "planes2": field codecs
// chosen per field (FieldCodecPolicy). Case and surrounding blanks are ignored; anything else is
// InvalidArgument listing the forms. Sets compression, zstd_level and field_codecs (store_fp8
// stays false).
Result<EncodingOptions> ParseCompression(std::string_view text);
// A store dtype as users write it (`store_dtype`): "float8_e4m3fn" (or "fp8") stores
// bfloat16/float16 hidden states as fp8 with a scale per token (lossy); "" or "none" keeps their
// dtype. Case and surrounding blanks are ignored; anything else is InvalidArgument.
Result<bool> ParseStoreDType(std::string_view text);

// LayoutOptions::commit_interval_seconds and journal_every_bytes by default.
inline constexpr double kDefaultCommitIntervalSeconds = 5.0;
inline constexpr uint64_t kDefaultJournalEveryBytes = uint64_t{1} << 30;

// How the dataset is laid down and how often what is written becomes durable.
struct LayoutOptions {
  uint64_t shard_size = uint64_t{4} << 30;  // roll to a new shard past this; a sample never splits
  bool fsync = true;                        // fsync shards, journal, index, manifest, directory
  // Checkpoint the journal once this many bytes were appended since the last one (and at every
  // shard roll): what a crash keeps. The option `journal_every`.
  uint64_t journal_every_bytes = kDefaultJournalEveryBytes;
  // Checkpoint the journal once an appended sample has waited this long (seconds; 0: only by
  // journal_every_bytes and at shard rolls): what bounds the time until followers of the write
  // (FORMAT.md §6.1: Loader follow mode, DatasetFollower) see a sample, and what a crash keeps.
  // Checked by Writer::AppendEncoded and by CheckpointIfDue (which a caller whose appends may
  // pause, like ParallelWriter's commit thread, calls meanwhile). The option `commit_interval`.
  double commit_interval_seconds = kDefaultCommitIntervalSeconds;
};

// Who drives a write, for the automatic values of ParallelismOptions.
enum class WriteDriver : uint8_t {
  kGenerator,   // samples arrive from a program that needs its CPUs (libshard.Writer, capture,
                // C++ generators): threads one per CPU, at most 4
  kConversion,  // a conversion that owns the machine (libshard pack): threads one per CPU
};

// How many threads encode and how many bytes may be in flight (submitted, not yet in a shard).
// 0 asks for the automatic value (AutomaticThreads, AutomaticInFlightBytes).
struct ParallelismOptions {
  unsigned threads = 0;          // 1..kMaxWriterThreads; 0: automatic
  // The one bound on what is in flight, in bytes (ParallelWriter's file comment says what a
  // sample reserves); at least one sample is always admitted. 0: automatic. The option
  // `in_flight_bytes` (Python Writer: also `queue_size`; pack: also `window_bytes`).
  uint64_t in_flight_bytes = 0;
};
inline constexpr unsigned kMaxWriterThreads = 1024;
// The encode threads `threads` asks for: itself, or when 0 one per CPU, at most 4 for kGenerator.
unsigned AutomaticThreads(unsigned threads, WriteDriver driver);
// The bound `in_flight_bytes` asks for: itself, or when 0 2 x threads x the largest sample when
// the samples are known ahead (`largest_sample` > 0: pack's sources), at least 64 MiB; else
// 1 GiB.
uint64_t AutomaticInFlightBytes(uint64_t in_flight_bytes, unsigned threads,
                                uint64_t largest_sample);

// What made the dataset, recorded in its manifest: its identity (libshard/identity.h: these
// attributes and the schema; FORMAT.md §2.2), checked by every write that continues or adds to
// it (docs/guide/writing.md, "Identity").
struct ProvenanceOptions {
  // What produced the data (attributes.h): the declared part of the dataset's identity. A write
  // that continues what a directory holds (Resume of its journal, OpenForAppend, and Resume of a
  // committed job) keeps the attributes recorded there; every key given must be recorded there
  // with the same value, else InvalidArgument naming the key and both values. The option `attrs`.
  Attributes attributes;
  // A deliberate change of identity: where a write would continue what a directory holds of
  // another identity (the attributes differ), that is set aside instead (CheckWriteIdentity,
  // writer.h: moved to DIR.stale-TIME/, kept, never reused) and the write starts afresh with the
  // given attributes; MergeOptions/JoinOptions::allow_identity_change combine parts of different
  // identities. The option `allow_identity_change` (CLI --allow-identity-change).
  bool allow_identity_change = false;
  std::string created_by;   // free text ("libshard pack <version>"); pack sets its own
  std::string source_root;  // recorded in the manifest's provenance summary; pack: its SRC
};

// The whole writer configuration.
struct WriterConfig : EncodingOptions, LayoutOptions, ParallelismOptions, ProvenanceOptions {};

// ---- the option tables (writer_option_table.cc) ---------------------------------------------
// One table per part; `what` prefixes their errors ("Writer option", "pack option"), so a table
// that takes a part whole (pack's) builds its rows with its own word. A row with a command-line
// flag (an alias "--flag") is on the command line of `libshard pack` and of capture; the others
// (created_by, source_root) are set by the front ends themselves.
std::vector<OptionSpec<EncodingOptions>> EncodingOptionRows(std::string_view what);
std::vector<OptionSpec<LayoutOptions>> LayoutOptionRows(std::string_view what);
std::vector<OptionSpec<ParallelismOptions>> ParallelismOptionRows(std::string_view what);
std::vector<OptionSpec<ProvenanceOptions>> ProvenanceOptionRows(std::string_view what);
// The four in that order, as rows of WriterConfig.
std::vector<OptionSpec<WriterConfig>> WriterConfigRows(std::string_view what);
// The Writer option table: WriterConfigRows("Writer option"), read by the Python bindings, the
// stubs (scripts/gen_core_pyi.py) and capture. `attrs` is converted by each front end (a dict,
// or KEY=VALUE words); every other row sets its members.
const OptionTable<WriterConfig>& WriterOptionTable();

// How a message names a row of the writer's table ("compress"): as the caller types it.
using OptionSpeller = std::function<std::string(std::string_view row)>;
// kPython: "'compress'"; kCli: "--compress" (its flag; "--no-fsync" for fsync); kCpp: the members
// "WriterConfig::compression/zstd_level/field_codecs".
std::string SpellWriterOption(std::string_view row, Caller caller);

// The one check of each part set in C++ (the tables check what they set as they set it): the
// table's bounds, known enum values, a zstd level in range, whole-sample zstd and field codecs
// exclusive (FORMAT.md §3.8.6), a commit interval in 0..1e9 seconds, valid attributes.
// InvalidArgument naming the setting as `spell` does.
Status ValidateEncoding(const EncodingOptions& e, const OptionSpeller& spell);
Status ValidateLayout(const LayoutOptions& l, const OptionSpeller& spell);
Status ValidateParallelism(const ParallelismOptions& p, const OptionSpeller& spell);
Status ValidateProvenance(const ProvenanceOptions& p, const OptionSpeller& spell);
Status ValidateWriterConfig(const WriterConfig& c, const OptionSpeller& spell);

// The configuration as text, one "name=value" per row of WriterOptionTable in its order,
// separated by blanks, each value as the row reads it back ("compress=zstd:5 store_dtype=none
// shard_size=4GiB fsync=true ... threads=auto"): WriterOptionTable().SetFromText of each pair
// gives `c` again. attrs as "attrs={key=value,...}" (for reading, not parsed back).
std::string FormatWriterConfig(const WriterConfig& c);

// ---- command lines ----------------------------------------------------------------------------
// How a row is spelled on a command line (`libshard pack`, `python -m libshard.capture`), from
// its aliases: every alias "--x" (or "-x") is a flag; a boolean row whose default is True
// instead gets the flag "--no-x" that turns it off (its alias "--x" names it: fsync's "--fsync"
// gives "--no-fsync"). `help` is the row's doc (without a "(CLI: ...)" note), its choices and its
// default (for an automatic setting, what automatic means and that 0 asks for it).
struct CommandLineSpelling {
  std::vector<std::string> flags;
  std::string negation;
  std::string help;
};
CommandLineSpelling CommandLineSpellingOf(OptionType type, std::string_view default_value,
                                          const std::vector<std::string_view>& aliases,
                                          std::string_view unset,
                                          const std::vector<std::string_view>& choices,
                                          std::string_view doc);
template <typename Options>
CommandLineSpelling CommandLineSpellingOf(const OptionSpec<Options>& row) {
  return CommandLineSpellingOf(row.type, row.default_value, row.aliases, row.unset, row.choices,
                               row.doc);
}

}  // namespace libshard
