// `libshard unpack DIR -o OUTDIR [--samples RANGE]`: back to `.pt` files that
// torch.load(weights_only=True) reads (converters/pack/torch_file_writer.h).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "cli/command.h"
#include "libshard/dataset.h"
#include "pack/option_parsing.h"
#include "pack/torch_file_writer.h"

namespace libshard::cli {
namespace fs = std::filesystem;
namespace {

struct UnpackArgs {
  std::string dir;
  std::string output;
  std::string samples;
  std::string naming = "source";
  bool quiet = false;
};

// The relative output name of a sample: its source path with the extension replaced by ".pt"
// (".gz" dropped first), or nullopt when the recorded path is unusable (absolute, "..", empty).
std::optional<std::string> NameFromSource(const std::string& rel) {
  if (rel.empty()) return std::nullopt;
  const fs::path p(rel);
  if (p.is_absolute()) return std::nullopt;
  for (const auto& c : p) {
    if (c == ".." || c == "." || c.empty()) return std::nullopt;
  }
  std::string s = p.generic_string();
  auto ends = [&](std::string_view suf) {
    return s.size() > suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
  };
  if (ends(".gz")) s.resize(s.size() - 3);
  for (std::string_view ext : {".pt", ".pth", ".ckpt", ".bin", ".safetensors"}) {
    if (ends(ext)) {
      s.resize(s.size() - ext.size());
      break;
    }
  }
  return s + ".pt";
}

int RunUnpack(const UnpackArgs& a) {
  constexpr std::string_view kCmd = "unpack";
  if (a.naming != "source" && a.naming != "index") {
    return UsageError(kCmd, "--naming must be source or index");
  }
  DatasetOptions opts;
  opts.caller = Caller::kCli;
  auto opened = Dataset::Open(a.dir, opts);
  if (!opened.ok()) return Fail(kCmd, opened.status());
  const Dataset& ds = **opened;
  std::vector<uint64_t> selection;
  if (a.samples.empty()) {
    selection.resize(ds.size());
    for (uint64_t i = 0; i < ds.size(); ++i) selection[i] = i;
  } else {
    auto r = convert::ParseSampleRange(a.samples, ds.size());
    if (!r.ok()) return UsageError(kCmd, r.status().message());
    selection = std::move(*r);
  }
  std::unordered_set<std::string> used;
  for (uint64_t i : selection) {
    auto sample = ds.Read(i);
    if (!sample.ok()) return Fail(kCmd, sample.status());
    auto meta = ds.metadata(i);
    if (!meta.ok()) return Fail(kCmd, meta.status());
    std::optional<std::string> name;
    if (a.naming == "source") {
      auto prov = ds.source(i);
      if (!prov.ok()) return Fail(kCmd, prov.status());
      name = NameFromSource(prov->path);
    }
    char fallback[40];
    std::snprintf(fallback, sizeof fallback, "sample_%08llu.pt", static_cast<unsigned long long>(i));
    if (!name) name = fallback;
    if (!used.insert(*name).second) {  // two sources mapping to one name: keep both
      *name = name->substr(0, name->size() - 3) + "_" + std::to_string(i) + ".pt";
      used.insert(*name);
    }
    std::vector<convert::TorchTensorRef> refs;
    for (const TensorView& v : sample->tensors()) {
      refs.push_back({std::string(v.name), v.dtype, v.shape, std::span<const std::byte>(v.data, v.nbytes)});
    }
    const std::string path = (fs::path(a.output) / *name).string();
    Status st = convert::WriteTorchFile(path, refs, *meta);
    if (!st.ok()) return Fail(kCmd, st.WithContext("sample " + std::to_string(i)));
  }
  if (!a.quiet) {
    std::printf("unpacked %zu samples into %s\n", selection.size(), a.output.c_str());
  }
  return kExitOk;
}

}  // namespace

Command AddUnpackCommand(CLI::App& app) {
  auto args = std::make_shared<UnpackArgs>();
  CLI::App* c = app.add_subcommand(
      "unpack", "Write samples back as .pt files (torch.save format; torch.load(weights_only=True) reads them)");
  c->add_option("DIR", args->dir, "Dataset directory")->required();
  c->add_option("-o,--output", args->output, "Output directory")->required();
  c->add_option("--samples", args->samples,
                "Which samples: N, A:B (half-open), A-B (inclusive), A:, :B, comma-separated");
  c->add_option("--naming", args->naming,
                "source: the source's relative path with a .pt extension; index: sample_NNNNNNNN.pt")
      ->capture_default_str();
  c->add_flag("-q,--quiet", args->quiet, "No summary");
  return {c, [args] { return RunUnpack(*args); }};
}

}  // namespace libshard::cli
