// libshard._core.pack: the `libshard pack` pipeline (converters/pack/pack.h) for Python.
//
// Takes the options as a dict (built by libshard/_pack.py) whose values use the command line's
// spellings ("4GiB", "zstd:3", "1/4"), parsed by the same functions as the CLI. Runs with the GIL
// released; progress lines (when asked) go to stderr from the calling thread.
#include <pybind11/stl.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bindings.h"
#include "options.h"

#if defined(LIBSHARD_PY_HAVE_PACK)
#include "pack/option_parsing.h"
#include "pack/pack.h"
#endif

namespace libshard::python {

#if defined(LIBSHARD_PY_HAVE_PACK)
namespace {

const OptionReader kOptions("pack option");

convert::PackOptions OptionsFromPython(const py::dict& d, bool* progress) {
  convert::PackOptions o;
  for (const auto& [k, v] : d) {
    const std::string key = py::str(k);
    if (key == "src") o.source_root = kOptions.Get<std::string>(key, v);
    else if (key == "out") o.output = kOptions.Get<std::string>(key, v);
    else if (key == "files_from") o.files_from = kOptions.Get<std::string>(key, v);
    else if (key == "include") o.include = kOptions.Get<std::vector<std::string>>(key, v);
    else if (key == "exclude") o.exclude = kOptions.Get<std::vector<std::string>>(key, v);
    else if (key == "shard_size") {
      Result<uint64_t> size = convert::ParseByteSize(kOptions.Get<std::string>(key, v));
      if (!size.ok()) ThrowStatus(size.status().WithContext("pack option 'shard_size'"));
      o.shard_size = *size;
    } else if (key == "compress") {
      Result<CompressionSpec> parsed = ParseCompression(kOptions.Get<std::string>(key, v));
      if (!parsed.ok()) ThrowStatus(parsed.status().WithContext("pack option 'compress'"));
      const CompressionSpec& spec = *parsed;
      o.compression = spec.compression;
      o.zstd_level = spec.level;
      o.field_codecs = spec.field_codecs;
    } else if (key == "store_dtype") {
      Result<bool> fp8 = convert::ParseStoreDType(kOptions.Get<std::string>(key, v));
      if (!fp8.ok()) ThrowStatus(fp8.status().WithContext("pack option 'store_dtype'"));
      o.store_fp8 = *fp8;
    } else if (key == "fields") o.fields = kOptions.Get<std::vector<std::string>>(key, v);
    else if (key == "threads") {
      const uint64_t threads = kOptions.Unsigned(key, v);
      if (threads > 4096) kOptions.Bad(key, "is too large");
      o.threads = static_cast<unsigned>(threads);
    } else if (key == "on_error") {
      Result<convert::OnError> parsed = convert::ParsePackOnError(kOptions.Get<std::string>(key, v));
      if (!parsed.ok()) ThrowStatus(parsed.status().WithContext("pack option 'on_error'"));
      o.on_error = *parsed;
    } else if (key == "resume") o.resume = kOptions.Get<bool>(key, v);
    else if (key == "append") o.append = kOptions.Get<bool>(key, v);
    else if (key == "part") {
      const std::string s = kOptions.Get<std::string>(key, v);
      if (!s.empty()) {
        Result<convert::PartSpec> parsed = convert::ParsePart(s);
        if (!parsed.ok()) ThrowStatus(parsed.status().WithContext("pack option 'part'"));
        const convert::PartSpec& part = *parsed;
        o.part_index = part.index;
        o.part_count = part.count;
      }
    } else if (key == "split_layers") {
      o.split_layers = kOptions.Get<std::string>(key, v);
    } else if (key == "attrs") {
      o.attributes = AttributesFromPython(v, "pack option 'attrs'");
    } else if (key == "allow_varying_dims") o.allow_varying_dims = kOptions.Get<bool>(key, v);
    else if (key == "hash_sources") o.hash_sources = kOptions.Get<bool>(key, v);
    else if (key == "window_bytes") o.window_bytes = kOptions.Unsigned(key, v);
    else if (key == "fsync") o.fsync = kOptions.Get<bool>(key, v);
    else if (key == "journal_every_bytes") o.journal_every_bytes = kOptions.Unsigned(key, v);
    else if (key == "progress") *progress = kOptions.Get<bool>(key, v);
    else kOptions.Bad(key, "is not a known option");
  }
  return o;
}

py::dict SummaryToPython(const convert::PackSummary& s) {
  py::dict out;
  out["output"] = s.output;
  out["samples"] = s.dataset.samples;
  out["shards"] = s.dataset.shards;
  out["samples_added"] = s.samples_added;
  out["sources_selected"] = s.sources_selected;
  out["already_present"] = s.already_present;
  out["nothing_to_resume"] = s.nothing_to_resume;
  py::list skipped;
  for (const convert::SkippedSource& k : s.skipped) {
    py::dict e;
    e["path"] = DecodeDatasetString(k.path);  // a file name: any bytes (surrogateescape)
    e["reason"] = DecodeDatasetString(k.reason);
    skipped.append(std::move(e));
  }
  out["skipped"] = std::move(skipped);
  out["skipped_report"] = s.skipped_report;
  out["bytes_in"] = s.bytes_in;
  out["bytes_out"] = s.bytes_out;
  out["raw_bytes"] = s.raw_bytes;
  out["seconds"] = s.seconds;
  out["peak_rss_bytes"] = s.peak_rss_bytes;
  py::dict dataset;
  dataset["samples"] = s.dataset.samples;
  dataset["shards"] = s.dataset.shards;
  dataset["raw_bytes"] = s.dataset.raw_bytes;
  dataset["stored_bytes"] = s.dataset.stored_bytes;
  out["dataset"] = std::move(dataset);
  return out;
}

}  // namespace

void RegisterPack(py::module_& m) {
  m.attr("HAVE_PACK") = true;
  m.def(
      "pack",
      [](const py::dict& options) {
        bool progress = false;
        convert::PackOptions o = OptionsFromPython(options, &progress);
        if (progress) {
          o.progress = [](const convert::PackProgress& p) {
            std::fprintf(stderr, "libshard pack: %llu/%llu files, %s of %s, %llu skipped%s\n",
                         static_cast<unsigned long long>(p.files_done),
                         static_cast<unsigned long long>(p.files_total),
                         convert::FormatBytes(p.bytes_done).c_str(),
                         convert::FormatBytes(p.bytes_total).c_str(),
                         static_cast<unsigned long long>(p.skipped), p.finished ? ", done" : "");
          };
        }
        ThrowIfError(convert::ValidatePackOptions(o));
        Result<convert::PackSummary> summary = [&] {
          py::gil_scoped_release release;
          return convert::Pack(o);
        }();
        return SummaryToPython(ValueOrThrow(std::move(summary)));
      },
      py::arg("options"), "Runs a pack job (see libshard.pack); returns the summary dict.");
}

#else  // !LIBSHARD_PY_HAVE_PACK

void RegisterPack(py::module_& m) {
  m.attr("HAVE_PACK") = false;
  m.def("pack", [](const py::dict&) {
    ThrowStatus(Status::Unsupported(
        "this build of libshard has no pack pipeline (LIBSHARD_BUILD_TOOLS=OFF)"));
  });
}

#endif

}  // namespace libshard::python
