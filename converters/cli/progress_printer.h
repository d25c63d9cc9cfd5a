// Progress display for `libshard pack`: a redrawn bar on a terminal, plain periodic lines
// otherwise (logs, CI), never both.
#pragma once

#include <cstdio>

#include "pack/pack.h"

namespace libshard::cli {

class ProgressPrinter {
 public:
  enum class Mode { kBar, kLines, kNone };
  // `interval_s`: seconds between redraws (bar) or lines.
  ProgressPrinter(std::FILE* out, Mode mode, double interval_s);
  // kBar when `out` is a terminal, else kLines.
  static Mode AutoMode(std::FILE* out);

  void Update(const convert::PackProgress& p);
  // Ends a partly drawn bar so that a following message starts on its own line.
  void EndLine();

 private:
  std::FILE* out_;
  Mode mode_;
  double interval_s_;
  double last_print_s_ = -1e9;
  bool bar_drawn_ = false;
};

}  // namespace libshard::cli
