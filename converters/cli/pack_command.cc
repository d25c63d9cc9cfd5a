// `libshard pack SRC -o OUT`: see converters/pack/pack.h.
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/command.h"
#include "cli/progress_printer.h"
#include "pack/option_parsing.h"
#include "pack/pack.h"

namespace libshard::cli {
namespace {

struct PackArgs {
  std::string source;
  std::string output;
  std::string files_from;
  std::vector<std::string> include, exclude;
  std::string shard_size = "4GiB";
  std::string compress = "none";
  std::string store_dtype;
  std::string fields;
  unsigned threads = 0;
  std::string on_error = "raise";
  bool resume = false, append = false;
  std::string part;
  std::vector<std::string> attrs;
  std::string split_layers;
  bool allow_varying_dims = false;
  bool no_hash = false;
  bool no_crc = false;
  std::string window;
  bool no_fsync = false;
  std::string journal_every;
  std::string max_decompressed;
  std::string progress = "auto";
  double progress_interval = -1;
  bool quiet = false;
};

void PrintSummary(const convert::PackSummary& s) {
  using convert::FormatBytes;
  std::printf("packed %llu samples into %s", static_cast<unsigned long long>(s.samples_added),
              s.output.c_str());
  if (s.already_present) {
    std::printf(" (%llu already there)", static_cast<unsigned long long>(s.already_present));
  }
  std::printf("\n");
  if (!s.skipped.empty()) {
    std::printf("  skipped  %zu sources, listed with reasons in %s\n", s.skipped.size(),
                s.skipped_report.c_str());
  }
  const double ratio = s.bytes_in ? static_cast<double>(s.bytes_out) / static_cast<double>(s.bytes_in) : 0;
  std::printf("  in       %s from %llu sources\n", FormatBytes(s.bytes_in).c_str(),
              static_cast<unsigned long long>(s.samples_added));
  std::printf("  out      %s (payload %s), ratio out/in %.3f\n", FormatBytes(s.bytes_out).c_str(),
              FormatBytes(s.raw_bytes).c_str(), ratio);
  std::printf("  dataset  %llu samples in %llu shards, %s\n",
              static_cast<unsigned long long>(s.dataset.samples),
              static_cast<unsigned long long>(s.dataset.shards),
              FormatBytes(s.dataset.stored_bytes).c_str());
  std::printf("  time     %s (%.2f GB/s)  peak RSS %s\n", convert::FormatDuration(s.seconds).c_str(),
              s.seconds > 0 ? static_cast<double>(s.bytes_in) / s.seconds / 1e9 : 0.0,
              FormatBytes(s.peak_rss_bytes).c_str());
}

int RunPack(const PackArgs& a) {
  constexpr std::string_view kCmd = "pack";
  convert::PackOptions o;
  o.source_root = a.source;
  o.files_from = a.files_from;
  o.include = a.include;
  o.exclude = a.exclude;
  o.output = a.output;
  o.spelling = convert::OptionSpelling::kCli;
  // Value flags are read by the pack option table (PackOptionTable; its aliases are these flags),
  // the one that reads libshard.pack()'s keywords.
  const OptionTable<convert::PackOptions>& table = convert::PackOptionTable();
  for (const auto& [flag, text] : {std::pair<std::string_view, const std::string*>{
                                       "--shard-size", &a.shard_size},
                                   {"--compress", &a.compress},
                                   {"--store-dtype", &a.store_dtype},
                                   {"--on-error", &a.on_error},
                                   {"--part", &a.part},
                                   {"--window", &a.window},
                                   {"--journal-every", &a.journal_every},
                                   {"--max-decompressed", &a.max_decompressed}}) {
    if (text->empty()) continue;
    Status st = table.Set(o, flag, OptionValue::Text(*text));
    if (!st.ok()) return UsageError(kCmd, st.message());
  }
  o.fields = convert::SplitList(a.fields);
  o.threads = a.threads;
  o.resume = a.resume;
  o.append = a.append;
  for (const std::string& attr : a.attrs) {
    Status st = convert::ParseAttribute(attr, &o.attributes);
    if (!st.ok()) return UsageError(kCmd, st.message());
  }
  o.split_layers = a.split_layers;
  o.allow_varying_dims = a.allow_varying_dims;
  o.hash_sources = !a.no_hash;
  o.source_options.verify_crc32 = !a.no_crc;
  o.fsync = !a.no_fsync;
  ProgressPrinter::Mode mode;
  if (a.quiet || a.progress == "none") {
    mode = ProgressPrinter::Mode::kNone;
  } else if (a.progress == "bar") {
    mode = ProgressPrinter::Mode::kBar;
  } else if (a.progress == "lines") {
    mode = ProgressPrinter::Mode::kLines;
  } else if (a.progress == "auto") {
    mode = ProgressPrinter::AutoMode(stderr);
  } else {
    return UsageError(kCmd, "--progress must be auto, bar, lines or none");
  }
  const double interval = a.progress_interval >= 0 ? a.progress_interval
                                                   : (mode == ProgressPrinter::Mode::kBar ? 0.2 : 10.0);
  if (Status st = convert::ValidatePackOptions(o, convert::OptionSpelling::kCli); !st.ok())
    return UsageError(kCmd, st.message());

  ProgressPrinter printer(stderr, mode, interval);
  o.progress = [&printer](const convert::PackProgress& p) { printer.Update(p); };
  auto summary = convert::Pack(o);
  printer.EndLine();
  if (!summary.ok()) return Fail(kCmd, summary.status());
  if (summary->nothing_to_resume) {
    if (!a.quiet)
      std::printf("nothing to resume: %s is complete with all %llu sources (%llu samples)\n",
                  summary->output.c_str(),
                  static_cast<unsigned long long>(summary->already_present),
                  static_cast<unsigned long long>(summary->dataset.samples));
    return kExitOk;
  }
  if (!a.quiet) PrintSummary(*summary);
  return kExitOk;
}

}  // namespace

Command AddPackCommand(CLI::App& app) {
  auto args = std::make_shared<PackArgs>();
  CLI::App* c = app.add_subcommand(
      "pack",
      "Convert a directory tree (or list) of per-sample .pt / .pt.gz / .ckpt / .safetensors files "
      "into a dataset. Sample order: natural-sorted relative paths (data_2 before data_10).");
  c->add_option("SRC", args->source, "Source directory, walked recursively");
  c->add_option("-o,--output", args->output, "Output dataset directory")->required();
  c->add_option("--files-from", args->files_from,
                "Read source paths from this file ('-' = stdin), one a line; relative paths are "
                "relative to SRC when given");
  c->add_option("--include", args->include,
                "Glob of files to take (repeatable; '*' stops at '/', '**' crosses it; a pattern "
                "without '/' matches file names). Default: .pt .pth .ckpt .bin .safetensors [.gz]");
  c->add_option("--exclude", args->exclude, "Glob of files to leave out (repeatable)");
  c->add_option("--shard-size", args->shard_size, "Roll to a new shard past this size (512M, 4GiB, ...)")
      ->capture_default_str();
  c->add_option("--compress", args->compress,
                "none; auto (per field: bf16/fp16 planes, other dtypes zstd); planes (bf16/fp16 "
                "only); or zstd / zstd:LEVEL (whole samples, 2-byte dtypes byte-shuffled first)")
      ->capture_default_str();
  c->add_option("--store-dtype", args->store_dtype,
                "float8_e4m3fn: store bf16/fp16 hidden states as fp8 with a scale per token "
                "(lossy; read back as bf16)");
  c->add_option("--fields", args->fields, "Keep only these tensors: a,b,c");
  c->add_option("--threads", args->threads, "Worker threads parsing and encoding (0 = one per CPU)")
      ->capture_default_str();
  c->add_option("--on-error", args->on_error,
                "raise: stop at the first bad source ('fail' is an alias); skip: leave it out and "
                "list it in OUT/skipped.txt")
      ->capture_default_str();
  c->add_flag("--resume", args->resume,
              "Continue an interrupted pack into OUT from its journal, without redoing what was "
              "written (starts it when nothing was written yet). On a finished OUT: exit 0 "
              "'nothing to resume' when it holds every source, else exit 1 naming how many "
              "sources are not in it (add them with --append)");
  c->add_flag("--append", args->append,
              "Add the sources whose relative path is not yet in the finished dataset OUT. One "
              "writer at a time: a pack, --append, --resume or merge into an OUT that another "
              "process is writing fails at once (exit 1) naming that process");
  c->add_option("--part", args->part,
                "I/N: convert only the I-th (0-based) contiguous 1/N of the sorted sources; join "
                "the parts in order with 'libshard merge'. 'auto' takes I/N from RANK/WORLD_SIZE "
                "(torchrun), SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT or "
                "SLURM_PROCID/SLURM_NTASKS");
  c->add_option("--attr", args->attrs,
                 "KEY=VALUE recorded in the manifest as what produced the data (repeatable): "
                 "target_model, hidden_state_layer_ids, aux_hidden_state_layer_ids, hidden_size, "
                 "tokenizer, ...; 'libshard info' shows them, merge refuses parts that disagree, "
                 "Loader(expect=...) checks them")
      ->allow_extra_args(false)
      ->take_all();
  c->add_option("--split-layers", args->split_layers,
                 "NAME: the stacked-layer tensor [tokens, layers, hidden] of vLLM's / speculators' "
                 "hidden-states files (e.g. hidden_states) becomes aux_hidden_state "
                 "[1, tokens, (layers-1)*hidden] (every layer but the last, in order) and "
                 "hidden_state [1, tokens, hidden] (the last), as EAGLE-3 training reads them");
  c->add_flag("--allow-varying-dims", args->allow_varying_dims,
              "Accept sources whose dims other than the sequence dim differ");
  c->add_flag("--no-hash", args->no_hash, "Do not record the xxh3-64 of each source file");
  c->add_flag("--no-crc", args->no_crc,
              "Do not verify the zip CRC-32 of .pt records (faster on slow CPUs; the source bytes "
              "are still hashed into the provenance)");
  c->add_option("--window", args->window,
                "Bytes of samples in flight (default: 2 x threads x largest source file)");
  c->add_flag("--no-fsync", args->no_fsync, "Skip fsync (faster; not crash-safe)");
  c->add_option("--journal-every", args->journal_every,
                "Journal checkpoint interval for --resume (default 1GiB)");
  c->add_option("--max-decompressed", args->max_decompressed,
                "Refuse a .gz source that inflates past this size (a zip-bomb guard; memory use stays "
                "below it). Default (or 0): a quarter of physical memory divided by --threads, at "
                "least 256MiB");
  c->add_option("--progress", args->progress, "auto (bar on a terminal, else lines), bar, lines or none")
      ->capture_default_str();
  c->add_option("--progress-interval", args->progress_interval,
                "Seconds between progress updates (default 0.2 for the bar, 10 for lines)");
  c->add_flag("-q,--quiet", args->quiet, "No progress and no summary");
  return {c, [args] { return RunPack(*args); }};
}

}  // namespace libshard::cli
