#include "loader/order.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

namespace libshard {
namespace {

// The exact generator of the order contract (order.h, EpochPermutation). Do not change.
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

constexpr uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next() {
    state_ += kGolden;
    return Mix(state_);
  }
  // Uniform in [0, m), m >= 1 (Lemire, "Fast random integer generation in an interval", 2019).
  uint64_t Below(uint64_t m) {
    unsigned __int128 w = static_cast<unsigned __int128>(Next()) * m;
    uint64_t lo = static_cast<uint64_t>(w);
    if (lo < m) {
      const uint64_t t = (0 - m) % m;
      while (lo < t) {
        w = static_cast<unsigned __int128>(Next()) * m;
        lo = static_cast<uint64_t>(w);
      }
    }
    return static_cast<uint64_t>(w >> 64);
  }

 private:
  uint64_t state_;
};

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
                                   "saved without a version) or 2 (the default)");
  }
  if (o.start_position > n) {
    return Status::InvalidArgument(
        "resume position " + std::to_string(o.start_position) +
        " is past the end of the epoch (" + std::to_string(n) +
        " samples): the state was saved for another dataset; resume with the matching dataset "
        "or start the epoch at position 0");
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

PlanOptions PlanOptionsFor(const LoaderOptions& options) {
  PlanOptions plan;
  plan.shuffle = options.shuffle;
  plan.seed = options.resume ? options.resume->seed : options.seed;
  plan.epoch = options.resume ? options.resume->epoch : options.epoch;
  plan.start_position = options.resume ? options.resume->position : 0;
  plan.order = options.resume ? options.resume->order : options.order;
  plan.rank = options.rank;
  plan.world_size = options.world_size;
  plan.drop_last = options.drop_last;
  plan.batch_size = options.batch_size;
  plan.max_tokens = options.max_tokens;
  return plan;
}

Result<EpochPlan> EpochPlan::Make(uint64_t n, std::span<const uint64_t> lengths,
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

  // Units from position 0 give the full-epoch step count and the padding; in token mode they
  // also give the units after a resume point that is one of their boundaries (the usual case),
  // so a resumed plan costs one greedy pass like a fresh one.
  BatchLayout from_zero =
      tokens ? BatchLayout::Tokens(n, sample_at, lengths, 0, options.max_tokens,
                                   std::numeric_limits<uint64_t>::max())
             : BatchLayout::Fixed(0, n, batch, /*drop_partial=*/false);
  BatchLayout main;
  if (!tokens) {
    main = BatchLayout::Fixed(p, n, batch, options.drop_last);
  } else if (const uint64_t g = from_zero.FindUnitStart(p); g < from_zero.size() || p == n) {
    main = from_zero.Suffix(p == n ? from_zero.size() : g);
  } else {
    main = BatchLayout::Tokens(n, sample_at, lengths, p, options.max_tokens,
                               std::numeric_limits<uint64_t>::max());
  }
  const uint64_t units = main.size();
  plan.steps_ = options.drop_last ? units / w : CeilDiv(units, w);
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
  if (k + 1 >= steps_) return n_;
  return main_->Begin((k + 1) * options_.world_size);
}

}  // namespace libshard
