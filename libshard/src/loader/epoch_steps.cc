// EpochSteps (libshard/loader.h): an epoch's steps in an order the caller gives; their checks
// and digest (docs/ORDER.md §6).
#include <string>
#include <vector>

#include "libshard/checksum.h"
#include "libshard/loader.h"

namespace libshard {

EpochSteps EpochSteps::Singles(std::vector<uint64_t> samples) {
  EpochSteps s;
  s.bounds.reserve(samples.size() + 1);
  for (uint64_t k = 0; k <= samples.size(); ++k) s.bounds.push_back(k);
  s.samples = std::move(samples);
  return s;
}

EpochSteps EpochSteps::Batches(const std::vector<std::vector<uint64_t>>& batches) {
  EpochSteps s;
  s.bounds.reserve(batches.size() + 1);
  s.bounds.push_back(0);
  for (const std::vector<uint64_t>& b : batches) {
    s.samples.insert(s.samples.end(), b.begin(), b.end());
    s.bounds.push_back(s.samples.size());
  }
  return s;
}

Status ValidateEpochSteps(const EpochSteps& steps, uint64_t dataset_size,
                          const std::string& dataset_path) {
  const std::vector<uint64_t>& b = steps.bounds;
  if (b.empty()) {
    if (steps.samples.empty()) return Status::OK();
    return Status::InvalidArgument(
        "epoch steps: " + std::to_string(steps.samples.size()) +
        " samples but no bounds; give steps + 1 bounds from 0 to the number of samples");
  }
  if (b.front() != 0)
    return Status::InvalidArgument("epoch steps: the bounds start at " + std::to_string(b.front()) +
                                   ", not 0");
  if (b.back() != steps.samples.size())
    return Status::InvalidArgument("epoch steps: the bounds end at " + std::to_string(b.back()) +
                                   ", not at the number of samples (" +
                                   std::to_string(steps.samples.size()) + ")");
  for (size_t k = 0; k + 1 < b.size(); ++k) {
    if (b[k + 1] == b[k])
      return Status::InvalidArgument(
          "epoch steps: step " + std::to_string(k) +
          " is empty (the sampler or batch sampler yielded an empty batch); every step needs "
          "at least one sample");
    if (b[k + 1] < b[k])
      return Status::InvalidArgument("epoch steps: the bounds fall at step " + std::to_string(k) +
                                     " (" + std::to_string(b[k]) + " then " +
                                     std::to_string(b[k + 1]) + ")");
  }
  size_t k = 0;
  for (size_t i = 0; i < steps.samples.size(); ++i) {
    while (b[k + 1] <= i) ++k;
    if (steps.samples[i] >= dataset_size)
      return Status::InvalidArgument(
          "epoch steps: step " + std::to_string(k) + " asks for sample " +
          std::to_string(steps.samples[i]) + ", but " + dataset_path + " has " +
          std::to_string(dataset_size) + " samples (indices 0.." +
          (dataset_size == 0 ? std::string("none") : std::to_string(dataset_size - 1)) +
          "); the sampler was made for another dataset");
  }
  return Status::OK();
}

uint64_t EpochStepsDigest(const EpochSteps& steps) {
  // The number of samples, the samples, then the bounds, as 64-bit words in memory order (the
  // library runs on little-endian machines only); 0 is kept for "no digest".
  Xxh3Stream h;
  const uint64_t n = steps.samples.size();
  h.Update(&n, sizeof n);
  h.Update(steps.samples.data(), steps.samples.size() * sizeof(uint64_t));
  h.Update(steps.bounds.data(), steps.bounds.size() * sizeof(uint64_t));
  const uint64_t d = h.Digest();
  return d == 0 ? 1 : d;
}

}  // namespace libshard
