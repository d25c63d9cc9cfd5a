// Order (libshard/order.h): the order value's accessors, names and bounds.
#include <string>

#include "libshard/order.h"

namespace libshard {
namespace {

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

std::string Seeded(bool shuffle, uint64_t seed) {
  return shuffle ? "seed " + std::to_string(seed) : "unshuffled";
}

}  // namespace

bool Order::shuffle() const {
  return std::visit(Overload{[](const CallerOrder&) { return false; },
                             [](const auto& o) { return o.shuffle; }},
                    value_);
}

uint64_t Order::seed() const {
  return std::visit(Overload{[](const CallerOrder&) { return uint64_t{0}; },
                             [](const auto& o) { return o.seed; }},
                    value_);
}

std::string_view Order::name() const {
  switch (kind()) {
    case OrderKind::kGlobal: return get<GlobalOrder>()->shuffle ? "shuffled" : "unshuffled";
    case OrderKind::kNodeLocal: return "node_local";
    case OrderKind::kCaller: return "caller";
    case OrderKind::kFollow: return "follow";
  }
  return "?";
}

std::string Order::Describe() const {
  return std::visit(
      Overload{
          [](const GlobalOrder& o) {
            return o.shuffle ? "shuffled (seed " + std::to_string(o.seed) + ", order version " +
                                   std::to_string(o.version) + ")"
                             : std::string("unshuffled (the dataset's order)");
          },
          [](const NodeLocalOrder& o) {
            return "node-local (order version 3, " +
                   (o.nodes == 0 ? std::string("nodes from the launcher")
                                 : std::to_string(o.nodes) + " nodes") +
                   ", " + Seeded(o.shuffle, o.seed) + ")";
          },
          [](const CallerOrder&) { return std::string("the caller's (a sampler)"); },
          [](const FollowOrder& o) {
            return "follow (shuffle window " + std::to_string(o.shuffle_window) + ", " +
                   Seeded(o.shuffle, o.seed) + ")";
          }},
      value_);
}

Status ValidateOrder(const Order& order) {
  const auto version = [](uint32_t v) -> Status {
    if (v == kOrderV1 || v == kOrderV2) return Status::OK();
    return Status::InvalidArgument(
        "Loader option 'order.version' = " + std::to_string(v) +
        " is not an order version of the shuffled order; use 2 (O(1) per position, the "
        "default) or 1 (the order of libshard before order versions)");
  };
  if (const GlobalOrder* g = order.get<GlobalOrder>()) return version(g->version);
  if (const FollowOrder* f = order.get<FollowOrder>()) {
    if (f->shuffle_window < 1 || f->shuffle_window > kMaxLoaderShuffleWindow)
      return Status::InvalidArgument(
          "Loader option 'order.shuffle_window' = " + std::to_string(f->shuffle_window) +
          " is out of range; use 1.." + std::to_string(kMaxLoaderShuffleWindow) +
          " (follow mode: arrivals shuffled within windows growing to this many)");
    return version(f->version);
  }
  return Status::OK();
}

}  // namespace libshard
