// The loader option group "order" (loader/order_options.h): its settings' table and the one place
// their spellings become an Order.
#include "loader/order_options.h"

#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace libshard {
namespace {

using Kind = OptionValue::Kind;
using Spec = OptionSpec<OrderSpelling>;
constexpr std::string_view kWhat = "Loader option";

constexpr std::string_view kKinds[] = {"shuffled", "unshuffled", "node_local", "caller", "follow"};

Status Bad(std::string_view spelled, const std::string& problem) {
  return option_table::Bad(kWhat, spelled, problem);
}

// A count row of the group; None leaves the setting unset (the kind's default).
template <typename T>
Spec CountRow(std::string_view name, std::string_view py_type, std::string_view default_value,
              uint64_t min, uint64_t max, std::string_view doc,
              std::optional<T> OrderSpelling::*m) {
  Spec s;
  s.name = name;
  s.member = name;
  s.type = OptionType::kCount;
  s.py_type = py_type;
  s.default_value = default_value;
  s.min = min;
  s.max = max;
  s.group = "order";
  s.doc = doc;
  s.set = [min, max, doc, m](OrderSpelling& o, const OptionValue& v,
                             std::string_view spelled) -> Status {
    if (v.kind == Kind::kNone) {
      (o.*m).reset();
      return Status::OK();
    }
    uint64_t x = 0;
    LIBSHARD_RETURN_IF_ERROR(option_table::ToCount(kWhat, spelled, v, min, max, "", doc, &x));
    o.*m = static_cast<T>(x);
    return Status::OK();
  };
  return s;
}

std::vector<Spec> MakeSpecs() {
  std::vector<Spec> t;
  {
    Spec s;
    s.name = "kind";
    s.member = "kind";
    s.type = OptionType::kChoice;
    s.py_type = "str";
    s.default_value = "'shuffled'";
    s.choices = std::vector<std::string_view>(std::begin(kKinds), std::end(kKinds));
    s.group = "order";
    s.doc = "the kind of order (docs/ORDER.md): shuffled or unshuffled over all ranks (§1-§4), "
            "node_local (§5), caller (a sampler's, §6), follow (a dataset being written, §7)";
    s.set = [](OrderSpelling& o, const OptionValue& v, std::string_view spelled) -> Status {
      std::string text;
      LIBSHARD_RETURN_IF_ERROR(option_table::ToText(kWhat, spelled, v, &text));
      for (std::string_view k : kKinds) {
        if (k == text) {
          o.kind = text;
          return Status::OK();
        }
      }
      return Bad(spelled, "= '" + text +
                              "' is not a kind of order; use shuffled, unshuffled, node_local, "
                              "caller or follow");
    };
    t.push_back(std::move(s));
  }
  {
    Spec s;
    s.name = "shuffle";
    s.member = "shuffle";
    s.type = OptionType::kBool;
    s.py_type = "bool";
    s.default_value = "True";
    s.group = "order";
    s.doc = "node_local, follow: shuffle (False: the dataset's order within the kind's rules)";
    s.set = [](OrderSpelling& o, const OptionValue& v, std::string_view spelled) -> Status {
      if (v.kind == Kind::kNone) {
        o.shuffle.reset();
        return Status::OK();
      }
      bool b = false;
      LIBSHARD_RETURN_IF_ERROR(option_table::ToBool(kWhat, spelled, v, &b));
      o.shuffle = b;
      return Status::OK();
    };
    t.push_back(std::move(s));
  }
  t.push_back(CountRow<uint64_t>("seed", "int", "0", 0, UINT64_MAX, "the shuffle's seed",
                                 &OrderSpelling::seed));
  t.push_back(CountRow<uint32_t>(
      "version", "int", "2", kOrderV1, kOrderV2,
      "shuffled, follow: the order version (docs/ORDER.md §1): 2, O(1) per position; 1, the "
      "order of libshard before order versions",
      &OrderSpelling::version));
  t.push_back(CountRow<uint32_t>("nodes", "Optional[int]", "None", 1, UINT32_MAX,
                                 "node_local: the number of nodes (None: from the launcher)",
                                 &OrderSpelling::nodes));
  t.push_back(CountRow<uint32_t>(
      "node_rank", "Optional[int]", "None", 0, kAutoNodeRank - 1,
      "node_local: this process's node (None: from the launcher, else rank / ranks per node)",
      &OrderSpelling::node_rank));
  t.push_back(CountRow<uint64_t>(
      "shuffle_window", "int", "4096", 1, kMaxLoaderShuffleWindow,
      "follow: arrivals shuffled within windows growing to this many",
      &OrderSpelling::shuffle_window));
  return t;
}

// The kinds a spelling asks for, compared by what they are: "shuffled" and "unshuffled" are both
// the global order.
std::string Family(std::string_view kind) {
  return kind == "shuffled" || kind == "unshuffled" ? "global" : std::string(kind);
}

std::string Words(std::string_view family) {
  if (family == "global") return "the global order (docs/ORDER.md §1-§4)";
  if (family == "node_local") return "the node-local order (docs/ORDER.md §5)";
  if (family == "caller") return "a caller's order, a sampler (docs/ORDER.md §6)";
  return "the follow order (docs/ORDER.md §7)";
}

std::string FamilyOf(const Order& order) {
  switch (order.kind()) {
    case OrderKind::kGlobal: return "global";
    case OrderKind::kNodeLocal: return "node_local";
    case OrderKind::kCaller: return "caller";
    case OrderKind::kFollow: return "follow";
  }
  return "global";
}

}  // namespace

const OptionTable<OrderSpelling>& OrderOptionTable() {
  static const OptionTable<OrderSpelling>* const table =
      new OptionTable<OrderSpelling>(kWhat, MakeSpecs());
  return *table;
}

Result<Order> MakeOrder(const Order& base, const std::vector<OptionEntry>& given,
                        OrderSpelling* explicit_settings,
                        std::map<std::string, std::string>* spelled_as) {
  const OptionTable<OrderSpelling>& table = OrderOptionTable();
  OrderSpelling sp;
  std::map<std::string, std::string> spelled;  // setting -> how the caller spelled it
  // The kinds asked for, and those refused (locality='global', follow=False, ...), with their
  // spellings.
  std::vector<std::pair<std::string, std::string>> asked;
  std::vector<std::pair<std::string, std::string>> refused;
  // Settings given as None: the kind's default, not the base's (as set one at a time).
  std::set<std::string> defaulted;
  const auto set = [&](const std::string& key, const OptionValue& v,
                       const std::string& as) -> Status {
    if (v.kind == Kind::kNone) {
      defaulted.insert(key);
      return Status::OK();
    }
    const auto [it, fresh] = spelled.emplace(key, as);
    if (!fresh)
      return Bad(as, "is given twice (also as '" + it->second + "'); give it once");
    return table.Find(key)->set(sp, v, as);
  };
  const auto flag = [&](std::string_view name, const OptionValue& v, const std::string& kind,
                        const std::string& words) -> Status {
    if (v.kind == Kind::kNone) return Status::OK();
    bool on = false;
    LIBSHARD_RETURN_IF_ERROR(option_table::ToBool(kWhat, name, v, &on));
    (on ? asked : refused)
        .emplace_back(kind, std::string(name) + (on ? "=True" : "=False") + words);
    return Status::OK();
  };
  for (const OptionEntry& e : given) {
    const OptionValue& v = e.value;
    if (e.name == "order") {
      if (v.kind == Kind::kGroup) {
        for (const OptionEntry& g : v.entries) {
          if (table.Find(g.name) == nullptr)
            return Bad("order." + g.name,
                       "is not a setting of an order; use kind, shuffle, seed, version, nodes, "
                       "node_rank or shuffle_window (docs/ORDER.md)");
          LIBSHARD_RETURN_IF_ERROR(set(g.name, g.value, "order." + g.name));
          if (g.name == "kind" && sp.kind)
            asked.emplace_back(Family(*sp.kind), "order=Order." + *sp.kind + "(...)");
        }
      } else {
        // An integer: the order version of earlier releases' `order=1|2`.
        LIBSHARD_RETURN_IF_ERROR(set("version", v, "order"));
      }
    } else if (e.name == "locality") {
      if (v.kind == Kind::kNone) continue;
      std::string text;
      LIBSHARD_RETURN_IF_ERROR(option_table::ToText(kWhat, "locality", v, &text));
      if (text == "node") {
        asked.emplace_back("node_local", "locality='node'");
      } else if (text == "global") {
        refused.emplace_back("node_local", "locality='global'");
      } else {
        return Bad("locality", "= '" + text +
                                   "' is not one of global, node (global: each epoch spread "
                                   "over all ranks; node: each node reads its own share of the "
                                   "dataset every epoch, order version 3)");
      }
    } else if (e.name == "caller_order") {
      LIBSHARD_RETURN_IF_ERROR(flag("caller_order", v, "caller", " (a sampler)"));
    } else if (e.name == "follow") {
      LIBSHARD_RETURN_IF_ERROR(flag("follow", v, "follow", ""));
    } else if (table.Find(e.name) != nullptr && e.name != "kind" && e.name != "version") {
      LIBSHARD_RETURN_IF_ERROR(set(e.name, v, e.name));
    } else {
      return Bad(e.name, "is not an option of the order");
    }
  }

  if (explicit_settings != nullptr) *explicit_settings = sp;
  if (spelled_as != nullptr) *spelled_as = spelled;

  // The kind: what the spellings ask for (all the same), else the base's unless refused.
  std::string family;
  std::string family_spelled;
  for (const auto& [kind, as] : asked) {
    if (family.empty()) {
      family = kind;
      family_spelled = as;
    } else if (kind != family) {
      return Status::InvalidArgument("Loader options " + family_spelled + " and " + as +
                                     " ask for two kinds of order, " + Words(family) + " and " +
                                     Words(kind) + "; give one");
    }
  }
  for (const auto& [kind, as] : refused) {
    if (kind == family)
      return Status::InvalidArgument("Loader options " + family_spelled + " and " + as +
                                     " contradict each other; give one");
  }
  if (family.empty()) {
    // Refusing the base's kind (caller_order=False, ...) leaves the global order.
    family = FamilyOf(base);
    for (const auto& [kind, as] : refused)
      if (kind == family) family = "global";
  }

  // The settings: as given, else the base's where it has them, else the kind's defaults.
  // The base's settings, but for those given as None.
  const auto keep = [&](const char* key) { return defaulted.count(key) == 0; };
  const GlobalOrder* base_global = base.get<GlobalOrder>();
  const NodeLocalOrder* base_node = keep("nodes") || keep("node_rank") ? base.get<NodeLocalOrder>()
                                                                        : nullptr;
  const FollowOrder* base_follow = base.get<FollowOrder>();
  const bool base_shuffle =
      base.kind() == OrderKind::kCaller || !keep("shuffle") ? true : base.shuffle();
  const bool shuffle = sp.shuffle.value_or(base_shuffle);
  const uint64_t seed = sp.seed.value_or(keep("seed") ? base.seed() : 0);
  const uint32_t base_version = !keep("version") ? kOrderLatest
                                : base_global    ? base_global->version
                                : base_follow    ? base_follow->version
                                                 : kOrderLatest;
  const uint32_t version = sp.version.value_or(base_version);
  // A setting given in the group that the kind has not is a mistake to name; a flat one is
  // ignored, as the releases before the group ignored it.
  const auto not_for = [&](std::initializer_list<const char*> keys,
                           std::string_view kind) -> Status {
    for (const char* key : keys) {
      const auto it = spelled.find(key);
      if (it != spelled.end() && it->second.rfind("order.", 0) == 0)
        return Bad(it->second, "does not apply to " + std::string(kind));
    }
    return Status::OK();
  };

  if (family == "global") {
    LIBSHARD_RETURN_IF_ERROR(
        not_for({"nodes", "node_rank", "shuffle_window"}, "the shuffled or unshuffled order"));
    bool on = shuffle;
    if (sp.kind && (*sp.kind == "shuffled" || *sp.kind == "unshuffled")) {
      on = *sp.kind == "shuffled";
      if (sp.shuffle && *sp.shuffle != on)
        return Bad(spelled["shuffle"], std::string("= ") + (*sp.shuffle ? "True" : "False") +
                                           " contradicts order=Order." + *sp.kind +
                                           "(); use Order." + (on ? "unshuffled" : "shuffled") +
                                           "()");
    }
    return Order(GlobalOrder{on, seed, version});
  }
  if (family == "node_local") {
    LIBSHARD_RETURN_IF_ERROR(not_for({"version", "shuffle_window"}, "the node-local order"));
    if (sp.version && *sp.version != kOrderV2)
      return Bad(spelled["version"], "= " + std::to_string(*sp.version) +
                                         " cannot be node-local: the node-local order is order "
                                         "version 3 (docs/ORDER.md §5); leave order at its "
                                         "default");
    NodeLocalOrder n;
    n.shuffle = shuffle;
    n.seed = seed;
    n.nodes = sp.nodes.value_or(base_node != nullptr && keep("nodes") ? base_node->nodes : 0);
    n.node_rank = sp.node_rank.value_or(base_node != nullptr && keep("node_rank")
                                            ? base_node->node_rank
                                            : kAutoNodeRank);
    return Order(n);
  }
  if (family == "caller") {
    LIBSHARD_RETURN_IF_ERROR(
        not_for({"shuffle", "seed", "version", "nodes", "node_rank", "shuffle_window"},
                "a caller's order, whose sampler decides it"));
    return Order(CallerOrder{});
  }
  LIBSHARD_RETURN_IF_ERROR(not_for({"nodes", "node_rank"}, "the follow order"));
  FollowOrder f;
  f.shuffle = shuffle;
  f.seed = seed;
  f.shuffle_window = sp.shuffle_window.value_or(
      base_follow != nullptr && keep("shuffle_window") ? base_follow->shuffle_window
                                                       : kDefaultShuffleWindow);
  f.version = version;
  return Order(f);
}

}  // namespace libshard
