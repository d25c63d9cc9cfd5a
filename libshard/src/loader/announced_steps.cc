#include "loader/announced_steps.h"

namespace libshard {

uint64_t AnnouncedSteps::NextWanted(uint64_t k) const {
  if (k < base_) k = base_;
  const uint64_t end = steps();
  while (k < end) {
    const State s = At(k).state;
    if (s == State::kHeld || s == State::kWaiting) break;
    ++k;
  }
  return k;
}

void AnnouncedSteps::Append(std::span<const uint64_t> samples) {
  for (const uint64_t sample : samples) {
    const uint64_t pos = steps();
    entries_.push_back(Entry{sample, kNone, State::kHeld});
    ++held_;
    auto [it, fresh] = chains_.try_emplace(sample, Chain{pos, pos});
    if (!fresh) {
      // The tail is at or after the head, which is held, so it was not trimmed.
      At(it->second.tail).next = pos;
      it->second.tail = pos;
    }
  }
}

std::optional<uint64_t> AnnouncedSteps::Find(uint64_t sample) const {
  auto it = chains_.find(sample);
  if (it == chains_.end()) return std::nullopt;
  return it->second.head;
}

void AnnouncedSteps::Leave(uint64_t pos, State to) {
  Entry& e = At(pos);
  if (!Held(e.state)) {
    e.state = to;  // kWaiting -> kDone / kSkipped
    return;
  }
  e.state = to;
  --held_;
  auto it = chains_.find(e.sample);
  if (it == chains_.end() || it->second.head != pos) return;
  // Entries after the head are not trimmed (the head was held until now).
  uint64_t next = e.next;
  while (next != kNone && !Held(At(next).state)) next = At(next).next;
  if (next == kNone) {
    chains_.erase(it);
  } else {
    it->second.head = next;
  }
}

void AnnouncedSteps::Trim() {
  while (!entries_.empty() && base_ < front_) {
    const State s = entries_.front().state;
    if (s != State::kDone && s != State::kSkipped) break;
    entries_.pop_front();
    ++base_;
  }
}

}  // namespace libshard
