// libshard._core.pack: the `libshard pack` pipeline (converters/pack/pack.h) for Python.
//
// Takes the options as a dict (built by libshard/_pack.py) keyed by the pack option table's names
// (PackOptionTable), the table the CLI's flags are read by too. Runs with the GIL released;
// progress lines (when asked) go to stderr.
#include <pybind11/stl.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bindings.h"
#include "options.h"

#if defined(LIBSHARD_PY_HAVE_PACK)
#include "pack/option_parsing.h"
#include "pack/pack.h"
#include "pack/source_list.h"
#endif

namespace libshard::python {

#if defined(LIBSHARD_PY_HAVE_PACK)
namespace {

// Every key is read through the pack option table (PackOptionTable, pack/option_parsing.h): its
// names, spellings, types, bounds and errors; `attrs` (a dict) and `progress` (stderr lines) are
// converted here.
convert::PackOptions OptionsFromPython(const py::dict& d, bool* progress) {
  const OptionTable<convert::PackOptions>& table = convert::PackOptionTable();
  convert::PackOptions o;
  for (const auto& [k, v] : d) {
    const std::string key = py::str(k);
    if (key == "attrs") {
      if (!v.is_none()) o.attributes = AttributesFromPython(v, "pack option 'attrs'");
    } else if (key == "progress") {
      ThrowIfError(
          option_table::ToBool(table.what(), key, ToOptionValue(table.what(), key, v), progress));
    } else {
      ThrowIfError(table.Set(o, key, ToOptionValue(table.what(), key, v)));
    }
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
  py::list set_aside;
  for (const std::string& p : s.set_aside) set_aside.append(DecodeDatasetString(p));
  out["set_aside"] = std::move(set_aside);
  return out;
}

}  // namespace

void RegisterPack(py::module_& m) {
  m.attr("HAVE_PACK") = true;
  m.def("pack_option_table", [] { return CommandLineTableToPython(convert::PackOptionTable()); },
        "The pack option table (converters/pack/option_parsing.h PackOptionTable): one dict per "
        "option.");
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
  m.def(
      "parse_attributes",
      [](const std::vector<std::string>& items) {
        Attributes attributes;
        for (const std::string& item : items)
          ThrowIfError(convert::ParseAttribute(item, &attributes));
        return AttributesToPython(attributes);
      },
      py::arg("items"),
      "ParseAttribute (converters/pack/option_parsing.h) of each KEY=VALUE, as `libshard pack "
      "--attr` reads them: the dict of attributes (VALUE an int when it is one in decimal).");
  m.def("walk_selects", &convert::WalkSelects, py::arg("rel_path"), py::arg("include"),
        py::arg("exclude"),
        "WalkSelects (converters/pack/source_list.h): whether pack's walk of a directory takes "
        "the file at REL_PATH as a source (python -m libshard.capture's rule).");
}

#else  // !LIBSHARD_PY_HAVE_PACK

void RegisterPack(py::module_& m) {
  m.attr("HAVE_PACK") = false;
  m.def("pack", [](const py::dict&) {
    ThrowStatus(Status::Unsupported(
        "this build of libshard has no pack pipeline (LIBSHARD_BUILD_TOOLS=OFF)"));
  });
  m.def("walk_selects", [](const std::string&, const std::vector<std::string>&,
                           const std::vector<std::string>&) -> bool {
    ThrowStatus(Status::Unsupported("this build of libshard has no pack pipeline "
                                    "(LIBSHARD_BUILD_TOOLS=OFF), whose rules capture applies"));
  });
}

#endif

}  // namespace libshard::python
