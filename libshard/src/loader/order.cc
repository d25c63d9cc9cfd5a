#include "loader/order.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "loader/bucketing.h"
#include "loader/order_random.h"

namespace libshard {
namespace {

using order_random::Mix;
using order_random::SplitMix64;

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

Status Validate(uint64_t n, std::span<const uint64_t> lengths, const PlanOptions& o) {
  if (o.world_size == 0) {
    return Status::InvalidArgument("world_size is 0; it must be >= 1 (1 for a single process)");
  }
  if (o.rank >= o.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(o.rank) +
                                   " is out of range for world_size " +
                                   std::to_string(o.world_size) + "; use a rank in 0.." +
                                   std::to_string(o.world_size - 1));
  }
  if (o.batch_size > 1 && o.max_tokens > 0) {
    return Status::InvalidArgument(
        "batch_size (" + std::to_string(o.batch_size) + ") and max_tokens (" +
        std::to_string(o.max_tokens) +
        ") are exclusive: set batch_size to 0 for token-budget batches, or max_tokens to 0 for "
        "fixed-size batches");
  }
  if (o.order != kOrderV1 && o.order != kOrderV2) {
    return Status::InvalidArgument("order version " + std::to_string(o.order) +
                                   " is unknown; use 1 (libshard's first order, for states "
                                   "saved without an order version) or 2 (the default)");
  }
  if (o.start_position > n) {
    return Status::InvalidArgument(
        "resume position " + std::to_string(o.start_position) +
        " is past the end of the epoch (" + std::to_string(n) +
        " samples): the state was saved for another dataset; resume with the matching dataset "
        "or start the epoch at position 0");
  }
  if (o.bucket_window > 0 && o.max_tokens == 0 && o.batch_size <= 1) {
    return Status::InvalidArgument(
        "bucket_window " + std::to_string(o.bucket_window) +
        " groups samples into batches: set max_tokens or batch_size > 1 as well, or "
        "bucket_window 0");
  }
  if (o.bucket_window > 0 && lengths.size() != n) {
    return Status::InvalidArgument("bucket_window needs the token length of every sample: got " +
                                   std::to_string(lengths.size()) + " lengths for " +
                                   std::to_string(n) + " samples");
  }
  if (o.max_tokens == 0) return Status::OK();
  if (lengths.size() != n) {
    return Status::InvalidArgument("max_tokens needs the token length of every sample: got " +
                                   std::to_string(lengths.size()) + " lengths for " +
                                   std::to_string(n) + " samples");
  }
  bool any_length = n == 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t len = lengths[i];
    any_length = any_length || len != 0;
    if (o.oversized == OversizedSample::kError && len > o.max_tokens) {
      return Status::InvalidArgument(
          "sample " + std::to_string(i) + " has " + std::to_string(len) +
          " tokens, more than max_tokens = " + std::to_string(o.max_tokens) +
          "; raise max_tokens to at least " + std::to_string(len) +
          ", clip samples with max_len, or let oversized samples form batches of their own");
    }
  }
  if (!any_length) {
    return Status::InvalidArgument(
        "max_tokens needs token lengths, but every sample has length 0 (the dataset has no "
        "length field); use batch_size instead, or repack with a length field");
  }
  return Status::OK();
}

}  // namespace

std::vector<uint64_t> EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> perm(n);
  std::iota(perm.begin(), perm.end(), uint64_t{0});
  SplitMix64 rng(Mix(Mix(seed) + epoch));
  for (uint64_t i = n; i > 1; --i) {
    const uint64_t j = rng.Below(i);
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

ShuffleV2::ShuffleV2(uint64_t n, uint64_t seed, uint64_t epoch) : n_(n) {
  uint32_t k = 2;
  while (k < 64 && (uint64_t{1} << k) < n) k += 2;
  half_ = k / 2;
  mask_ = (uint64_t{1} << half_) - 1;
  SplitMix64 rng(Mix(Mix(seed) + epoch));
  for (uint64_t& key : keys_) key = rng.Next();
}

uint64_t ShuffleV2::Encrypt(uint64_t x) const {
  uint64_t l = x >> half_;
  uint64_t r = x & mask_;
  for (const uint64_t key : keys_) {
    const uint64_t next = l ^ (Mix(r ^ key) & mask_);
    l = r;
    r = next;
  }
  return (l << half_) | r;
}

std::vector<uint64_t> EpochOrder(uint64_t n, uint64_t seed, uint64_t epoch, uint32_t order) {
  if (order == kOrderV1) return EpochPermutation(n, seed, epoch);
  const ShuffleV2 shuffle(n, seed, epoch);
  std::vector<uint64_t> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = shuffle.At(i);
  return out;
}

Order ResumedOrder(const Order& order, const LoaderState* resume) {
  if (resume == nullptr || resume->kind() == OrderKind::kCaller) return order;
  Order out = order;
  const uint64_t seed = resume->seed();
  // The version of the state's global order: a global state's, or the later epochs' of a
  // follow state.
  std::optional<uint32_t> version;
  if (resume->kind() == OrderKind::kGlobal || resume->kind() == OrderKind::kFollow)
    version = resume->order_version();
  if (GlobalOrder* g = out.get<GlobalOrder>()) {
    g->seed = seed;
    if (version) g->version = *version;
  } else if (NodeLocalOrder* n = out.get<NodeLocalOrder>()) {
    n->seed = seed;
  } else if (FollowOrder* f = out.get<FollowOrder>()) {
    f->seed = seed;
    if (version) f->version = *version;
    if (const FollowCursor* c = resume->get<FollowCursor>()) f->shuffle_window = c->window;
  }
  return out;
}

OrderRanks OrderRanksOf(const LoaderOptions& options) {
  // Sequence parallelism (§3a): the order is the data-parallel world's, of world_size / N groups
  // of N consecutive ranks; every rank of group rank / N gets that group's steps.
  const uint32_t n = std::max<uint32_t>(options.sequence_parallel.degree, 1);
  if (n > 1 && options.world_size % n == 0) return {options.rank / n, options.world_size / n};
  return {options.rank, options.world_size};
}

PlanOptions PlanBase(const LoaderOptions& options) {
  PlanOptions plan;
  const OrderRanks ranks = OrderRanksOf(options);
  plan.rank = ranks.rank;
  plan.world_size = ranks.world_size;
  plan.drop_last = options.drop_last;
  plan.batch_size = options.batch_size;
  plan.max_tokens = options.max_tokens;
  plan.oversized = options.oversized;
  // Resolved by ResolveLoaderOptions; kAuto here is a caller that skipped it (a test).
  plan.budget = options.token_budget == TokenBudget::kPadded ? TokenBudget::kPadded
                                                             : TokenBudget::kSum;
  plan.bucket_window = options.bucket_window == kAutoBucketWindow ? 0 : options.bucket_window;
  return plan;
}

PlanOptions PlanOptionsFor(const LoaderOptions& options) {
  const LoaderState* resume = options.resume ? &*options.resume : nullptr;
  const Order order = ResumedOrder(options.order, resume);
  PlanOptions plan = PlanBase(options);
  plan.shuffle = order.shuffle();
  plan.seed = order.seed();
  if (const GlobalOrder* g = order.get<GlobalOrder>()) plan.order = g->version;
  if (const FollowOrder* f = order.get<FollowOrder>()) plan.order = f->version;
  plan.epoch = resume != nullptr ? resume->epoch : options.epoch;
  plan.start_position = resume != nullptr ? resume->position : 0;
  // A resume inside an epoch whose sequence had no bucketing continues without it (section
  // 2a; LoaderState::bucketing()). One with bucketing has the same rule (Loader::Create checks).
  if (resume != nullptr && resume->position > 0 && resume->bucketing().window == 0)
    plan.bucket_window = 0;
  return plan;
}

EpochBucketing BucketingOf(const PlanOptions& plan) {
  EpochBucketing b;
  if (plan.bucket_window == 0) return b;
  b.window = plan.bucket_window;
  b.batch_size = static_cast<uint32_t>(plan.batch_size);
  b.max_tokens = plan.max_tokens;
  b.budget = plan.max_tokens > 0 && plan.budget == TokenBudget::kPadded ? TokenBudget::kPadded
                                                                          : TokenBudget::kSum;
  return b;
}

// Section 2a's S: windows of the base order made on demand, the last few kept. Shared by the
// copies of a plan (ForRank); thread-safe.
class BucketedSequence {
 public:
  BucketedSequence(uint64_t n, std::shared_ptr<const std::vector<uint64_t>> lengths,
                   BucketRule rule)
      : n_(n), lengths_(std::move(lengths)), rule_(rule) {}
  const BucketRule& rule() const { return rule_; }
  uint64_t windows() const { return n_ / rule_.window + (n_ % rule_.window != 0 ? 1 : 0); }

  // Window w, made from the base order P of `plan` (any copy of the plan: they share P) or
  // cached.
  std::shared_ptr<const BucketWindow> Window(const EpochPlan* plan, uint64_t w) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [index, window] : cache_)
      if (index == w && window != nullptr) return window;
    auto made = std::make_shared<const BucketWindow>(MakeBucketWindow(
        n_, [plan](uint64_t i) { return plan->BaseAt(i); }, *lengths_, rule_, w));
    cache_[next_slot_] = {w, made};
    next_slot_ = (next_slot_ + 1) % cache_.size();
    return made;
  }

 private:
  const uint64_t n_;
  const std::shared_ptr<const std::vector<uint64_t>> lengths_;
  const BucketRule rule_;
  std::mutex mu_;
  // Ranks of one process and the scheduler read a few windows apart at most.
  std::array<std::pair<uint64_t, std::shared_ptr<const BucketWindow>>, 4> cache_{};
  size_t next_slot_ = 0;
};

uint64_t EpochPlan::BucketedSampleAt(uint64_t i) const {
  const uint64_t m = bucketed_->rule().window;
  const std::shared_ptr<const BucketWindow> window = bucketed_->Window(this, i / m);
  return window->samples[i % m];
}

Result<EpochPlan> EpochPlan::Make(uint64_t n, std::span<const uint64_t> lengths,
                                  const PlanOptions& options) {
  if (options.bucket_window == 0 || lengths.size() != n)
    return MakeImpl(n, lengths, nullptr, options);
  return MakeSharingLengths(
      n, std::make_shared<const std::vector<uint64_t>>(lengths.begin(), lengths.end()), options);
}

Result<EpochPlan> EpochPlan::MakeSharingLengths(
    uint64_t n, std::shared_ptr<const std::vector<uint64_t>> lengths, const PlanOptions& options) {
  const std::span<const uint64_t> view =
      lengths != nullptr ? std::span<const uint64_t>(*lengths) : std::span<const uint64_t>();
  return MakeImpl(n, view, std::move(lengths), options);
}

Result<EpochPlan> EpochPlan::MakeImpl(uint64_t n, std::span<const uint64_t> lengths,
                                      std::shared_ptr<const std::vector<uint64_t>> shared,
                                      const PlanOptions& options) {
  LIBSHARD_RETURN_IF_ERROR(Validate(n, lengths, options));
  EpochPlan plan;
  plan.options_ = options;
  plan.n_ = n;
  if (options.shuffle && options.order == kOrderV1) {
    plan.perm_ = std::make_shared<const std::vector<uint64_t>>(
        EpochPermutation(n, options.seed, options.epoch));
  } else if (options.shuffle) {
    plan.v2_ = ShuffleV2(n, options.seed, options.epoch);
  }  // else the identity is not materialized: position p is sample p (8N bytes saved)
  const EpochPlan& self = plan;
  const auto sample_at = [&self](uint64_t i) { return self.SampleAt(i); };
  const uint64_t p = options.start_position;
  const uint64_t w = options.world_size;
  const bool tokens = options.max_tokens > 0;
  const uint64_t batch = std::max<uint64_t>(options.batch_size, 1);

  if (options.bucket_window > 0) {
    BucketRule rule;
    rule.window = EffectiveBucketWindow(options.bucket_window, options.batch_size);
    rule.batch_size = options.batch_size;
    rule.max_tokens = options.max_tokens;
    rule.budget = options.budget;
    rule.shuffle = options.shuffle;
    rule.seed = options.seed;
    rule.epoch = options.epoch;
    plan.bucketed_ = std::make_shared<BucketedSequence>(n, std::move(shared), rule);
    // One pass over the windows gives every unit boundary of S (8 bytes per unit).
    std::vector<uint64_t> bounds{0};
    for (uint64_t win = 0; win < plan.bucketed_->windows(); ++win) {
      const std::shared_ptr<const BucketWindow> window = plan.bucketed_->Window(&plan, win);
      for (size_t u = 1; u < window->bounds.size(); ++u)
        bounds.push_back(win * rule.window + window->bounds[u]);
    }
    BatchLayout all = BatchLayout::FromBounds(std::move(bounds));
    // drop_last with fixed batches drops the epoch's partial last unit, as without bucketing.
    BatchLayout epoch_units = all;
    if (options.drop_last && !tokens && !all.empty() &&
        all.End(all.size() - 1) - all.Begin(all.size() - 1) < batch) {
      std::vector<uint64_t> kept;  // every bound but the last: the partial unit is gone
      for (uint64_t g = 0; g < all.size(); ++g) kept.push_back(all.Begin(g));
      epoch_units = BatchLayout::FromBounds(std::move(kept));
    }
    BatchLayout main = epoch_units.From(p);
    const uint64_t units = main.size();
    plan.steps_ = options.drop_last ? units / w : CeilDiv(units, w);
    if (options.steps > 0) plan.steps_ = options.steps;
    plan.epoch_steps_ = options.drop_last ? epoch_units.size() / w : CeilDiv(all.size(), w);
    const uint64_t padding = plan.steps_ * w - std::min(plan.steps_ * w, units);
    plan.main_ = std::make_shared<const BatchLayout>(std::move(main));
    plan.pad_ = std::make_shared<const BatchLayout>(padding > 0 ? std::move(all) : BatchLayout());
    return plan;
  }

  // Units from position 0 give the full-epoch step count and the padding; in token mode they
  // also give the units after a resume point that is one of their boundaries (the usual case),
  // so a resumed plan costs one greedy pass like a fresh one.
  BatchLayout from_zero =
      tokens ? BatchLayout::Tokens(n, sample_at, lengths, 0, options.max_tokens,
                                   std::numeric_limits<uint64_t>::max(), options.budget)
             : BatchLayout::Fixed(0, n, batch, /*drop_partial=*/false);
  BatchLayout main;
  if (!tokens) {
    main = BatchLayout::Fixed(p, n, batch, options.drop_last);
  } else if (const uint64_t g = from_zero.FindUnitStart(p); g < from_zero.size() || p == n) {
    main = from_zero.Suffix(p == n ? from_zero.size() : g);
  } else {
    main = BatchLayout::Tokens(n, sample_at, lengths, p, options.max_tokens,
                               std::numeric_limits<uint64_t>::max(), options.budget);
  }
  const uint64_t units = main.size();
  plan.steps_ = options.drop_last ? units / w : CeilDiv(units, w);
  if (options.steps > 0) plan.steps_ = options.steps;
  const uint64_t epoch_units =
      (!tokens && options.drop_last) ? n / batch : from_zero.size();
  plan.epoch_steps_ = options.drop_last ? epoch_units / w : CeilDiv(epoch_units, w);
  const uint64_t padding = plan.steps_ * w - std::min(plan.steps_ * w, units);
  // Padding units come from the start of the epoch (position 0), whatever the resume position,
  // so that a resumed run pads exactly as the uninterrupted one did.
  plan.main_ = std::make_shared<const BatchLayout>(std::move(main));
  plan.pad_ = std::make_shared<const BatchLayout>(padding > 0 ? std::move(from_zero) : BatchLayout());
  return plan;
}

EpochPlan EpochPlan::ForRank(uint64_t rank) const {
  EpochPlan plan = *this;
  plan.options_.rank = rank;
  return plan;
}

void EpochPlan::UnitRange(uint64_t g, uint64_t* begin, uint64_t* end) const {
  const uint64_t units = main_->size();
  if (g < units) {
    *begin = main_->Begin(g);
    *end = main_->End(g);
    return;
  }
  const uint64_t j = (g - units) % pad_->size();
  *begin = pad_->Begin(j);
  *end = pad_->End(j);
}

void EpochPlan::AppendBatchSamples(uint64_t k, std::vector<uint64_t>* out) const {
  if (k >= steps_) return;
  uint64_t begin = 0;
  uint64_t end = 0;
  UnitRange(k * options_.world_size + options_.rank, &begin, &end);
  if (bucketed_) {  // a unit lies inside one window of S
    if (begin == end) return;
    const uint64_t m = bucketed_->rule().window;
    const uint64_t w = begin / m;
    const std::shared_ptr<const BucketWindow> window = bucketed_->Window(this, w);
    out->insert(out->end(), window->samples.begin() + static_cast<std::ptrdiff_t>(begin - w * m),
                window->samples.begin() + static_cast<std::ptrdiff_t>(end - w * m));
    return;
  }
  if (!perm_) {
    if (options_.shuffle) {
      for (uint64_t p = begin; p < end; ++p) out->push_back(v2_.At(p));
    } else {
      for (uint64_t p = begin; p < end; ++p) out->push_back(p);
    }
    return;
  }
  const std::vector<uint64_t>& perm = *perm_;
  out->insert(out->end(), perm.begin() + static_cast<std::ptrdiff_t>(begin),
              perm.begin() + static_cast<std::ptrdiff_t>(end));
}

std::vector<uint64_t> EpochPlan::BatchSamples(uint64_t k) const {
  std::vector<uint64_t> out;
  AppendBatchSamples(k, &out);
  return out;
}

uint64_t EpochPlan::PositionAfter(uint64_t k) const {
  const uint64_t next = (k + 1) * options_.world_size;
  if (k + 1 >= steps_ || next >= main_->size()) return n_;
  return main_->Begin(next);
}

}  // namespace libshard
