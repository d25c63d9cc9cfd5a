// The loader option group "order" (LoaderOptionTable, libshard/loader.h): how front ends spell an
// order, made into one Order (libshard/order.h).
//
// Two spellings, which may be mixed as long as no setting is given twice:
//   the group   order={"kind": "node_local", "nodes": 4, "seed": 3}   (Python: Order.node_local(
//               nodes=4, seed=3)); kind is "shuffled", "unshuffled", "node_local", "caller" or
//               "follow", the other keys the kind's settings (OrderOptionTable); order=2, an
//               integer, is the order version of the shuffled order;
//   flat        shuffle=, seed=, order=1|2, locality="global"|"node", nodes=, node_rank=,
//               caller_order=True (a sampler), follow=True, shuffle_window= (the keywords of the
//               releases before the group), each a row of LoaderOptionTable in group "order".
// A flat setting the kind has not is ignored, as those releases ignored it (nodes of the global
// order, the seed of a caller's order); in the group it is an error.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "libshard/loader.h"  // OrderSpelling, OrderOptionTable
#include "libshard/option_table.h"
#include "libshard/order.h"
#include "libshard/status.h"

namespace libshard {

// `base` changed by `given`: entries named as LoaderOptionTable's rows of group "order" ("order"
// itself, a group or an integer, and the flat names), in any sequence. InvalidArgument naming the
// option for a bad value, a setting given twice, spellings that ask for two kinds (locality="node"
// with follow=True; order={"kind": "node_local"} with caller_order=True), a setting the kind
// contradicts (order=1 with the node-local order, shuffle=False with kind "shuffled"), or a
// group setting the kind has not.
// `explicit_settings` (optional) receives the settings given with a value (not None), and
// `spelled` (optional) how each was spelled ("seed", "order.seed", "order" for the version).
Result<Order> MakeOrder(const Order& base, const std::vector<OptionEntry>& given,
                        OrderSpelling* explicit_settings = nullptr,
                        std::map<std::string, std::string>* spelled_as = nullptr);

}  // namespace libshard
