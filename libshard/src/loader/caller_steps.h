// CallerSteps: an epoch in an order the caller gave (CallerOrder, Loader::SetEpochSteps;
// docs/ORDER.md §6), as the loader's pipeline sees it (StepSequence).
// The steps are this rank's own and are taken as they are: no striping, no batching, no
// padding. A resume starts `start` steps into them. Immutable; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "libshard/loader.h"
#include "loader/step_sequence.h"

namespace libshard {

class CallerSteps final : public StepSequence {
 public:
  // `steps` must have passed ValidateEpochSteps; start <= steps->steps().
  CallerSteps(std::shared_ptr<const EpochSteps> steps, uint64_t start, uint64_t digest)
      : steps_(std::move(steps)), start_(start), digest_(digest) {}

  uint64_t steps() const override { return steps_->steps() - start_; }
  uint64_t epoch_steps() const override { return steps_->steps(); }
  uint64_t StepSize(uint64_t k) const override {
    return steps_->bounds[start_ + k + 1] - steps_->bounds[start_ + k];
  }
  void AppendStepSamples(uint64_t k, std::vector<uint64_t>* out) const override {
    const auto& s = steps_->samples;
    out->insert(out->end(), s.begin() + static_cast<std::ptrdiff_t>(steps_->bounds[start_ + k]),
                s.begin() + static_cast<std::ptrdiff_t>(steps_->bounds[start_ + k + 1]));
  }
  // Position counts this rank's steps consumed (docs/ORDER.md §6).
  uint64_t PositionAfter(uint64_t k) const override { return start_ + k + 1; }
  OrderCursor Cursor(uint64_t) const override { return CallerCursor{digest_}; }

 private:
  std::shared_ptr<const EpochSteps> steps_;
  uint64_t start_ = 0;
  uint64_t digest_ = 0;
};

}  // namespace libshard
