// The loader's option table (LoaderOptionTable), the checks of a LoaderOptions
// (ValidateLoaderOptions) and the one place its "auto" settings are decided
// (ResolveLoaderOptions). loader.h documents each setting; the table's doc lines are what front
// ends show.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "libshard/loader.h"
#include "libshard/option_table.h"

namespace libshard {
namespace {

using Spec = OptionSpec<LoaderOptions>;
using Kind = OptionValue::Kind;
constexpr std::string_view kWhat = "Loader option";

template <typename T>
Spec Count(std::string_view name, T LoaderOptions::*member, std::string_view default_value,
           uint64_t min, uint64_t max, std::string_view unset, std::string_view doc) {
  Spec s;
  s.name = s.member = name;
  s.type = OptionType::kCount;
  s.py_type = unset.empty() ? "int" : "Optional[int]";
  s.default_value = default_value;
  s.min = min;
  s.max = max;
  s.unset = unset;
  s.doc = doc;
  s.set = [member, min, max, unset, doc](LoaderOptions& o, const OptionValue& v,
                                         std::string_view spelled) -> Status {
    uint64_t x = 0;
    LIBSHARD_RETURN_IF_ERROR(option_table::ToCount(kWhat, spelled, v, min, max, unset, doc, &x));
    o.*member = static_cast<T>(x);
    return Status::OK();
  };
  s.get = [member](const LoaderOptions& o) { return static_cast<uint64_t>(o.*member); };
  return s;
}

Spec Bytes(std::string_view name, uint64_t LoaderOptions::*member, std::string_view default_value,
           uint64_t min, uint64_t max, std::string_view doc) {
  Spec s;
  s.name = s.member = name;
  s.type = OptionType::kBytes;
  s.py_type = "Union[int, str]";
  s.default_value = default_value;
  s.min = min;
  s.max = max;
  s.doc = doc;
  s.set = [member, min, max, doc](LoaderOptions& o, const OptionValue& v,
                                  std::string_view spelled) -> Status {
    return option_table::ToBytes(kWhat, spelled, v, min, max, doc, &(o.*member));
  };
  s.get = [member](const LoaderOptions& o) { return o.*member; };
  return s;
}

Spec Bool(std::string_view name, bool LoaderOptions::*member, std::string_view default_value,
          std::string_view doc) {
  Spec s;
  s.name = s.member = name;
  s.type = OptionType::kBool;
  s.py_type = "bool";
  s.default_value = default_value;
  s.doc = doc;
  s.set = [member](LoaderOptions& o, const OptionValue& v, std::string_view spelled) {
    return option_table::ToBool(kWhat, spelled, v, &(o.*member));
  };
  return s;
}

Spec Number(std::string_view name, double LoaderOptions::*member, std::string_view default_value,
            bool non_negative, std::string_view doc) {
  Spec s;
  s.name = s.member = name;
  s.type = OptionType::kNumber;
  s.py_type = "float";
  s.default_value = default_value;
  s.doc = doc;
  s.set = [member, non_negative, doc](LoaderOptions& o, const OptionValue& v,
                                      std::string_view spelled) {
    return option_table::ToNumber(kWhat, spelled, v, non_negative, doc, &(o.*member));
  };
  return s;
}

// One of `choices`, parsed by the library's Parse* function; None gives `none` when set.
template <typename E>
Spec Choice(std::string_view name, E LoaderOptions::*member, Result<E> (*parse)(std::string_view),
            std::string_view default_value, std::vector<std::string_view> choices,
            std::type_identity_t<std::optional<E>> none, std::string_view doc) {
  Spec s;
  s.name = s.member = name;
  s.type = OptionType::kChoice;
  s.py_type = none ? "Optional[str]" : "str";
  s.default_value = default_value;
  s.choices = std::move(choices);
  s.doc = doc;
  s.set = [member, parse, none, doc](LoaderOptions& o, const OptionValue& v,
                                     std::string_view spelled) -> Status {
    if (v.kind == Kind::kNone && none) {
      o.*member = *none;
      return Status::OK();
    }
    if (v.kind != Kind::kText)
      return option_table::Bad(kWhat, spelled, "must be a string, got " + v.Describe() + " (" +
                                                   std::string(doc) + ")");
    Result<E> parsed = parse(v.text);
    if (!parsed.ok())
      return option_table::Bad(kWhat, spelled, "= " + parsed.status().message() + " (" +
                                                   std::string(doc) + ")");
    o.*member = *parsed;
    return Status::OK();
  };
  return s;
}

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
  std::vector<Spec> t;
  // Order.
  t.push_back(Bool("shuffle", &O::shuffle, "True", "shuffle the order (False: dataset order)"));
  t.push_back(Count("seed", &O::seed, "0", 0, UINT64_MAX, "", "the shuffle's seed"));
  t.push_back(Count("epoch", &O::epoch, "0", 0, UINT64_MAX, "", "the epoch to start with"));
  t.push_back(Count("rank", &O::rank, "0", 0, UINT32_MAX - 1, "",
                    "this process's rank, 0 <= rank < world_size"));
  t.push_back(Count("world_size", &O::world_size, "1", 1, UINT32_MAX, "",
                    "ranks sharing each epoch"));
  t.push_back(Bool("drop_last", &O::drop_last, "False",
                   "drop the epoch's tail instead of wrapping around"));
  t.push_back(Count("order", &O::order, "2", 1, 2, "",
                    "the shuffle's version: 2, O(1) per position; 1, the order of libshard "
                    "before versions"));
  t.push_back(Custom("resume", "resume", OptionType::kState, "Optional[Dict[str, Any]]", "None",
                     "a state() to continue from (overrides seed, epoch and order)", nullptr));
  // What to read.
  t.push_back(Custom("fields", "fields", OptionType::kNames, "Optional[List[str]]", "None",
                     "read only these fields (None: every field)", SetFields));
  t.push_back(Count("max_len", &O::max_len, "None", 1, UINT64_MAX, "whole samples",
                    "read only the first max_len positions of each sequence"));
  // Batching.
  t.push_back(Count("batch_size", &O::batch_size, "None", 1, kMaxLoaderBatchSize,
                    "single samples", "samples per batch"));
  t.push_back(Count("max_tokens", &O::max_tokens, "None", 1, UINT64_MAX, "no token budget",
                    "token-budget batches of at most this many tokens"));
  {
    Spec s = Choice("token_budget", &O::token_budget, ParseTokenBudget, "'auto'",
                    {"auto", "sum", "padded"}, std::nullopt,
                    "how max_tokens bounds a batch; auto: padded with padded batches, else sum");
    s.aliases = {"budget"};
    t.push_back(std::move(s));
  }
  t.push_back(Choice("oversized", &O::oversized, ParseOversizedSample, "'batch'",
                     {"batch", "error"}, std::nullopt,
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
  t.push_back(Choice("collate", &O::collate, ParseCollate, "None", {"none", "pad", "pack"},
                     std::optional<Collate>(Collate::kNone),
                     "batches assembled in C++: padded or packed; None: lists of samples"));
  t.push_back(Number("padding_value", &O::padding_value, "0", false,
                     "collate='pad': the value of padded positions"));
  t.push_back(Custom("padding_values", "padding_values", OptionType::kNumberMap,
                     "Optional[Dict[str, float]]", "None",
                     "collate='pad': per field padding values", SetPaddingValues));
  t.push_back(Bool("consumer_pads", &O::consumer_pads, "False",
                   "the caller pads batches itself: auto settings resolve as with collate='pad'"));
  // Memory and I/O.
  t.push_back(Bytes("memory_budget", &O::memory_budget, "'2GiB'", kMinLoaderMemoryBudget,
                    kMaxLoaderMemoryBudget, "bytes of the pinned arena; a few GiB is typical"));
  t.push_back(Count("queue_depth", &O::queue_depth, "64", 1, kMaxLoaderQueueDepth, "",
                    "reads in flight; 64 is a good default"));
  t.push_back(Bytes("read_size", &O::read_size, "'4MiB'", 0, kMaxLoaderReadSize,
                    "large samples are read in pieces of this size, rounded up to 4096"));
  t.push_back(Choice("engine", &O::engine, ParseIoEngineKind, "'auto'",
                     {"auto", "uring", "pread"}, std::nullopt,
                     "the I/O engine; env LIBSHARD_ENGINE overrides auto"));
  t.push_back(Choice("io_mode", &O::io_mode, ParseIoMode, "'auto'",
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
  t.push_back(Count("worker_threads", &O::worker_threads, "0", 0, kMaxLoaderWorkerThreads, "",
                    "checksum and decoding threads; 0 chooses from the dataset and the cores"));
  t.push_back(Custom("verify", "verify_checksums", OptionType::kBool, "Optional[bool]", "None",
                     "None or True: check every byte served (a fields/max_len read field by "
                     "field); False: check nothing",
                     SetVerify));
  t.push_back(Bool("verify_checksums", &O::verify_checksums, "True",
                   "check every byte served against its sample or field checksum"));
  t.push_back(Choice("on_error", &O::on_error, ParseOnError, "'raise'", {"raise", "skip"},
                     std::nullopt, "a corrupt sample: raise, or skip it (counted in stats)"));
  // Observability.
  t.push_back(Number("slow_wait_warning_seconds", &O::slow_wait_warning_seconds, "10.0", true,
                     "a log line when the consumer waits this long; 0 turns it off"));
  t.push_back(Number("stats_interval_seconds", &O::stats_interval_seconds, "0.0", true,
                     "periodic stats lines every this many seconds; 0 turns them off"));
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
