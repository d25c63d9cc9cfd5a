// The order as one value (libshard/order.h) and how front ends spell it (the loader option group
// "order", loader/order_options.h): the group and the flat keywords of earlier releases make the
// same orders in any sequence; spellings without an order are refused naming the keyword; the
// factory (loader/step_factory.h) makes each kind's StepSequence and refuses a state its order
// cannot continue.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "libshard/loader.h"
#include "loader/caller_steps.h"
#include "loader/follow_order.h"
#include "loader/node_steps.h"
#include "loader/order_options.h"
#include "loader/step_factory.h"

namespace libshard {
namespace {

using ::testing::HasSubstr;

OptionValue Group(std::vector<OptionEntry> entries) {
  return OptionValue::Group(std::move(entries));
}
OptionEntry E(std::string name, OptionValue v) { return {std::move(name), std::move(v)}; }
OptionValue I(uint64_t v) { return OptionValue::Integer(v); }
OptionValue T(std::string v) { return OptionValue::Text(std::move(v)); }
OptionValue B(bool v) { return OptionValue::Bool(v); }

Order From(const std::vector<OptionEntry>& given) {
  Result<LoaderOptions> o = LoaderOptionsFrom(given);
  EXPECT_TRUE(o.ok()) << o.status().ToString();
  return o.ok() ? o->order : Order();
}

std::string ErrorOf(const std::vector<OptionEntry>& given) {
  Result<LoaderOptions> o = LoaderOptionsFrom(given);
  EXPECT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  return o.status().message();
}

TEST(OrderValue, KindsNamesAndDefaults) {
  EXPECT_EQ(Order(), Order::Shuffled(0, kOrderV2));
  EXPECT_EQ(Order().kind(), OrderKind::kGlobal);
  EXPECT_EQ(Order::Shuffled(3).name(), "shuffled");
  EXPECT_EQ(Order::Unshuffled().name(), "unshuffled");
  EXPECT_FALSE(Order::Unshuffled().shuffle());
  EXPECT_EQ(Order(NodeLocalOrder{.nodes = 2}).name(), "node_local");
  EXPECT_EQ(Order(CallerOrder{}).name(), "caller");
  EXPECT_EQ(Order(FollowOrder{}).name(), "follow");
  EXPECT_EQ(Order(CallerOrder{}).seed(), 0u);
  EXPECT_EQ(Order(FollowOrder{.seed = 4}).seed(), 4u);
  const FollowOrder unshuffled_follow{.shuffle = false, .seed = 4};
  EXPECT_EQ(unshuffled_follow.later(), (GlobalOrder{false, 4, kOrderV2}));
  EXPECT_THAT(Order::Shuffled(3, 1).Describe(), HasSubstr("seed 3, order version 1"));
  EXPECT_THAT(Order(NodeLocalOrder{}).Describe(), HasSubstr("nodes from the launcher"));
  EXPECT_TRUE(ValidateOrder(Order::Shuffled(0, 1)).ok());
  EXPECT_THAT(ValidateOrder(Order::Shuffled(0, 3)).message(), HasSubstr("order.version"));
  EXPECT_THAT(ValidateOrder(FollowOrder{.shuffle_window = 0}).message(),
              HasSubstr("order.shuffle_window"));
  EXPECT_THAT(ValidateOrder(FollowOrder{.shuffle_window = kMaxLoaderShuffleWindow + 1}).message(),
              HasSubstr("order.shuffle_window"));
}

TEST(OrderOptions, TheGroupAndTheFlatKeywordsMakeTheSameOrders) {
  EXPECT_EQ(From({}), Order::Shuffled());
  EXPECT_EQ(From({E("order", Group({E("kind", T("shuffled")), E("seed", I(3)),
                                    E("version", I(1))}))}),
            Order::Shuffled(3, 1));
  EXPECT_EQ(From({E("seed", I(3)), E("order", I(1))}), Order::Shuffled(3, 1));
  EXPECT_EQ(From({E("order", Group({E("kind", T("unshuffled"))}))}), Order::Unshuffled());
  EXPECT_EQ(From({E("shuffle", B(false))}), Order::Unshuffled());
  const Order node = NodeLocalOrder{.shuffle = true, .seed = 7, .nodes = 2, .node_rank = 1};
  EXPECT_EQ(From({E("order", Group({E("kind", T("node_local")), E("nodes", I(2)),
                                    E("node_rank", I(1)), E("seed", I(7))}))}),
            node);
  // The flat keywords in any sequence: the kind need not come first.
  EXPECT_EQ(From({E("nodes", I(2)), E("node_rank", I(1)), E("seed", I(7)),
                  E("locality", T("node"))}),
            node);
  EXPECT_EQ(From({E("locality", T("node")), E("seed", I(7)), E("nodes", I(2)),
                  E("node_rank", I(1)), E("order", I(2))}),
            node);
  EXPECT_EQ(From({E("caller_order", B(true)), E("seed", I(4)), E("shuffle", B(false))}),
            Order(CallerOrder{}));  // a sampler's order has no seed: ignored, as always
  EXPECT_EQ(From({E("order", Group({E("kind", T("caller"))}))}), Order(CallerOrder{}));
  const Order follow = FollowOrder{.shuffle = false, .seed = 11, .shuffle_window = 8};
  EXPECT_EQ(From({E("shuffle_window", I(8)), E("shuffle", B(false)), E("seed", I(11)),
                  E("follow", B(true))}),
            follow);
  EXPECT_EQ(From({E("order", Group({E("kind", T("follow")), E("shuffle_window", I(8)),
                                    E("shuffle", B(false)), E("seed", I(11))}))}),
            follow);
  // The group refined by flat keywords it does not give.
  EXPECT_EQ(From({E("order", Group({E("kind", T("node_local"))})), E("nodes", I(4))}),
            Order(NodeLocalOrder{.nodes = 4}));
  // Flat settings the kind has not are ignored, as they were (nodes of the global order).
  EXPECT_EQ(From({E("nodes", I(4)), E("shuffle_window", I(3))}), Order::Shuffled());
  EXPECT_EQ(From({E("locality", T("global")), E("follow", B(false))}), Order::Shuffled());
  // None is "not given".
  EXPECT_EQ(From({E("seed", OptionValue::None()), E("locality", OptionValue::None()),
                  E("order", OptionValue::None())}),
            Order::Shuffled());
}

TEST(OrderOptions, SpellingsWithoutAnOrderAreRefusedNamingTheKeyword) {
  EXPECT_THAT(ErrorOf({E("locality", T("node")), E("follow", B(true))}),
              HasSubstr("locality='node' and follow=True ask for two kinds of order"));
  EXPECT_THAT(ErrorOf({E("caller_order", B(true)), E("follow", B(true))}),
              HasSubstr("two kinds of order"));
  EXPECT_THAT(ErrorOf({E("order", Group({E("kind", T("node_local"))})),
                       E("caller_order", B(true))}),
              HasSubstr("order=Order.node_local(...) and caller_order=True"));
  EXPECT_THAT(ErrorOf({E("order", Group({E("kind", T("node_local"))})),
                       E("locality", T("global"))}),
              HasSubstr("contradict"));
  EXPECT_THAT(ErrorOf({E("locality", T("node")), E("order", I(1))}),
              HasSubstr("'order' = 1 cannot be node-local"));
  EXPECT_THAT(ErrorOf({E("order", Group({E("kind", T("shuffled"))})), E("shuffle", B(false))}),
              HasSubstr("contradicts order=Order.shuffled()"));
  EXPECT_THAT(ErrorOf({E("order", Group({E("kind", T("shuffled")), E("seed", I(1))})),
                       E("seed", I(2))}),
              HasSubstr("given twice"));
  EXPECT_THAT(ErrorOf({E("order", Group({E("kind", T("shuffled")), E("nodes", I(2))}))}),
              HasSubstr("'order.nodes' does not apply"));
  EXPECT_THAT(ErrorOf({E("order", Group({E("kind", T("caller")), E("seed", I(2))}))}),
              HasSubstr("'order.seed' does not apply"));
  EXPECT_THAT(ErrorOf({E("order", Group({E("kind", T("rack"))}))}),
              HasSubstr("'order.kind' = 'rack' is not a kind of order"));
  EXPECT_THAT(ErrorOf({E("order", Group({E("sede", I(1))}))}),
              HasSubstr("'order.sede' is not a setting of an order"));
  EXPECT_THAT(ErrorOf({E("order", I(3))}), HasSubstr("'order' = 3 is out of range"));
  EXPECT_THAT(ErrorOf({E("order", Group({E("kind", T("follow")),
                                         E("shuffle_window", I(0))}))}),
              HasSubstr("'order.shuffle_window' = 0 is out of range"));
  EXPECT_THAT(ErrorOf({E("locality", T("rack"))}), HasSubstr("'locality' = 'rack'"));
  EXPECT_THAT(ErrorOf({E("seed", T("x"))}), HasSubstr("'seed'"));
}

TEST(OrderOptions, SetOneAtATimeChangesTheCurrentOrder) {
  const OptionTable<LoaderOptions>& table = LoaderOptionTable();
  LoaderOptions o;
  ASSERT_TRUE(table.Set(o, "seed", I(5)).ok());
  EXPECT_EQ(o.order, Order::Shuffled(5));
  ASSERT_TRUE(table.Set(o, "locality", T("node")).ok());
  EXPECT_EQ(o.order, Order(NodeLocalOrder{.seed = 5}));
  ASSERT_TRUE(table.Set(o, "nodes", I(3)).ok());
  EXPECT_EQ(o.order.get<NodeLocalOrder>()->nodes, 3u);
  ASSERT_TRUE(table.Set(o, "nodes", OptionValue::None()).ok());  // back to the launcher's
  EXPECT_EQ(o.order.get<NodeLocalOrder>()->nodes, 0u);
  ASSERT_TRUE(table.Set(o, "locality", T("global")).ok());
  EXPECT_EQ(o.order, Order::Shuffled(5));
  ASSERT_TRUE(table.Set(o, "caller_order", B(true)).ok());
  EXPECT_EQ(o.order, Order(CallerOrder{}));
  ASSERT_TRUE(table.Set(o, "caller_order", B(false)).ok());
  EXPECT_EQ(o.order, Order::Shuffled());
  // CLI text: order=1 is the order version.
  ASSERT_TRUE(table.SetFromText(o, "order", "1").ok());
  EXPECT_EQ(o.order, Order::Shuffled(0, 1));
  // The group's table documents its settings for the stubs and the docs.
  for (const char* name : {"kind", "shuffle", "seed", "version", "nodes", "node_rank",
                           "shuffle_window"})
    EXPECT_NE(OrderOptionTable().Find(name), nullptr) << name;
  for (const char* name : {"order", "shuffle", "seed", "locality", "nodes", "node_rank",
                           "caller_order", "follow", "shuffle_window"})
    EXPECT_EQ(table.Find(name)->group, "order") << name;
}

TEST(OrderOptions, WhatTheKindLeavesToOthersIsRefusedByName) {
  LoaderOptions o;
  o.order = CallerOrder{};
  o.batch_size = 4;
  EXPECT_THAT(ValidateLoaderOptions(o).message(), HasSubstr("caller's order"));
  o.batch_size = 0;
  o.max_tokens = 100;
  EXPECT_THAT(ValidateLoaderOptions(o).message(), HasSubstr("max_tokens"));
  o.order = FollowOrder{};
  EXPECT_THAT(ValidateLoaderOptions(o).message(), HasSubstr("follow mode"));
  o.max_tokens = 0;
  EXPECT_TRUE(ValidateLoaderOptions(o).ok());
  // "auto" bucketing is off for a caller's order.
  o.order = CallerOrder{};
  o.collate = Collate::kPad;
  EXPECT_EQ(ResolveLoaderOptions(o)->bucket_window, 0u);
}

// ---- The factory ------------------------------------------------------------------------------

LoaderOptions Resolved(Order order) {
  LoaderOptions o;
  o.order = order;
  o.world_size = 2;
  o.rank = 1;
  return *ResolveLoaderOptions(o);
}

TEST(StepFactory, EachKindMakesItsStepSequence) {
  {
    auto f = *StepFactory::Make(nullptr, Resolved(Order::Shuffled(3)), nullptr,
                                MapEnvironment({}));
    // No dataset: an empty epoch of the global order.
    auto steps = f->Steps({.epoch = 1});
    ASSERT_TRUE(steps.ok()) << steps.status().ToString();
    EXPECT_NE(dynamic_cast<const PlannedSteps*>(steps->get()), nullptr);
    EXPECT_EQ((*steps)->Cursor(0), OrderCursor(GlobalCursor{3, kOrderV2, {}}));
  }
  {
    auto f = *StepFactory::Make(nullptr, Resolved(CallerOrder{}), nullptr, MapEnvironment({}));
    auto given = std::make_shared<const EpochSteps>(EpochSteps::Singles({4, 1, 2}));
    auto steps = f->Steps({.epoch = 0, .given = given});
    ASSERT_TRUE(steps.ok());
    EXPECT_NE(dynamic_cast<const CallerSteps*>(steps->get()), nullptr);
    EXPECT_EQ((*steps)->steps(), 3u);
    EXPECT_EQ((*steps)->Cursor(1), OrderCursor(CallerCursor{EpochStepsDigest(*given)}));
    // A resumed epoch continues after the state's position when the steps are the same.
    LoaderState saved;
    saved.position = 2;
    saved.cursor = CallerCursor{EpochStepsDigest(*given)};
    auto resumed = f->Steps({.epoch = 0, .resume = &saved, .given = given});
    ASSERT_TRUE(resumed.ok());
    EXPECT_EQ((*resumed)->steps(), 1u);
    saved.cursor = CallerCursor{1};
    EXPECT_THAT(f->Steps({.epoch = 0, .resume = &saved, .given = given}).status().message(),
                HasSubstr("another order"));
  }
  {
    auto f = *StepFactory::Make(nullptr, Resolved(FollowOrder{.seed = 2, .shuffle_window = 4}),
                                nullptr, MapEnvironment({}));
    auto steps = f->Steps({.epoch = 0, .snapshot = {0, 0, 12, false}});
    ASSERT_TRUE(steps.ok());
    EXPECT_NE(dynamic_cast<const FollowSteps*>(steps->get()), nullptr);
    EXPECT_EQ((*steps)->Cursor(0), OrderCursor(FollowCursor{2, kOrderV2, 4}));
    EXPECT_EQ(f->FollowEpoch(0, 0).plan().rank, 1u);
  }
}

TEST(StepFactory, AStateItsOrderCannotContinueIsRefused) {
  LoaderState caller;
  caller.cursor = CallerCursor{3};
  LoaderState follow;
  follow.cursor = FollowCursor{1, 2, 8};
  LoaderState global;
  EXPECT_THAT(CheckResumeFits(Order::Shuffled(), caller).message(), HasSubstr("same sampler"));
  EXPECT_THAT(CheckResumeFits(CallerOrder{}, global).message(), HasSubstr("without a sampler"));
  EXPECT_THAT(CheckResumeFits(Order::Shuffled(), follow).message(), HasSubstr("follow=True"));
  EXPECT_TRUE(CheckResumeFits(FollowOrder{}, follow).ok());
  EXPECT_TRUE(CheckResumeFits(FollowOrder{}, global).ok());  // a later epoch
  // The global and node-local orders finish each other's epochs (ORDER.md §5.4).
  LoaderState node;
  node.cursor = NodeLocalCursor{};
  EXPECT_TRUE(CheckResumeFits(Order::Shuffled(), node).ok());
  EXPECT_TRUE(CheckResumeFits(NodeLocalOrder{}, global).ok());
  LoaderOptions o = Resolved(Order::Shuffled());
  o.resume = caller;
  EXPECT_FALSE(StepFactory::Make(nullptr, o, nullptr, MapEnvironment({})).ok());
  EXPECT_FALSE(ValidateLoaderOptions(o).ok());
}

// What a resume decides of the order: its seed and version win, in every later epoch.
TEST(StepFactory, TheResumedStatesSeedAndVersionAreTheOrders) {
  LoaderState s;
  s.cursor = GlobalCursor{9, kOrderV1, {}};
  EXPECT_EQ(ResumedOrder(Order::Shuffled(3), &s), Order::Shuffled(9, kOrderV1));
  EXPECT_EQ(ResumedOrder(NodeLocalOrder{.seed = 3, .nodes = 2}, &s),
            Order(NodeLocalOrder{.seed = 9, .nodes = 2}));
  s.cursor = NodeLocalCursor{9, {}, {}};  // no version: the loader's own stays
  EXPECT_EQ(ResumedOrder(Order::Shuffled(3, kOrderV1), &s), Order::Shuffled(9, kOrderV1));
  s.cursor = FollowCursor{9, kOrderV1, 16};
  EXPECT_EQ(ResumedOrder(FollowOrder{}, &s),
            Order(FollowOrder{.seed = 9, .shuffle_window = 16, .version = kOrderV1}));
  s.cursor = CallerCursor{5};
  EXPECT_EQ(ResumedOrder(CallerOrder{}, &s), Order(CallerOrder{}));
  EXPECT_EQ(ResumedOrder(Order::Shuffled(3), nullptr), Order::Shuffled(3));
}

}  // namespace
}  // namespace libshard
