// The loader state's one encoding (libshard/loader_state.h; docs/ORDER.md §8): JSON text with a
// "state_version", and the unversioned dicts of earlier releases. The text is untrusted (a
// checkpoint file): its size and nesting are bounded before it is parsed, every value is checked
// for its type and range, and what it decodes to must pass ValidateLoaderState.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/manifest.h"  // CheckJsonNesting
#include "libshard/identity.h"  // IdentityDigestText
#include "libshard/loader_state.h"

namespace libshard {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr std::string_view kPass = "; pass the state a Loader saved (state() or state_dict())";

Status Bad(std::string_view key, std::string_view problem) {
  std::string name = "resume";
  if (!key.empty()) name += "." + std::string(key);
  return Status::InvalidArgument("Loader option '" + name + "' " + std::string(problem) +
                                 std::string(kPass));
}

std::string Shown(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

// A JSON object's keys as a state reads them: each read at most once, so that the ones left are
// the unknown ones.
class Reader {
 public:
  explicit Reader(const json& object) : object_(object) {}

  bool Has(const char* key) const { return object_.contains(key); }
  // Absent, or null.
  bool Null(const char* key) const { return !Has(key) || object_.at(key).is_null(); }

  Result<uint64_t> Unsigned(const char* key, std::string_view prefix = {}) {
    const std::string name = prefix.empty() ? key : std::string(prefix) + "." + key;
    if (!Has(key)) return Bad("", "misses the key '" + name + "'");
    read_.push_back(key);
    return ToUnsigned(object_.at(key), name);
  }
  Result<std::optional<uint64_t>> OptionalUnsigned(const char* key) {
    if (Null(key)) {
      if (Has(key)) read_.push_back(key);
      return std::optional<uint64_t>();
    }
    LIBSHARD_ASSIGN_OR_RETURN(const uint64_t v, Unsigned(key));
    return std::optional<uint64_t>(v);
  }
  Result<uint32_t> U32(const char* key, std::string_view prefix = {}) {
    LIBSHARD_ASSIGN_OR_RETURN(const uint64_t v, Unsigned(key, prefix));
    if (v > UINT32_MAX)
      return Bad(prefix.empty() ? key : std::string(prefix) + "." + key,
                 "= " + std::to_string(v) + " is too large");
    return static_cast<uint32_t>(v);
  }
  const json* Get(const char* key) {
    if (!Has(key)) return nullptr;
    read_.push_back(key);
    return &object_.at(key);
  }
  // The first key not read, or empty.
  std::string Unread() const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      bool read = false;
      for (const std::string& k : read_) read = read || k == it.key();
      if (!read) return it.key();
    }
    return {};
  }

  static Result<uint64_t> ToUnsigned(const json& v, const std::string& name) {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer())
      return Bad(name, "must be a non-negative integer, got " + Shown(v));
    return Bad(name, "must be a non-negative integer, got " + Shown(v) +
                         (v.is_number_float() ? " (a float, or an integer above 2^64 - 1)" : ""));
  }

 private:
  const json& object_;
  std::vector<std::string> read_;
};

Result<std::vector<uint64_t>> Skipped(const json* v) {
  std::vector<uint64_t> out;
  if (v == nullptr) return out;
  if (!v->is_array()) return Bad("skipped", "must be a list of sample indices, got " + Shown(*v));
  out.reserve(v->size());
  for (const json& e : *v) {
    LIBSHARD_ASSIGN_OR_RETURN(const uint64_t i, Reader::ToUnsigned(e, "skipped"));
    out.push_back(i);
  }
  return out;
}

Result<EpochBucketing> Bucketing(const json* v) {
  EpochBucketing b;
  if (v == nullptr || v->is_null()) return b;
  if (!v->is_object()) return Bad("bucketing", "must be a dict from state() or None");
  Reader r(*v);
  LIBSHARD_ASSIGN_OR_RETURN(b.window, r.Unsigned("window", "bucketing"));
  LIBSHARD_ASSIGN_OR_RETURN(b.batch_size, r.U32("batch_size", "bucketing"));
  LIBSHARD_ASSIGN_OR_RETURN(b.max_tokens, r.Unsigned("max_tokens", "bucketing"));
  const json* budget = r.Get("budget");
  if (budget == nullptr) return Bad("", "misses the key 'bucketing.budget'");
  if (!budget->is_string() ||
      (budget->get<std::string>() != "sum" && budget->get<std::string>() != "padded"))
    return Bad("bucketing.budget", "must be 'sum' or 'padded', got " + Shown(*budget));
  b.budget = budget->get<std::string>() == "padded" ? TokenBudget::kPadded : TokenBudget::kSum;
  if (std::string k = r.Unread(); !k.empty())
    return Bad("bucketing." + k, "is not a key of a state's bucketing");
  return b;
}

Result<NodeProgress> Progress(const json* v) {
  NodeProgress p;
  if (v == nullptr || v->is_null()) return p;
  if (!v->is_object()) return Bad("locality", "must be a dict from state() or None");
  Reader r(*v);
  LIBSHARD_ASSIGN_OR_RETURN(p.nodes, r.U32("nodes", "locality"));
  LIBSHARD_ASSIGN_OR_RETURN(p.local_world_size, r.U32("local_world_size", "locality"));
  LIBSHARD_ASSIGN_OR_RETURN(p.steps, r.Unsigned("steps", "locality"));
  if (std::string k = r.Unread(); !k.empty())
    return Bad("locality." + k, "is not a key of a state's locality");
  return p;
}

// The state dicts of the releases before the encoding had a version: "seed", "epoch" and
// "position" always; "order" (absent: 1, the only order there was), "skipped", and each
// kind's keys, None or absent when they do not apply (docs/ORDER.md §8.2). Other keys are
// ignored, as those releases ignored them.
Result<LoaderState> DecodeUnversioned(const json& j) {
  Reader r(j);
  LoaderState s;
  LIBSHARD_ASSIGN_OR_RETURN(const uint64_t seed, r.Unsigned("seed"));
  LIBSHARD_ASSIGN_OR_RETURN(s.epoch, r.Unsigned("epoch"));
  LIBSHARD_ASSIGN_OR_RETURN(s.position, r.Unsigned("position"));
  uint32_t order = kOrderV1;
  if (r.Has("order")) {
    LIBSHARD_ASSIGN_OR_RETURN(order, r.U32("order"));
  }
  LIBSHARD_ASSIGN_OR_RETURN(s.skipped, Skipped(r.Get("skipped")));
  LIBSHARD_ASSIGN_OR_RETURN(const std::optional<uint64_t> digest,
                            r.OptionalUnsigned("steps_digest"));
  LIBSHARD_ASSIGN_OR_RETURN(const std::optional<uint64_t> window,
                            r.OptionalUnsigned("follow_window"));
  LIBSHARD_ASSIGN_OR_RETURN(const EpochBucketing bucketing, Bucketing(r.Get("bucketing")));
  LIBSHARD_ASSIGN_OR_RETURN(const NodeProgress progress, Progress(r.Get("locality")));
  const bool follow = window.value_or(0) > 0;
  if (order > kOrderV3)
    return Bad("order", "is " + std::to_string(order) +
                            ", not 0, 1, 2 or 3: the state was saved by a newer libshard; "
                            "resume it with that version");
  if (order != kOrderV3 && progress.nodes > 0)
    return Bad("locality", "is set, but only order version 3 states have one");
  if (follow && (order == kOrderCaller || order == kOrderV3))
    return Bad("follow_window", "is set in a state of order " + std::to_string(order) +
                                    ": only a state of the follow epoch (order 1 or 2) has one");
  if ((follow || order == kOrderCaller) && bucketing.window > 0)
    return Bad("bucketing", "is set in a state of an order without length-aware batching");
  if (order == kOrderCaller) {
    s.cursor = CallerCursor{digest.value_or(0)};
  } else if (follow) {
    s.cursor = FollowCursor{seed, order, *window};
  } else if (order == kOrderV3) {
    s.cursor = NodeLocalCursor{seed, bucketing, progress};
  } else {
    s.cursor = GlobalCursor{seed, order, bucketing};
  }
  return s;
}

// Version 2's origin (docs/ORDER.md §8.1): "identity" (16 hex digits) or null, "samples" (global
// and node-local) and "shuffle" (all but a caller's), each absent or null when not recorded.
Status DecodeOrigin(Reader& r, OrderKind kind, StateOrigin* origin) {
  if (const json* v = r.Get("identity"); v != nullptr && !v->is_null()) {
    const bool hex = v->is_string() && v->get<std::string>().size() == 16 &&
                     v->get<std::string>().find_first_not_of("0123456789abcdef") ==
                         std::string::npos;
    if (!hex)
      return Bad("identity", "must be the dataset's identity digest as 16 lower-case hex digits, "
                             "or None, got " + Shown(*v));
    origin->identity = std::stoull(v->get<std::string>(), nullptr, 16);
  }
  if (kind == OrderKind::kGlobal || kind == OrderKind::kNodeLocal) {
    LIBSHARD_ASSIGN_OR_RETURN(origin->samples, r.OptionalUnsigned("samples"));
  }
  if (kind != OrderKind::kCaller) {
    if (const json* v = r.Get("shuffle"); v != nullptr && !v->is_null()) {
      if (!v->is_boolean()) return Bad("shuffle", "must be true, false or None, got " + Shown(*v));
      origin->shuffle = v->get<bool>();
    }
  }
  return Status::OK();
}

// Versions 1 and 2 (docs/ORDER.md §8.1): the keys of the state's kind, no other; version 2 also
// the origin's.
Result<LoaderState> DecodeVersioned(const json& j, uint64_t version) {
  Reader r(j);
  LoaderState s;
  LIBSHARD_RETURN_IF_ERROR(r.Unsigned("state_version").status());
  LIBSHARD_ASSIGN_OR_RETURN(const uint32_t order, r.U32("order"));
  LIBSHARD_ASSIGN_OR_RETURN(s.epoch, r.Unsigned("epoch"));
  LIBSHARD_ASSIGN_OR_RETURN(s.position, r.Unsigned("position"));
  const json* skipped = r.Get("skipped");
  if (skipped == nullptr) return Bad("", "misses the key 'skipped'");
  LIBSHARD_ASSIGN_OR_RETURN(s.skipped, Skipped(skipped));
  std::string kind;
  if (order == kOrderCaller) {
    kind = "an order the caller gave";
    LIBSHARD_ASSIGN_OR_RETURN(const uint64_t digest, r.Unsigned("steps_digest"));
    s.cursor = CallerCursor{digest};
  } else if (order == kOrderV3) {
    kind = "the node-local order";
    LIBSHARD_ASSIGN_OR_RETURN(const uint64_t seed, r.Unsigned("seed"));
    LIBSHARD_ASSIGN_OR_RETURN(const EpochBucketing bucketing, Bucketing(r.Get("bucketing")));
    LIBSHARD_ASSIGN_OR_RETURN(const NodeProgress progress, Progress(r.Get("locality")));
    s.cursor = NodeLocalCursor{seed, bucketing, progress};
  } else if (order == kOrderV1 || order == kOrderV2) {
    LIBSHARD_ASSIGN_OR_RETURN(const uint64_t seed, r.Unsigned("seed"));
    if (r.Has("follow_window")) {
      kind = "the follow epoch";
      LIBSHARD_ASSIGN_OR_RETURN(const uint64_t window, r.Unsigned("follow_window"));
      s.cursor = FollowCursor{seed, order, window};
    } else {
      kind = "the global order";
      LIBSHARD_ASSIGN_OR_RETURN(const EpochBucketing bucketing, Bucketing(r.Get("bucketing")));
      s.cursor = GlobalCursor{seed, order, bucketing};
    }
  } else {
    return Bad("order", "is " + std::to_string(order) +
                            ", not 0, 1, 2 or 3: the state was saved by a newer libshard; "
                            "resume it with that version");
  }
  if (version >= 2) LIBSHARD_RETURN_IF_ERROR(DecodeOrigin(r, s.kind(), &s.origin));
  if (std::string k = r.Unread(); !k.empty())
    return Bad(k, "is not a key of a state of " + kind + " (order " + std::to_string(order) +
                      ", state_version " + std::to_string(version) + ", docs/ORDER.md §8.1)");
  return s;
}

ordered_json BucketingJson(const EpochBucketing& b) {
  if (b.window == 0) return nullptr;
  ordered_json out;
  out["window"] = b.window;
  out["batch_size"] = b.batch_size;
  out["max_tokens"] = b.max_tokens;
  out["budget"] = b.budget == TokenBudget::kPadded ? "padded" : "sum";
  return out;
}

}  // namespace

std::string EncodeLoaderState(const LoaderState& state) {
  ordered_json j;
  j["state_version"] = kLoaderStateVersion;
  j["order"] = state.order_version();
  j["epoch"] = state.epoch;
  j["position"] = state.position;
  j["skipped"] = state.skipped;
  if (const GlobalCursor* c = state.get<GlobalCursor>()) {
    j["seed"] = c->seed;
    j["bucketing"] = BucketingJson(c->bucketing);
  } else if (const NodeLocalCursor* c = state.get<NodeLocalCursor>()) {
    j["seed"] = c->seed;
    j["bucketing"] = BucketingJson(c->bucketing);
    if (c->progress.nodes == 0) {
      j["locality"] = nullptr;
    } else {
      ordered_json l;
      l["nodes"] = c->progress.nodes;
      l["local_world_size"] = c->progress.local_world_size;
      l["steps"] = c->progress.steps;
      j["locality"] = std::move(l);
    }
  } else if (const CallerCursor* c = state.get<CallerCursor>()) {
    j["steps_digest"] = c->steps_digest;
  } else if (const FollowCursor* c = state.get<FollowCursor>()) {
    j["seed"] = c->seed;
    j["follow_window"] = c->window;
  }
  const StateOrigin& o = state.origin;
  j["identity"] = o.identity ? ordered_json(IdentityDigestText(*o.identity)) : ordered_json();
  if (state.kind() == OrderKind::kGlobal || state.kind() == OrderKind::kNodeLocal)
    j["samples"] = o.samples ? ordered_json(*o.samples) : ordered_json();
  if (state.kind() != OrderKind::kCaller)
    j["shuffle"] = o.shuffle ? ordered_json(*o.shuffle) : ordered_json();
  return j.dump();
}

Result<LoaderState> DecodeLoaderState(std::string_view text) {
  if (text.size() > kMaxLoaderStateBytes)
    return Bad("", "is " + std::to_string(text.size()) + " bytes, more than a state can be (" +
                       std::to_string(kMaxLoaderStateBytes) + ")");
  // Bounded before parsing: the JSON parser recurses per level.
  if (!format::CheckJsonNesting(text, "loader state").ok())
    return Bad("", "is nested deeper than a state is");
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("", "is not JSON text");
  if (!j.is_object())
    return Bad("", "must be a dict from state() (a JSON object), got " + Shown(j));
  LoaderState state;
  if (!j.contains("state_version")) {
    LIBSHARD_ASSIGN_OR_RETURN(state, DecodeUnversioned(j));
  } else {
    LIBSHARD_ASSIGN_OR_RETURN(const uint64_t version,
                              Reader::ToUnsigned(j.at("state_version"), "state_version"));
    if (version > kLoaderStateVersion)
      return Bad("state_version", "is " + std::to_string(version) +
                                      ": the state was saved by a newer libshard, which this one "
                                      "cannot read (it reads version " +
                                      std::to_string(kLoaderStateVersion) +
                                      "); resume it with that libshard");
    if (version == 0) return Bad("state_version", "is 0, which no libshard writes");
    LIBSHARD_ASSIGN_OR_RETURN(state, DecodeVersioned(j, version));
  }
  LIBSHARD_RETURN_IF_ERROR(ValidateLoaderState(state));
  return state;
}

}  // namespace libshard
