// libshard::convert::Pack: converts a directory (or list) of per-sample source files into a
// dataset. The `libshard pack` command and the Python `libshard.pack()` both call this.
//
// Pipeline: the library's ParallelWriter (libshard/parallel_writer.h), which libshard.Writer and
// C++ generators use too. Its encode threads open and parse sources and Writer::Encode them (the
// readers' pread goes straight into the writer's aligned buffer: one copy); the calling thread
// appends encoded samples in source order. Samples in flight are bounded in bytes
// (`in_flight_bytes`, WriterConfig), so memory stays bounded whatever the file sizes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "libshard/attributes.h"
#include "libshard/loader.h"
#include "libshard/status.h"
#include "libshard/writer.h"
#include "libshard/writer_config.h"
#include "readers/cache_source.h"
#include "readers/source_file.h"

namespace libshard::convert {

// What a bad source does (the loader's on_error, one word for both): kRaise, the first bad
// source stops the job and nothing opens as a complete dataset; kSkip, bad sources are left out
// and listed with the reason in OUT/skipped.txt. (This enum was convert::OnError with kFail.)
using OnError = ::libshard::OnError;

// Progress of a running Pack, reported on the calling thread after every source.
struct PackProgress {
  uint64_t files_done = 0;   // sources handled this run (packed or skipped)
  uint64_t files_total = 0;  // sources to handle this run
  uint64_t bytes_done = 0;   // source bytes handled this run
  uint64_t bytes_total = 0;
  uint64_t skipped = 0;
  double elapsed_s = 0;
  bool finished = false;     // the last call, after Finish()
};

// How messages name a setting: as libshard.pack()'s keyword ('shard_size') or as the flag of
// `libshard pack` (--shard-size); PackOptionTable (pack/option_parsing.h) holds both.
enum class OptionSpelling { kApi, kCli };

// A pack job's options: the writer configuration (libshard/writer_config.h: how samples are
// stored, the layout, the parallelism, the attributes; `source_root` is SRC, recorded absolute,
// and `created_by` defaults to "libshard pack <version>") plus where the sources are and what to
// take from them. PackOptionTable reads both, the writer's rows as every front end reads them.
struct PackOptions : WriterConfig {
  // Sources (see source_list.h): a directory walked recursively (WriterConfig::source_root),
  // and/or a list file ("-" = stdin).
  std::string files_from;
  // What source_root holds (readers/cache_source.h): sample files (kFiles), or one cache whose
  // samples become the dataset's, in the cache's order (kDeepSpec, kAutoModel, kTorchSpec);
  // kAuto decides from the directory's manifest (DetectSourceFormat). A cache cannot be combined
  // with files_from.
  SourceFormat source_format = SourceFormat::kAuto;
  std::vector<std::string> include;  // globs; default: the known sample extensions
  std::vector<std::string> exclude;
  std::string output;                // the dataset directory

  std::vector<std::string> fields;   // keep only these tensors (empty: all)
  // A stacked-layer tensor [L, K, H] (vLLM / speculators) to present as aux_hidden_state
  // [1, L, (K-1)H] + hidden_state [1, L, H] (readers/layer_split_source.h); empty: none.
  std::string split_layers;
  OnError on_error = OnError::kRaise;
  // At most one of resume / append. resume: continue an interrupted job in `output` from its
  // journal (or start it when there is none). A finished dataset is left as it is: OK with
  // PackSummary::nothing_to_resume when it holds every selected source, else InvalidArgument
  // telling to --append the sources it lacks. append: add the sources whose relative path is not
  // yet in the complete dataset `output`. Both first check the identity of what `output` holds
  // against this job's attributes (the --attr given and a cache source's manifest):
  // CheckWriteIdentity (libshard/writer.h), refused on a difference, or with
  // allow_identity_change set aside (PackSummary::set_aside) and written afresh.
  bool resume = false;
  bool append = false;
  uint32_t part_index = 0;           // convert only slice part_index of part_count (PartSlice)
  uint32_t part_count = 1;
  bool allow_varying_dims = false;   // let dims other than the sequence dim vary across sources
  bool hash_sources = true;          // record xxh3-64 of each source file's bytes in provenance
  SourceOptions source_options;
  std::function<void(const PackProgress&)> progress;  // optional
  // How the job's messages name settings ("use --append" or "use 'append'").
  OptionSpelling spelling = OptionSpelling::kApi;
};

struct SkippedSource {
  std::string path;    // relative path
  std::string reason;  // the Status text
};

struct PackSummary {
  std::string output;
  uint64_t sources_selected = 0;   // after filters and --part
  uint64_t already_present = 0;    // left out by --resume / --append
  bool nothing_to_resume = false;  // --resume found OUT complete with every selected source
  uint64_t samples_added = 0;      // this run
  std::vector<SkippedSource> skipped;
  uint64_t bytes_in = 0;           // source bytes of the samples added this run
  uint64_t bytes_out = 0;          // shard bytes (padding included) of the samples added this run
  uint64_t raw_bytes = 0;          // decoded payload bytes of the samples added this run
  WriteSummary dataset;            // totals of the whole dataset after this run
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;     // of this process (getrusage)
  std::string skipped_report;      // path of skipped.txt when any source was skipped
  SourceFormat source_format = SourceFormat::kFiles;  // what the sources were (kAuto resolved)
  // Cache manifest keys too large for a dataset attribute (CacheSource::omitted_keys).
  std::vector<std::string> omitted_attributes;
  // What --resume / --append found in OUT of another identity and set aside with
  // allow_identity_change (CheckWriteIdentity, libshard/writer.h): this run then wrote OUT afresh.
  std::vector<std::string> set_aside;
};

// Checks the options alone (no file system access): no sources or no output, resume with append,
// a bad part, a field named twice, and the writer configuration (ValidateWriterConfig: its bounds,
// the encoding). Messages name the settings as `spelling` says. The CLI maps this to exit code 2.
Status ValidatePackOptions(const PackOptions& options,
                           OptionSpelling spelling = OptionSpelling::kApi);

// Runs a pack job. `output` is locked (DatasetLock) for the whole job, from before it is first
// inspected until after the commit: a second job on it fails at once with AlreadyExists naming
// the holder. Errors: InvalidArgument for bad options (the CLI maps it to exit 2 when it
// comes from option checking), and for source and schema problems the Status of the failing
// source, prefixed with "sample N (PATH)".
Result<PackSummary> Pack(const PackOptions& options);

// Peak resident set size of this process in bytes.
uint64_t PeakRssBytes();

}  // namespace libshard::convert
