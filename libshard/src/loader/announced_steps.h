// AnnouncedSteps: the read-ahead's order (libshard/read_ahead.h) as the read scheduler sees it
// (StepSequence): one step per announced entry, in announcement order, growing as the caller
// announces more. Each entry is in one state:
//   kHeld     announced, not taken, not passed over (the scheduler reads it in its turn);
//   kWaiting  taken by a Get that waits for (or is about to take) its item;
//   kPassed   passed over by a later Get after its read started: its item is kept for a late
//             Get until it is evicted;
//   kDone     served, or evicted;
//   kSkipped  passed over before its read started, or given up by its Get: never read.
// Held entries (kHeld, kPassed) of a sample can be found by the sample (Find), the earliest
// first. Memory: about 24 bytes per entry not yet trimmed plus one map node per sample with a
// held entry; entries before the first held one are trimmed.
//
// Not thread-safe: every method, the StepSequence ones included, requires ItemQueue::mu (the
// read scheduler holds it whenever it reads ItemQueue::steps).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "libshard/loader.h"
#include "loader/step_sequence.h"

namespace libshard {

class AnnouncedSteps final : public StepSequence {
 public:
  enum class State : uint8_t { kHeld, kWaiting, kPassed, kDone, kSkipped };

  // StepSequence: absolute positions, one sample per step.
  uint64_t steps() const override { return base_ + entries_.size(); }
  uint64_t epoch_steps() const override { return steps(); }
  uint64_t StepSize(uint64_t) const override { return 1; }
  void AppendStepSamples(uint64_t k, std::vector<uint64_t>* out) const override {
    out->push_back(entries_[k - base_].sample);
  }
  uint64_t PositionAfter(uint64_t k) const override { return k + 1; }
  // The read-ahead has no state to save: no cursor of its own.
  OrderCursor Cursor(uint64_t) const override { return GlobalCursor{}; }
  // The first entry at or after k (and not trimmed) that is kHeld or kWaiting.
  uint64_t NextWanted(uint64_t k) const override;

  void Append(std::span<const uint64_t> samples);
  // The earliest held (kHeld or kPassed) entry of `sample`, or nullopt.
  std::optional<uint64_t> Find(uint64_t sample) const;
  // Entry `pos` (held) becomes kWaiting. When it lies at or after front(), the kHeld entries
  // before it are passed over: kPassed where `started(q)` (its read started), else kSkipped;
  // front() moves past it.
  template <typename Started>
  void Take(uint64_t pos, Started started) {
    if (pos >= front_) {
      for (uint64_t q = front_; q < pos; ++q) {
        if (At(q).state != State::kHeld) continue;
        if (started(q)) {
          At(q).state = State::kPassed;
        } else {
          Leave(q, State::kSkipped);
          ++skipped_;
        }
      }
      front_ = pos + 1;
    }
    Leave(pos, State::kWaiting);
  }
  // Entry `pos` (kWaiting or kPassed) was served or evicted: kDone.
  void Finish(uint64_t pos) { Leave(pos, State::kDone); }
  // Entry `pos` (kWaiting) is given up, to be read synchronously: kSkipped, never read.
  void GiveUp(uint64_t pos) { Leave(pos, State::kSkipped); }
  // Drops the entries before the first one still held or waited for.
  void Trim();

  State state(uint64_t pos) const { return At(pos).state; }
  // Entries before front() were taken or passed over; those from it on are kHeld.
  uint64_t front() const { return front_; }
  uint64_t announced() const { return steps(); }
  uint64_t held() const { return held_; }
  uint64_t skipped() const { return skipped_; }

 private:
  static constexpr uint64_t kNone = UINT64_MAX;
  struct Entry {
    uint64_t sample = 0;
    uint64_t next = kNone;  // the next entry of the same sample, announced later
    State state = State::kHeld;
  };
  // A sample's held entries, linked through Entry::next in position order; `head` is always
  // held (so it and every entry after it are never trimmed).
  struct Chain {
    uint64_t head = 0;
    uint64_t tail = 0;
  };
  Entry& At(uint64_t pos) { return entries_[pos - base_]; }
  const Entry& At(uint64_t pos) const { return entries_[pos - base_]; }
  static bool Held(State s) { return s == State::kHeld || s == State::kPassed; }
  // Entry `pos` leaves the held states for `to`; its sample's chain head moves on if needed.
  void Leave(uint64_t pos, State to);

  std::deque<Entry> entries_;
  uint64_t base_ = 0;  // position of entries_.front()
  uint64_t front_ = 0;
  uint64_t held_ = 0;
  uint64_t skipped_ = 0;
  std::unordered_map<uint64_t, Chain> chains_;  // by sample, for those with a held entry
};

}  // namespace libshard
