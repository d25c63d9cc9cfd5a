// The loader's option table (LoaderOptionTable), the checks of a LoaderOptions
// (ValidateLoaderOptions) and the one place its "auto" settings are decided
// (ResolveLoaderOptions). loader.h documents each setting; the table's doc lines are what front
// ends show.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "libshard/loader.h"
#include "libshard/option_rows.h"
#include "loader/order_options.h"
#include "loader/recipes/batch_recipe.h"
#include "loader/step_factory.h"  // CheckResumeFits

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

// A row of the group "order" (loader/order_options.h): its value changes the current order.
Status SetOrder(LoaderOptions& o, const OptionValue& v, std::string_view spelled,
                std::string_view name) {
  (void)spelled;
  LIBSHARD_ASSIGN_OR_RETURN(o.order, MakeOrder(o.order, {OptionEntry{std::string(name), v}}));
  return Status::OK();
}

// A state's encoding (EncodeLoaderState); None: start afresh.
Status SetResume(LoaderOptions& o, const OptionValue& v, std::string_view spelled) {
  if (v.kind == Kind::kNone) {
    o.resume.reset();
    return Status::OK();
  }
  if (v.kind != Kind::kText)
    return option_table::Bad(kWhat, spelled,
                             "must be a state's encoding (the text of EncodeLoaderState; in "
                             "Python, load_state_dict takes the dict), got " + v.Describe());
  LIBSHARD_ASSIGN_OR_RETURN(LoaderState state, DecodeLoaderState(v.text));
  o.resume = std::move(state);
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

// A flat spelling of the order of earlier releases (group "order").
Spec OrderRow(std::string_view name, OptionType type, std::string_view py_type,
              std::string_view default_value, std::string_view doc) {
  Spec s;
  s.name = name;
  s.member = "order";
  s.type = type;
  s.py_type = py_type;
  s.default_value = default_value;
  s.group = "order";
  s.doc = doc;
  s.set = [name](LoaderOptions& o, const OptionValue& v, std::string_view spelled) {
    return SetOrder(o, v, spelled, name);
  };
  return s;
}

// The members of LoaderOptions::sequence_parallel, for the table's rows.
uint32_t& SpDegree(LoaderOptions& o) { return o.sequence_parallel.degree; }
SplitRule& SpRule(LoaderOptions& o) { return o.sequence_parallel.rule; }
uint32_t& SpTttLength(LoaderOptions& o) { return o.sequence_parallel.ttt_length; }
uint32_t& SpUlyssesSize(LoaderOptions& o) { return o.sequence_parallel.ulysses_size; }

std::vector<Spec> MakeSpecs() {
  using O = LoaderOptions;
  using option_rows::Bool;
  using option_rows::Bytes;
  using option_rows::Choice;
  using option_rows::Count;
  using option_rows::Member;
  using option_rows::Number;
  std::vector<Spec> t;
  // Order: the group "order" (libshard/order.h, loader/order_options.h) ...
  {
    Spec s = OrderRow("order", OptionType::kGroup, "Union[int, OrderOptions, None]", "None",
                      "the order: a group {kind, and its settings} (Python: libshard.Order), or "
                      "the shuffled order's version 1 or 2; None: shuffled, seed 0, version 2");
    s.min = kOrderV1;
    s.max = kOrderV2;
    s.choices = {"shuffled", "unshuffled", "node_local", "caller", "follow"};
    t.push_back(std::move(s));
  }
  // ... and its flat spellings of earlier releases.
  // Their default None is "not given": the order's own (shuffled, seed 0, global, window 4096).
  t.push_back(OrderRow("shuffle", OptionType::kBool, "Optional[bool]", "None",
                       "shuffle the order (False: dataset order; None: True)"));
  {
    Spec s = OrderRow("seed", OptionType::kCount, "Optional[int]", "None",
                      "the shuffle's seed (None: 0)");
    s.max = UINT64_MAX;
    t.push_back(std::move(s));
  }
  {
    Spec s = OrderRow("locality", OptionType::kChoice, "Optional[str]", "None",
                      "global (None): each epoch spread over all ranks; node: each node reads its "
                      "own share of the dataset every epoch (order version 3)");
    s.choices = {"global", "node"};
    t.push_back(std::move(s));
  }
  {
    Spec s = OrderRow("nodes", OptionType::kCount, "Optional[int]", "None",
                      "locality='node': the number of nodes");
    s.min = 1;
    s.max = UINT32_MAX;
    s.unset = "from the launcher";
    t.push_back(std::move(s));
  }
  {
    Spec s = OrderRow("node_rank", OptionType::kCount, "Optional[int]", "None",
                      "locality='node': this process's node (None: from the launcher, else "
                      "rank / ranks per node)");
    s.max = kAutoNodeRank - 1;
    s.unset = "from the launcher";
    t.push_back(std::move(s));
  }
  t.push_back(OrderRow("caller_order", OptionType::kBool, "bool", "False",
                       "the caller gives each epoch's steps (Loader.set_epoch_steps; a sampler)"));
  t.push_back(OrderRow("follow", OptionType::kBool, "bool", "False",
                       "serve the dataset while its writer writes it (Loader(path, follow=True))"));
  {
    Spec s = OrderRow("shuffle_window", OptionType::kCount, "Optional[int]", "None",
                      "follow mode: arrivals shuffled within windows growing to this many "
                      "(None: 4096)");
    s.min = 1;
    s.max = kMaxLoaderShuffleWindow;
    t.push_back(std::move(s));
  }
  // Where the order is and what it is spread over.
  t.push_back(Count<O>(kWhat, "epoch", "epoch", Member<&O::epoch>, "0", 0, UINT64_MAX, "",
                       "the epoch to start with"));
  t.push_back(Count<O>(kWhat, "rank", "rank", Member<&O::rank>, "0", 0, UINT32_MAX - 1, "",
                       "this process's rank, 0 <= rank < world_size"));
  t.push_back(Count<O>(kWhat, "world_size", "world_size", Member<&O::world_size>, "1", 1,
                       UINT32_MAX, "", "ranks sharing each epoch"));
  t.push_back(Bool<O>(kWhat, "drop_last", "drop_last", Member<&O::drop_last>, "False",
                      "drop the epoch's tail instead of wrapping around"));
  // Sequence parallelism (LoaderOptions::sequence_parallel; Python: libshard.SequenceParallel).
  t.push_back(Count<O>(kWhat, "sequence_parallel", "sequence_parallel.degree", &SpDegree, "None",
                       1, kMaxSequenceParallel, "off",
                       "ranks per sequence-parallel group: each group of this many consecutive "
                       "ranks gets the same samples, each rank its slice of every sequence"));
  t.push_back(Choice<O>(kWhat, "sp_rule", "sequence_parallel.rule", &SpRule, ParseSplitRule,
                        "'even'",
                        {"even", "specforge-dspark", "specforge-usp", "torchspec-usp",
                         "speculators"},
                        std::nullopt,
                        "sequence_parallel: the trainer's split rule (libshard/sequence_parallel.h)"));
  t.push_back(Count<O>(kWhat, "sp_ttt_length", "sequence_parallel.ttt_length", &SpTttLength, "0",
                       0, UINT32_MAX, "",
                       "sequence_parallel with a USP rule: the overlap, the trainer's ttt_length"));
  t.push_back(Count<O>(kWhat, "sp_ulysses_size", "sequence_parallel.ulysses_size",
                       &SpUlyssesSize, "0", 0, kMaxSequenceParallel, "",
                       "sequence_parallel with torchspec-usp: the Ulysses degree (0: the whole "
                       "group)"));
  t.push_back(Custom("resume", "resume", OptionType::kState, "Optional[str]", "None",
                     "a state's encoding to continue from (EncodeLoaderState; its epoch, "
                     "position and order's seed and version win)",
                     SetResume));
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
                        {"none", "pad", "pack", "specforge-eagle3", "modelopt-eagle",
                         "speculators-eagle3"},
                        std::optional<Collate>(Collate::kNone),
                        "batches assembled in C++: padded or packed, or a trainer's own batch "
                        "(a recipe); None: lists of samples"));
  t.push_back(Count<O>(kWhat, "recipe_len", "recipe_len", Member<&O::recipe_len>, "None", 1,
                       UINT64_MAX, "unset",
                       "a recipe's length: SpecForge max_len, ModelOpt train_len, speculators "
                       "total_seq_len"));
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
  return t;
}

Status Bad(std::string_view name, const std::string& problem) {
  return option_table::Bad(kWhat, name, problem);
}

Status ValidateSequenceParallel(const LoaderOptions& o) {
  const SequenceParallel& sp = o.sequence_parallel;
  if (sp.rule > SplitRule::kSpeculators)
    return Bad("sp_rule", "is not a known split rule");
  if (sp.degree == 0) {  // None: off
    if (sp.ttt_length != 0 || sp.ulysses_size != 0 || sp.rule != SplitRule::kEven)
      return Bad("sp_rule", "/ sp_ttt_length / sp_ulysses_size apply with sequence_parallel "
                            "only, which is None (off); give sequence_parallel=1 for a group of "
                            "one that applies the rule");
    return Status::OK();
  }
  const std::string n = std::to_string(sp.degree);
  if (o.world_size % sp.degree != 0)
    return Bad("sequence_parallel",
               "= " + n + " does not divide world_size " + std::to_string(o.world_size) +
                   ": the world is cut into groups of " + n +
                   " consecutive ranks; give a degree that divides the world size");
  if (o.rank >= o.world_size)
    return Bad("rank", std::to_string(o.rank) + " is out of range for world_size " +
                           std::to_string(o.world_size));
  const SplitRuleInfo& info = SplitRuleInfoOf(sp.rule);
  // A rule that splits a batch's packed row needs the recipe that packs it (PackedRecipeRows):
  // the loader then reads each sample's rows behind the rank's part of the row.
  const BatchRecipeEntry* recipe = FindBatchRecipe(o.collate);
  const bool packs = recipe != nullptr && recipe->packed != nullptr;
  if (info.packed && !packs)
    return Bad("sp_rule", "'" + std::string(info.name) +
                              "' splits a batch's packed row, not one sample: give it with the "
                              "batch recipe that packs the row (collate='speculators-eagle3'), "
                              "or use 'even'");
  if (info.packed && o.recipe_len % sp.degree != 0)
    return Bad("sequence_parallel", "= " + n + " does not divide recipe_len " +
                                        std::to_string(o.recipe_len) + " (the packed row, "
                                        "--total-seq-len): each rank gets recipe_len / " + n +
                                        " of its positions; give a multiple of the degree");
  if (sp.ttt_length != 0 && !info.takes_ttt)
    return Bad("sp_ttt_length", std::to_string(sp.ttt_length) + " applies to the USP rules only "
                                "(sp_rule='specforge-usp' or 'torchspec-usp'), not '" +
                                std::string(info.name) + "'");
  if (sp.ulysses_size != 0 && sp.degree % sp.ulysses_size != 0)
    return Bad("sp_ulysses_size", std::to_string(sp.ulysses_size) +
                                      " does not divide sequence_parallel " + n);
  // A group of one under 'even' reads every sample whole, unpadded: a batch loses nothing.
  const bool whole = sp.degree == 1 && sp.rule == SplitRule::kEven;
  if (packs && !info.packed && !whole)
    return Bad("sp_rule", "'" + std::string(info.name) + "' splits samples, but collate='" +
                              std::string(recipe->name) + "' packs a batch into one row: use "
                              "sp_rule='speculators', which splits the packed row");
  if (o.collate != Collate::kNone && !whole && !info.packed)
    return Bad("collate", "does not apply with sequence_parallel yet: a collated batch would "
                          "lose each slice's place (Sample::sequence_slice); take lists of "
                          "samples (collate None) and collate in the trainer");
  return Status::OK();
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

namespace {

// A setting of the order given together with a state that decides it otherwise: the state
// continues its own order (its seed; its version, and the follow epoch's window), so a value
// given that differs would be silently overridden. InvalidArgument naming the setting as it was
// spelled, both values and what to do.
Status CheckResumeSettings(const LoaderState& resume, const Order& order,
                           const OrderSpelling& given,
                           const std::map<std::string, std::string>& spelled) {
  if (resume.kind() == OrderKind::kCaller || order.kind() == OrderKind::kCaller)
    return Status::OK();
  const auto differs = [&](const char* key, const std::string& what, const std::string& mine,
                           const std::string& saved) {
    const auto it = spelled.find(key);
    const std::string as = it != spelled.end() ? it->second : key;
    return Status::InvalidArgument(
        "Loader option '" + as + "' is " + mine + ", but the state to resume (option 'resume') "
        "was saved with " + what + " " + saved + ", which decides the order of its epoch and of "
        "every later one; leave '" + as + "' out (or give " + as + "=" + saved + ") to resume the "
        "state, or "
        "drop the state to start over with " + what + " " + mine);
  };
  if (given.seed && *given.seed != resume.seed())
    return differs("seed", "seed", std::to_string(*given.seed), std::to_string(resume.seed()));
  const bool versioned = resume.kind() == OrderKind::kGlobal || resume.kind() == OrderKind::kFollow;
  const bool loader_versioned =
      order.kind() == OrderKind::kGlobal || order.kind() == OrderKind::kFollow;
  if (given.version && versioned && loader_versioned && *given.version != resume.order_version())
    return differs("version", "order version", std::to_string(*given.version),
                   std::to_string(resume.order_version()));
  if (const FollowCursor* c = resume.get<FollowCursor>();
      c != nullptr && given.shuffle_window && *given.shuffle_window != c->window)
    return differs("shuffle_window", "shuffle_window", std::to_string(*given.shuffle_window),
                   std::to_string(c->window));
  return Status::OK();
}

}  // namespace

Result<LoaderOptions> LoaderOptionsFrom(const std::vector<OptionEntry>& given) {
  const OptionTable<LoaderOptions>& table = LoaderOptionTable();
  LoaderOptions o;
  std::vector<OptionEntry> order;
  for (const OptionEntry& e : given) {
    const OptionSpec<LoaderOptions>* row = table.Find(e.name);
    if (row != nullptr && row->group == "order") {
      order.push_back({std::string(row->name), e.value});
      continue;
    }
    LIBSHARD_RETURN_IF_ERROR(table.Set(o, e.name, e.value));
  }
  OrderSpelling explicit_settings;
  std::map<std::string, std::string> spelled;
  LIBSHARD_ASSIGN_OR_RETURN(o.order, MakeOrder(o.order, order, &explicit_settings, &spelled));
  if (o.resume)
    LIBSHARD_RETURN_IF_ERROR(CheckResumeSettings(*o.resume, o.order, explicit_settings, spelled));
  return o;
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
  LIBSHARD_RETURN_IF_ERROR(ValidateOrder(o.order));
  if (o.resume) {
    LIBSHARD_RETURN_IF_ERROR(ValidateLoaderState(*o.resume));
    LIBSHARD_RETURN_IF_ERROR(CheckResumeFits(o.order, *o.resume));
  }
  // What the order's kind leaves to the caller or to a later epoch.
  if (o.order.kind() == OrderKind::kFollow && o.max_tokens > 0)
    return Bad("max_tokens", "does not apply to follow mode, whose first epoch is cut into "
                             "batch_size batches as samples arrive (docs/ORDER.md §7.2); use "
                             "batch_size, or max_tokens without follow once the dataset is "
                             "complete");
  if (o.order.kind() == OrderKind::kCaller &&
      (o.batch_size > 1 || o.max_tokens > 0 ||
       (o.bucket_window != kAutoBucketWindow && o.bucket_window > 0)))
    return Status::InvalidArgument(
        "Loader options batch_size > 1, max_tokens and bucket_window do not apply to a caller's "
        "order (a sampler, docs/ORDER.md §6): the caller's steps are the batches (batch_size " +
        std::to_string(o.batch_size) + ", max_tokens " + std::to_string(o.max_tokens) +
        "); batch in the sampler (a batch sampler) instead");
  if (o.batch_size > 1 && o.max_tokens > 0)
    return Status::InvalidArgument(
        "Loader options batch_size and max_tokens are exclusive (batch_size " +
        std::to_string(o.batch_size) + ", max_tokens " + std::to_string(o.max_tokens) +
        "): give batch_size for fixed-size batches or max_tokens for token-budget batches");
  LIBSHARD_RETURN_IF_ERROR(ValidateSequenceParallel(o));
  if (o.token_budget > TokenBudget::kPadded)
    return Bad("token_budget", "is not one of auto, sum, padded");
  if (o.oversized > OversizedSample::kError) return Bad("oversized", "is not one of batch, error");
  if (o.collate > kLastCollate)
    return Bad("collate", "is not one of none, pad, pack or a batch recipe");
  const bool recipe = o.collate > Collate::kPack;
  if (recipe && o.recipe_len == 0)
    return Bad("recipe_len",
               "is unset: a batch recipe needs the trainer's length setting (SpecForge max_len, "
               "ModelOpt train_len, speculators total_seq_len)");
  if (!recipe && o.recipe_len != 0)
    return Bad("recipe_len", "applies to a batch recipe only (collate='specforge-eagle3', "
                             "'modelopt-eagle' or 'speculators-eagle3')");
  if (o.bucket_window != kAutoBucketWindow && o.bucket_window > 0 && o.max_tokens == 0 &&
      o.batch_size <= 1)
    return Bad("bucket_window",
               std::to_string(o.bucket_window) +
                   " groups samples into batches of similar length: set max_tokens or "
                   "batch_size > 1 as well, or bucket_window 0");
  if ((o.padding_value != 0 || !o.padding_values.empty()) && o.collate != Collate::kPad)
    return Bad("padding_value", "/ padding_values apply to collate='pad' only (collate='" +
                                    std::string(o.collate == Collate::kNone   ? "none"
                                                : o.collate == Collate::kPack ? "pack"
                                                                              : "a recipe") +
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
    o.bucket_window =
        padded && batched && o.order.kind() != OrderKind::kCaller ? kAutoBucketWindowSize : 0;
  }
  return o;
}

}  // namespace libshard
