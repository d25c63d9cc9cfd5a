// WriterOptionTable (libshard/parallel_writer.h): libshard.Writer's settings, declared once.
#include <string>
#include <vector>

#include "libshard/option_rows.h"
#include "libshard/parallel_writer.h"

namespace libshard {
namespace {

using Spec = OptionSpec<WriterConfig>;
constexpr std::string_view kWhat = "Writer option";

uint64_t& ShardSize(WriterConfig& c) { return c.writer.shard_size; }
uint64_t& QueueSize(WriterConfig& c) { return c.parallel.max_inflight_bytes; }
uint64_t& JournalEvery(WriterConfig& c) { return c.writer.journal_every_bytes; }
unsigned& Threads(WriterConfig& c) { return c.parallel.threads; }
bool& Fsync(WriterConfig& c) { return c.writer.fsync; }
double& CommitInterval(WriterConfig& c) { return c.writer.commit_interval_seconds; }
std::string& CreatedBy(WriterConfig& c) { return c.writer.created_by; }
std::string& SourceRoot(WriterConfig& c) { return c.writer.source_root; }

Status SetCompress(WriterConfig& c, const OptionValue& v, std::string_view spelled) {
  CompressionSpec spec;  // None: no compression
  if (v.kind == OptionValue::Kind::kText) {
    Result<CompressionSpec> parsed = ParseCompression(v.text);
    // ParseCompression's message quotes the text and lists the forms.
    if (!parsed.ok())
      return Status::InvalidArgument(std::string(kWhat) + " '" + std::string(spelled) +
                                     "': " + parsed.status().message());
    spec = *parsed;
  } else if (v.kind != OptionValue::Kind::kNone) {
    return option_table::Bad(kWhat, spelled, "must be a string or None, got " + v.Describe());
  }
  c.writer.compression = spec.compression;
  c.writer.zstd_level = spec.level;
  c.writer.field_codecs = spec.field_codecs;
  return Status::OK();
}

Status SetStoreDType(WriterConfig& c, const OptionValue& v, std::string_view spelled) {
  bool fp8 = false;  // None: the tensors' own dtypes
  if (v.kind == OptionValue::Kind::kText) {
    Result<bool> parsed = ParseStoreDType(v.text);
    if (!parsed.ok())
      return Status::InvalidArgument(std::string(kWhat) + " '" + std::string(spelled) +
                                     "': " + parsed.status().message());
    fp8 = *parsed;
  } else if (v.kind != OptionValue::Kind::kNone) {
    return option_table::Bad(kWhat, spelled, "must be a string or None, got " + v.Describe());
  }
  c.writer.store_fp8 = fp8;
  return Status::OK();
}

std::vector<Spec> MakeSpecs() {
  using option_rows::Bool;
  using option_rows::Bytes;
  using option_rows::Count;
  using option_rows::Text;
  std::vector<Spec> t;
  t.push_back(Bytes<WriterConfig>(kWhat, "shard_size", "writer.shard_size", ShardSize, "'4GiB'", 1,
                                  UINT64_MAX, "roll to a new shard file past this many bytes"));
  {
    Spec s;
    s.name = "compress";
    s.member = "writer.compression, writer.zstd_level, writer.field_codecs";
    s.type = OptionType::kChoice;
    s.py_type = "Optional[str]";
    s.default_value = "None";
    s.choices = {"none", "zstd", "zstd:LEVEL", "auto", "planes", "planes2"};
    s.aliases = {"compression"};
    s.doc = "zstd per sample (LEVEL -7..22), or field codecs chosen per field (auto, planes, planes2)";
    s.set = SetCompress;
    t.push_back(std::move(s));
  }
  {
    Spec s;
    s.name = "store_dtype";
    s.member = "writer.store_fp8";
    s.type = OptionType::kChoice;
    s.py_type = "Optional[str]";
    s.default_value = "None";
    s.choices = {"none", "float8_e4m3fn"};
    s.doc = "float8_e4m3fn: bf16/fp16 hidden states as fp8, a scale per token (lossy)";
    s.set = SetStoreDType;
    t.push_back(std::move(s));
  }
  t.push_back(Count<WriterConfig, unsigned>(kWhat, "threads", "parallel.threads", Threads, "None",
                                            1, 256, "one per CPU, at most 4",
                                            "encoding threads (layout, compression, checksums)"));
  {
    Spec s = Bytes<WriterConfig>(kWhat, "queue_size", "parallel.max_inflight_bytes", QueueSize,
                                 "'1GiB'", 1, UINT64_MAX,
                                 "bytes of samples written but not yet on disk before write waits");
    s.aliases = {"queue_bytes"};
    t.push_back(std::move(s));
  }
  {
    Spec s = Bytes<WriterConfig>(kWhat, "journal_every", "writer.journal_every_bytes",
                                 JournalEvery, "'1GiB'", 1, UINT64_MAX,
                                 "bytes between journal checkpoints (what a crash keeps)");
    s.aliases = {"journal_every_bytes"};
    t.push_back(std::move(s));
  }
  {
    Spec s = option_rows::Number<WriterConfig>(
        kWhat, "commit_interval", "writer.commit_interval_seconds", CommitInterval, "5.0", true,
        "seconds a written sample may wait before the journal makes it durable and visible to "
        "followers (Loader(follow=True)); 0: only every journal_every bytes");
    s.aliases = {"commit_interval_seconds"};
    t.push_back(std::move(s));
  }
  t.push_back(Bool<WriterConfig>(kWhat, "fsync", "writer.fsync", Fsync, "True",
                                 "fsync shards, journal, index and manifest"));
  {
    Spec s;
    s.name = "attrs";
    s.member = "writer.attributes";
    s.type = OptionType::kState;
    s.py_type = "Optional[Mapping[str, Union[str, int]]]";
    s.default_value = "None";
    s.aliases = {"attributes"};
    s.doc = "what produced the data, recorded in the manifest ({key: str or int})";
    t.push_back(std::move(s));  // a dict: converted by the front end
  }
  t.push_back(Text<WriterConfig>(kWhat, "created_by", "writer.created_by", CreatedBy, "''",
                                 "free text recorded in the manifest"));
  t.push_back(Text<WriterConfig>(kWhat, "source_root", "writer.source_root", SourceRoot, "''",
                                 "recorded in the manifest's provenance summary"));
  return t;
}

}  // namespace

const OptionTable<WriterConfig>& WriterOptionTable() {
  static const OptionTable<WriterConfig> table(kWhat, MakeSpecs());
  return table;
}

}  // namespace libshard
