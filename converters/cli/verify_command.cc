// `libshard verify DIR [--against SRC]`: every sample checksum; with --against, every tensor
// bit-exact against its source file.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/cache_options.h"
#include "cli/command.h"
#include "libshard/dataset.h"
#include "pack/verify_against.h"

namespace libshard::cli {
namespace {

struct VerifyArgs {
  std::string dir;
  std::string against;
  std::string from = "auto";
  uint64_t max_errors = 20;
  bool quiet = false;
  CacheArgs cache;
};

int RunVerify(const VerifyArgs& a) {
  constexpr std::string_view kCmd = "verify";
  DatasetOptions opts;
  opts.verify_checksums = true;
  opts.caller = Caller::kCli;
  if (Status st = ApplyCacheOptions(a.cache, &opts); !st.ok()) return UsageError(kCmd, st.message());
  auto opened = Dataset::Open(a.dir, opts);
  if (!opened.ok()) return Fail(kCmd, opened.status());
  const Dataset& ds = **opened;
  std::optional<convert::AgainstSource> against;
  if (!a.against.empty()) {
    auto format = convert::ParseSourceFormat(a.from);
    if (!format.ok()) return UsageError(kCmd, "--from: " + format.status().message());
    auto src = convert::AgainstSource::Open(a.against, *format);
    if (!src.ok()) return Fail(kCmd, src.status().WithContext("--against " + a.against));
    against = std::move(*src);
  }
  uint64_t errors = 0, changed_sources = 0;
  // Per lossy field (fp8, FORMAT.md §4.3.5): the quantization error over every sample.
  std::vector<convert::LossyFieldError> lossy;
  for (uint64_t i = 0; i < ds.size(); ++i) {
    Status st = ds.Verify(i);
    if (st.ok() && !a.against.empty()) {
      auto r = convert::VerifyAgainstSource(ds, i, *against);
      if (r.ok()) {
        for (const convert::LossyFieldError& e : r->lossy) {
          auto it = std::find_if(lossy.begin(), lossy.end(),
                                 [&](const auto& x) { return x.field == e.field; });
          if (it == lossy.end()) it = lossy.insert(lossy.end(), convert::LossyFieldError{e.field});
          it->max_rel = std::max(it->max_rel, e.max_rel);
          it->sum_rel += e.sum_rel;
          it->count += e.count;
        }
      }
      if (!r.ok()) {
        st = r.status();
      } else if (r->source_hash_checked && !r->source_hash_matches) {
        ++changed_sources;
        if (!a.quiet) {
          std::fprintf(stderr,
                       "libshard verify: warning: sample %llu: the source file's xxh3 differs from "
                       "the one recorded at pack time (its tensors still match)\n",
                       static_cast<unsigned long long>(i));
        }
      }
    }
    if (!st.ok()) {
      if (errors < a.max_errors) Fail(kCmd, st);
      ++errors;
    }
  }
  if (errors) {
    std::fprintf(stderr, "libshard verify: %llu of %llu samples failed%s\n",
                 static_cast<unsigned long long>(errors), static_cast<unsigned long long>(ds.size()),
                 errors > a.max_errors ? " (only the first ones are shown)" : "");
    return kExitFailure;
  }
  if (!a.quiet) {
    std::printf("ok: %llu samples, %zu shards verified (%s)%s%s\n",
                static_cast<unsigned long long>(ds.size()), ds.shards().size(),
                ds.has_field_checksums() ? "sample and field checksums" : "sample checksums",
                a.against.empty() ? ""
                : lossy.empty()   ? ", every tensor bit-exact against "
                                  : ", every lossless tensor bit-exact and every fp8 one within "
                                    "the FORMAT.md §4.3.5 bound against ",
                a.against.c_str());
    for (const convert::LossyFieldError& e : lossy)
      std::printf("fp8 field %s: relative error max %.4g, mean %.4g over %llu values\n",
                  e.field.c_str(), e.max_rel, e.count ? e.sum_rel / static_cast<double>(e.count) : 0.0,
                  static_cast<unsigned long long>(e.count));
    if (changed_sources) {
      std::printf("note: %llu source files changed since packing (tensors identical)\n",
                  static_cast<unsigned long long>(changed_sources));
    }
  }
  return kExitOk;
}

}  // namespace

Command AddVerifyCommand(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* c = app.add_subcommand("verify", "Check every sample's checksum (and optionally its source)");
  c->add_option("DIR", args->dir,
                 "Dataset directory or object-store URL (s3://BUCKET/PREFIX, gs://BUCKET/PREFIX)")
      ->required();
  c->add_option("--against", args->against,
                "Source root or cache: compare every tensor bit-exact with the file (or the "
                "DeepSpec / NeMo AutoModel / TorchSpec cache sample) it was packed from");
  c->add_option("--from", args->from,
                "What --against holds, as pack's --from: auto, files, deepspec, automodel, "
                "torchspec")
      ->capture_default_str();
  c->add_option("--max-errors", args->max_errors, "Print at most this many errors")->capture_default_str();
  c->add_flag("-q,--quiet", args->quiet, "Print only errors");
  AddCacheOptions(c, &args->cache);
  return {c, [args] { return RunVerify(*args); }};
}

}  // namespace libshard::cli
