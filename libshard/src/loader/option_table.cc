// The loader's option table (LoaderOptionTable), the checks of a LoaderOptions
// (ValidateLoaderOptions) and the one place its "auto" settings are decided
// (ResolveLoaderOptions). loader.h documents each setting; the table's doc lines are what front
// ends show.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "libshard/loader.h"
#include "libshard/option_rows.h"

namespace libshard {
namespace {

using Spec = OptionSpec<LoaderOptions>;
using Kind = OptionValue::Kind;
constexpr std::string_view kWhat = "Loader option";

Status SetFields(LoaderOptions& o, const OptionValue& v, std::string_view spelled) {
  if (v.kind == Kind::kNone) {
    o.fields.clear();
    return Status::OK();
  }
  if (v.kind == Kind::kText) {
    o.fields = {v.text};
    return Status::OK();
  }
  if (v.kind != Kind::kTextList)
    return option_table::Bad(kWhat, spelled, "must be a list of field names, got " + v.Describe());
  // An empty selection is a mistake to name, not "all": None reads every field.
  if (v.texts.empty())
    return option_table::Bad(kWhat, spelled,
                             "is an empty list, which selects no field; give the field names to "
                             "read, or None to read every field");
  o.fields = v.texts;
  return Status::OK();
}

Status SetBucketWindow(LoaderOptions& o, const OptionValue& v, std::string_view spelled) {
  if (v.kind == Kind::kText && v.text == "auto") {
    o.bucket_window = kAutoBucketWindow;
    return Status::OK();
  }
  if (v.kind == Kind::kText)
    return option_table::Bad(kWhat, spelled,
                             "= " + v.Describe() + " is not 'auto', a number of samples or None");
  return option_table::ToCount(kWhat, spelled, v, 0, kMaxLoaderBucketWindow, "off",
                               "samples per window of length-aware batching", &o.bucket_window);
}

Status SetPaddingValues(LoaderOptions& o, const OptionValue& v, std::string_view spelled) {
  if (v.kind == Kind::kNone) {
    o.padding_values.clear();
    return Status::OK();
  }
  if (v.kind != Kind::kNumberMap)
    return option_table::Bad(kWhat, spelled, "must be a dict {field name: number}, got " +
                                                 v.Describe());
  for (const auto& [field, value] : v.numbers)
    if (std::isnan(value) || std::isinf(value))
      return option_table::Bad(kWhat, std::string(spelled) + "['" + field + "']",
                               "is not a finite number; give a number");
  o.padding_values = v.numbers;
  return Status::OK();
}

// None or True: check every byte served (FORMAT.md §3.9); False: check nothing.
Status SetVerify(LoaderOptions& o, const OptionValue& v, std::string_view spelled) {
  if (v.kind == Kind::kNone) {
    o.verify_checksums = true;
    return Status::OK();
  }
  return option_table::ToBool(kWhat, spelled, v, &o.verify_checksums);
}

// True: pin where a CUDA driver is installed (PinMemory::kAuto); False: never; or the words
// "auto", "on", "off" (libshard.Loader passes "on" or "off": it knows from torch whether CUDA
// is usable, so the library makes no probe of its own).
Status SetPinMemory(LoaderOptions& o, const OptionValue& v, std::string_view spelled) {
  if (v.kind == Kind::kText) {
    Result<PinMemory> parsed = ParsePinMemory(v.text);
    if (!parsed.ok())
      return option_table::Bad(kWhat, spelled, "= " + parsed.status().message() +
                                                   " (True, False, 'auto', 'on' or 'off')");
    o.pin_memory = *parsed;
    return Status::OK();
  }
  bool b = false;
  LIBSHARD_RETURN_IF_ERROR(option_table::ToBool(kWhat, spelled, v, &b));
  o.pin_memory = b ? PinMemory::kAuto : PinMemory::kOff;
  return Status::OK();
}

Spec Custom(std::string_view name, std::string_view member, OptionType type,
            std::string_view py_type, std::string_view default_value, std::string_view doc,
            Status (*set)(LoaderOptions&, const OptionValue&, std::string_view)) {
  Spec s;
  s.name = name;
  s.member = member;
  s.type = type;
  s.py_type = py_type;
  s.default_value = default_value;
  s.doc = doc;
  if (set != nullptr) s.set = set;
  return s;
}

std::vector<Spec> MakeSpecs() {
  using O = LoaderOptions;
  using option_rows::Bool;
  using option_rows::Bytes;
  using option_rows::Choice;
  using option_rows::Count;
  using option_rows::Member;
  using option_rows::Number;
  std::vector<Spec> t;
  // Order.
  t.push_back(Bool<O>(kWhat, "shuffle", "shuffle", Member<&O::shuffle>, "True",
                      "shuffle the order (False: dataset order)"));
  t.push_back(Count<O>(kWhat, "seed", "seed", Member<&O::seed>, "0", 0, UINT64_MAX, "",
                       "the shuffle's seed"));
  t.push_back(Count<O>(kWhat, "epoch", "epoch", Member<&O::epoch>, "0", 0, UINT64_MAX, "",
                       "the epoch to start with"));
  t.push_back(Count<O>(kWhat, "rank", "rank", Member<&O::rank>, "0", 0, UINT32_MAX - 1, "",
                       "this process's rank, 0 <= rank < world_size"));
  t.push_back(Count<O>(kWhat, "world_size", "world_size", Member<&O::world_size>, "1", 1,
                       UINT32_MAX, "", "ranks sharing each epoch"));
  t.push_back(Bool<O>(kWhat, "drop_last", "drop_last", Member<&O::drop_last>, "False",
                      "drop the epoch's tail instead of wrapping around"));
  t.push_back(Count<O>(kWhat, "order", "order", Member<&O::order>, "2", 1, 2, "",
                       "the shuffle's order version: 2, O(1) per position; 1, the order of "
                       "libshard before order versions"));
  t.push_back(Custom("resume", "resume", OptionType::kState, "Optional[Dict[str, Any]]", "None",
                     "a state() to continue from (overrides seed, epoch and order)", nullptr));
  // What to read.
  t.push_back(Custom("fields", "fields", OptionType::kNames, "Optional[List[str]]", "None",
                     "read only these fields (None: every field)", SetFields));
  t.push_back(Count<O>(kWhat, "max_len", "max_len", Member<&O::max_len>, "None", 1, UINT64_MAX,
                       "whole samples", "read only the first max_len positions of each sequence"));
  // Batching.
  t.push_back(Count<O>(kWhat, "batch_size", "batch_size", Member<&O::batch_size>, "None", 1,
                       kMaxLoaderBatchSize, "single samples", "samples per batch"));
  t.push_back(Count<O>(kWhat, "max_tokens", "max_tokens", Member<&O::max_tokens>, "None", 1,
                       UINT64_MAX, "no token budget",
                       "token-budget batches of at most this many tokens"));
  {
    Spec s = Choice<O>(kWhat, "token_budget", "token_budget", Member<&O::token_budget>,
                       ParseTokenBudget, "'auto'", {"auto", "sum", "padded"}, std::nullopt,
                       "how max_tokens bounds a batch; auto: padded with padded batches, else sum");
    s.aliases = {"budget"};
    t.push_back(std::move(s));
  }
  t.push_back(Choice<O>(kWhat, "oversized", "oversized", Member<&O::oversized>,
                        ParseOversizedSample, "'batch'", {"batch", "error"}, std::nullopt,
                        "a sample longer than max_tokens: a batch of its own, or an error"));
  {
    Spec s = Custom("bucket_window", "bucket_window", OptionType::kCount,
                    "Union[int, str, None]", "'auto'",
                    "length-aware batching over windows of this many samples; auto: 4096 with "
                    "padded batches, else off; None or 0: off",
                    SetBucketWindow);
    s.max = kMaxLoaderBucketWindow;
    s.unset = "off";
    s.choices = {"auto"};
    s.get = [](const LoaderOptions& o) {
      return o.bucket_window == kAutoBucketWindow ? 0 : o.bucket_window;
    };
    t.push_back(std::move(s));
  }
  // Collation.
  t.push_back(Choice<O>(kWhat, "collate", "collate", Member<&O::collate>, ParseCollate, "None",
                        {"none", "pad", "pack"}, std::optional<Collate>(Collate::kNone),
                        "batches assembled in C++: padded or packed; None: lists of samples"));
  t.push_back(Number<O>(kWhat, "padding_value", "padding_value", Member<&O::padding_value>, "0",
                        false, "collate='pad': the value of padded positions"));
  t.push_back(Custom("padding_values", "padding_values", OptionType::kNumberMap,
                     "Optional[Dict[str, float]]", "None",
                     "collate='pad': per field padding values", SetPaddingValues));
  t.push_back(Bool<O>(kWhat, "consumer_pads", "consumer_pads", Member<&O::consumer_pads>, "False",
                      "the caller pads batches itself: auto settings resolve as with "
                      "collate='pad'"));
  // Memory and I/O.
  t.push_back(Bytes<O>(kWhat, "memory_budget", "memory_budget", Member<&O::memory_budget>,
                       "'2GiB'", kMinLoaderMemoryBudget, kMaxLoaderMemoryBudget,
                       "bytes of the pinned arena; a few GiB is typical"));
  t.push_back(Count<O>(kWhat, "queue_depth", "queue_depth", Member<&O::queue_depth>, "64", 1,
                       kMaxLoaderQueueDepth, "", "reads in flight; 64 is a good default"));
  t.push_back(Bytes<O>(kWhat, "read_size", "read_size", Member<&O::read_size>, "'4MiB'", 0,
                       kMaxLoaderReadSize,
                       "large samples are read in pieces of this size, rounded up to 4096"));
  t.push_back(Choice<O>(kWhat, "engine", "engine", Member<&O::engine>, ParseIoEngineKind,
                        "'auto'", {"auto", "uring", "pread"}, std::nullopt,
                        "the I/O engine; env LIBSHARD_ENGINE overrides auto"));
  t.push_back(Choice<O>(kWhat, "io_mode", "io_mode", Member<&O::io_mode>, ParseIoMode, "'auto'",
                        {"auto", "direct", "buffered"}, std::nullopt,
                        "O_DIRECT or buffered reads; env LIBSHARD_IO_MODE overrides auto"));
  {
    Spec s = Custom("pin_memory", "pin_memory", OptionType::kBool, "Union[bool, str]", "True",
                    "pin the arena for fast GPU copies, 64 MiB at a time as it is first used: "
                    "True or 'auto' where a CUDA driver is installed, 'on', False or 'off'",
                    SetPinMemory);
    s.choices = {"auto", "on", "off"};
    t.push_back(std::move(s));
  }
  t.push_back(Count<O>(kWhat, "worker_threads", "worker_threads", Member<&O::worker_threads>, "0",
                       0, kMaxLoaderWorkerThreads, "",
                       "checksum and decoding threads; 0 chooses from the dataset and the cores"));
  t.push_back(Custom("verify", "verify_checksums", OptionType::kBool, "Optional[bool]", "None",
                     "None or True: check every byte served (a fields/max_len read field by "
                     "field); False: check nothing",
                     SetVerify));
  t.push_back(Bool<O>(kWhat, "verify_checksums", "verify_checksums",
                      Member<&O::verify_checksums>, "True",
                      "check every byte served against its sample or field checksum"));
  t.push_back(Choice<O>(kWhat, "on_error", "on_error", Member<&O::on_error>, ParseOnError,
                        "'raise'", {"raise", "skip"}, std::nullopt,
                        "a corrupt sample: raise, or skip it (counted in stats)"));
  // Observability.
  t.push_back(Number<O>(kWhat, "slow_wait_warning_seconds", "slow_wait_warning_seconds",
                        Member<&O::slow_wait_warning_seconds>, "10.0", true,
                        "a log line when the consumer waits this long; 0 turns it off"));
  t.push_back(Number<O>(kWhat, "stats_interval_seconds", "stats_interval_seconds",
                        Member<&O::stats_interval_seconds>, "0.0", true,
                        "periodic stats lines every this many seconds; 0 turns them off"));
  // Follow mode (docs/ORDER.md §5).
  t.push_back(Bool<O>(kWhat, "follow", "follow", Member<&O::follow>, "False",
                      "serve the dataset while its writer writes it (Loader(path, follow=True))"));
  t.push_back(Count<O>(kWhat, "shuffle_window", "shuffle_window", Member<&O::shuffle_window>,
                       "4096", 1, kMaxLoaderShuffleWindow, "",
                       "follow mode: arrivals shuffled within windows growing to this many"));
  return t;
}

Status Bad(std::string_view name, const std::string& problem) {
  return option_table::Bad(kWhat, name, problem);
}

bool PaddedBatches(const LoaderOptions& o) {
  return o.collate == Collate::kPad || o.consumer_pads;
}

}  // namespace

const OptionTable<LoaderOptions>& LoaderOptionTable() {
  static const OptionTable<LoaderOptions>* const table =
      new OptionTable<LoaderOptions>(kWhat, MakeSpecs());
  return *table;
}

uint32_t AutoWorkerThreads(const Dataset& dataset, const LoaderOptions& options) {
  if (options.worker_threads > 0) return options.worker_threads;
  // Stored compressed (field codecs, fp8, or zstd that paid off): decoding scales with the
  // threads.
  const std::vector<uint8_t> codecs = dataset.field_codecs();
  const bool coded = std::any_of(codecs.begin(), codecs.end(), [](uint8_t c) { return c != 0; });
  if (!coded && dataset.total_stored_bytes() >= dataset.total_raw_bytes()) return 1;
  const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::min(cores, kAutoDecodeWorkers);
}

Status ValidateLoaderOptions(const LoaderOptions& o) {
  // Counts and byte sizes against the table's bounds (threads are started one per worker: an
  // unbounded count would exhaust the process's threads seconds later instead of failing now).
  LIBSHARD_RETURN_IF_ERROR(LoaderOptionTable().CheckBounds(o));
  if (o.follow && o.max_tokens > 0)
    return Bad("max_tokens", "does not apply to follow mode, whose first epoch is cut into "
                             "batch_size batches as samples arrive (docs/ORDER.md §5.2); use "
                             "batch_size, or max_tokens without follow once the dataset is "
                             "complete");
  if (o.resume && o.resume->follow_window > kMaxLoaderShuffleWindow)
    return Bad("resume.follow_window", "is " + std::to_string(o.resume->follow_window) +
                                           ", above " + std::to_string(kMaxLoaderShuffleWindow) +
                                           "; pass the state a Loader saved");
  if (o.resume && o.resume->follow_window > 0 && !o.follow)
    return Bad("resume", "is a state of the follow epoch of a dataset being written "
                         "(follow_window " + std::to_string(o.resume->follow_window) +
                         "): resume it with follow=True (Loader::Follow)");
  if (o.resume && (o.resume->order < 1 || o.resume->order > 2))
    return Bad("resume.order", "is " + std::to_string(o.resume->order) +
                                   ", not 1 or 2: the state was saved by a newer libshard; "
                                   "resume it with that version");
  if (o.batch_size > 1 && o.max_tokens > 0)
    return Status::InvalidArgument(
        "Loader options batch_size and max_tokens are exclusive (batch_size " +
        std::to_string(o.batch_size) + ", max_tokens " + std::to_string(o.max_tokens) +
        "): give batch_size for fixed-size batches or max_tokens for token-budget batches");
  if (o.token_budget > TokenBudget::kPadded)
    return Bad("token_budget", "is not one of auto, sum, padded");
  if (o.oversized > OversizedSample::kError) return Bad("oversized", "is not one of batch, error");
  if (o.collate > Collate::kPack) return Bad("collate", "is not one of none, pad, pack");
  if (o.bucket_window != kAutoBucketWindow && o.bucket_window > 0 && o.max_tokens == 0 &&
      o.batch_size <= 1)
    return Bad("bucket_window",
               std::to_string(o.bucket_window) +
                   " groups samples into batches of similar length: set max_tokens or "
                   "batch_size > 1 as well, or bucket_window 0");
  if ((o.padding_value != 0 || !o.padding_values.empty()) && o.collate != Collate::kPad)
    return Bad("padding_value", "/ padding_values apply to collate='pad' only (collate='" +
                                    std::string(o.collate == Collate::kPack ? "pack" : "none") +
                                    "')");
  if (std::isnan(o.padding_value)) return Bad("padding_value", "is NaN; give a number");
  for (const auto& [name, value] : o.padding_values)
    if (std::isnan(value)) return Bad("padding_values['" + name + "']", "is NaN; give a number");
  if (std::isnan(o.slow_wait_warning_seconds) || o.slow_wait_warning_seconds < 0)
    return Bad("slow_wait_warning_seconds",
               std::to_string(o.slow_wait_warning_seconds) +
                   " must be a number >= 0 (0 turns the warning off)");
  if (std::isnan(o.stats_interval_seconds) || o.stats_interval_seconds < 0)
    return Bad("stats_interval_seconds", std::to_string(o.stats_interval_seconds) +
                                             " must be a number >= 0 (0 turns periodic stats off)");
  return Status::OK();
}

Result<LoaderOptions> ResolveLoaderOptions(const LoaderOptions& options) {
  LIBSHARD_RETURN_IF_ERROR(ValidateLoaderOptions(options));
  LoaderOptions o = options;
  const bool padded = PaddedBatches(o);
  if (o.token_budget == TokenBudget::kAuto)
    o.token_budget = padded ? TokenBudget::kPadded : TokenBudget::kSum;
  if (o.bucket_window == kAutoBucketWindow) {
    const bool batched = o.max_tokens > 0 || o.batch_size > 1;
    o.bucket_window = padded && batched ? kAutoBucketWindowSize : 0;
  }
  return o;
}

}  // namespace libshard
