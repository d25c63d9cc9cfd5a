// A fake clock and a recording log sink for the loader's diagnostics (loader/diagnostics.h), so
// that tests of its waits and warnings neither sleep nor capture stderr.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loader/diagnostics.h"

namespace libshard::testing {

// Time moves only when told to, and by the whole timeout whenever the loader waits: a wait
// returns after at most 1 ms of real time (the loader's threads still run meanwhile) with the
// clock `timeout` later, so seconds of loader time pass in milliseconds.
class FakeClock final : public LoaderClock {
 public:
  TimePoint Now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
               std::chrono::milliseconds timeout) const override {
    cv.wait_for(lock, std::chrono::milliseconds(1));
    Advance(timeout);
  }
  void Advance(std::chrono::steady_clock::duration d) const {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }

 private:
  mutable std::mutex mu_;
  mutable TimePoint now_{};
};

// Keeps every line; WaitForLine() blocks until one containing a text arrives.
class RecordingSink {
 public:
  LogSink AsSink() {
    return [this](const std::string& line) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        lines_.push_back(line);
      }
      cv_.notify_all();
    };
  }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }
  // The lines containing `text`.
  std::vector<std::string> Matching(const std::string& text) const {
    std::vector<std::string> out;
    for (const std::string& l : lines()) {
      if (l.find(text) != std::string::npos) out.push_back(l);
    }
    return out;
  }
  // Whether a line containing `text` arrived within `real_timeout`.
  bool WaitForLine(const std::string& text, std::chrono::seconds real_timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, real_timeout, [&] {
      for (const std::string& l : lines_) {
        if (l.find(text) != std::string::npos) return true;
      }
      return false;
    });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

// `lines`, one a line, for failure messages.
inline std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

}  // namespace libshard::testing
