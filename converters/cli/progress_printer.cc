#include "cli/progress_printer.h"

#include <unistd.h>

#include <string>

#include "pack/option_parsing.h"

namespace libshard::cli {

ProgressPrinter::ProgressPrinter(std::FILE* out, Mode mode, double interval_s)
    : out_(out), mode_(mode), interval_s_(interval_s) {}

ProgressPrinter::Mode ProgressPrinter::AutoMode(std::FILE* out) {
  return ::isatty(::fileno(out)) ? Mode::kBar : Mode::kLines;
}

void ProgressPrinter::Update(const convert::PackProgress& p) {
  if (mode_ == Mode::kNone) return;
  if (!p.finished && p.elapsed_s - last_print_s_ < interval_s_) return;
  last_print_s_ = p.elapsed_s;
  const double gbps = p.elapsed_s > 0 ? static_cast<double>(p.bytes_done) / p.elapsed_s / 1e9 : 0;
  const double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total)
                                    : (p.files_total ? static_cast<double>(p.files_done) / static_cast<double>(p.files_total) : 1);
  const double eta = (frac > 0 && frac < 1) ? p.elapsed_s * (1 - frac) / frac : 0;
  const std::string skipped = p.skipped ? "  " + std::to_string(p.skipped) + " skipped" : "";
  if (mode_ == Mode::kBar) {
    constexpr int kWidth = 28;
    const int filled = static_cast<int>(frac * kWidth + 0.5);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    std::fprintf(out_, "\r\033[K%3d%% [%s] %llu/%llu files  %s/%s  %.2f GB/s  %s %s%s",
                 static_cast<int>(frac * 100), bar.c_str(),
                 static_cast<unsigned long long>(p.files_done),
                 static_cast<unsigned long long>(p.files_total),
                 convert::FormatBytes(p.bytes_done).c_str(),
                 convert::FormatBytes(p.bytes_total).c_str(), gbps,
                 p.finished ? "took" : "ETA",
                 convert::FormatDuration(p.finished ? p.elapsed_s : eta).c_str(), skipped.c_str());
    if (p.finished) std::fputc('\n', out_);
    bar_drawn_ = !p.finished;
  } else {
    std::fprintf(out_, "pack: %llu/%llu files, %s/%s, %.2f GB/s, %s %s%s\n",
                 static_cast<unsigned long long>(p.files_done),
                 static_cast<unsigned long long>(p.files_total),
                 convert::FormatBytes(p.bytes_done).c_str(),
                 convert::FormatBytes(p.bytes_total).c_str(), gbps,
                 p.finished ? "elapsed" : "ETA",
                 convert::FormatDuration(p.finished ? p.elapsed_s : eta).c_str(), skipped.c_str());
  }
  std::fflush(out_);
}

void ProgressPrinter::EndLine() {
  if (bar_drawn_) std::fputc('\n', out_);
  bar_drawn_ = false;
}

}  // namespace libshard::cli
