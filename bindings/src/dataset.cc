// libshard._core.Dataset: random access to a packed dataset (libshard/dataset.h).
//
// Thin: indices are checked here (IndexError), blocking reads release the GIL, results are plain
// Python data; the pure-Python layer (libshard/_dataset.py) makes torch tensors.
#include "libshard/dataset.h"
#include "libshard/option_table.h"
#include "libshard/storage.h"
#include "libshard/upgrade.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "options.h"

namespace libshard::python {
namespace {

// Maps a Python index (negative counts from the end) to [0, size), else raises IndexError.
uint64_t CheckIndex(const Dataset& dataset, int64_t index) {
  const uint64_t size = dataset.size();
  int64_t resolved = index;
  if (resolved < 0) resolved += static_cast<int64_t>(size);
  if (resolved < 0 || static_cast<uint64_t>(resolved) >= size) {
    throw py::index_error("sample index " + std::to_string(index) + " is out of range: dataset " +
                          dataset.path() + " has " + std::to_string(size) + " samples");
  }
  return static_cast<uint64_t>(resolved);
}

py::dict SourceFileInfoToPython(const SourceFileInfo& p) {
  py::dict out;
  out["path"] = DecodeDatasetString(p.path);
  out["size"] = p.size;
  out["mtime_ns"] = p.mtime_ns;
  out["content_hash"] = p.content_hash;
  return out;
}

}  // namespace

py::dict SchemaToPython(const Schema& schema) {
  py::list fields;
  for (const Field& field : schema.fields) {
    py::dict f;
    f["name"] = DecodeDatasetString(field.name);
    f["dtype"] = std::string(DTypeName(field.dtype));
    f["rank"] = field.rank;
    f["seq_dim"] = field.seq_dim;
    fields.append(std::move(f));
  }
  py::dict out;
  out["fields"] = std::move(fields);
  out["length_field"] = schema.length_field;
  return out;
}

void RegisterDataset(py::module_& m) {
  m.def("dataset_option_table", [] { return OptionTableToPython(DatasetOptionTable()); },
        "The rows of DatasetOptionTable (libshard/dataset.h) as dicts.");
  m.def(
      "storage_info",
      [](const std::string& location) {
        const StorageInfo info = ValueOrThrow(DescribeStorage(location));
        py::dict out;
        out["driver"] = info.driver;
        out["location"] = info.location;
        out["work_dir"] = info.work_dir;
        out["staged"] = info.staged;
        out["local_files"] = info.local_files;
        return out;
      },
      py::arg("location"),
      "DescribeStorage (libshard/storage.h): the storage driver's view of a dataset location.");
  m.def(
      "upgrade_index",
      [](const std::string& path) {
        Result<bool> upgraded = [&] {
          py::gil_scoped_release release;
          return UpgradeIndex(path, Caller::kPython);
        }();
        return ValueOrThrow(std::move(upgraded));
      },
      py::arg("path"));
  py::class_<Dataset, std::shared_ptr<Dataset>>(m, "Dataset",
                                                "A packed dataset opened for random access.")
      .def_static(
          "open",
          [](const std::string& path, bool verify_checksums, const py::dict& settings) {
            // cache, cache_size (object stores only): read through DatasetOptionTable.
            const OptionTable<DatasetOptions>& table = DatasetOptionTable();
            DatasetOptions options;
            for (const auto& [k, v] : settings) {
              const std::string key = py::str(k);
              ThrowIfError(table.Set(options, key, ToOptionValue(table.what(), key, v)));
            }
            options.caller = Caller::kPython;
            options.verify_checksums = verify_checksums;
            Result<std::shared_ptr<Dataset>> result = [&] {
              py::gil_scoped_release release;
              return Dataset::Open(path, options);
            }();
            return ValueOrThrow(std::move(result));
          },
          py::arg("path"), py::arg("verify_checksums") = true, py::arg("options") = py::dict(),
          "Dataset::Open; `options`: DatasetOptionTable's keys (cache, cache_size).")
      .def_property_readonly("path", &Dataset::path)
      .def("__len__", &Dataset::size)
      .def_property_readonly("schema", [](const Dataset& d) { return SchemaToPython(d.schema()); })
      .def_property_readonly("total_stored_bytes", &Dataset::total_stored_bytes)
      .def_property_readonly("total_raw_bytes", &Dataset::total_raw_bytes)
      .def_property_readonly("index_version", &Dataset::index_version)
      .def_property_readonly("has_field_checksums", &Dataset::has_field_checksums)
      .def_property_readonly("has_row_blocks", &Dataset::has_row_blocks)
      .def_property_readonly("shards",
                             [](const Dataset& d) {
                               py::list out;
                               for (const ShardInfo& s : d.shards()) {
                                 py::dict shard;
                                 shard["path"] = DecodeDatasetString(s.path);
                                 shard["size"] = s.size;
                                 shard["samples"] = s.samples;
                                 out.append(std::move(shard));
                               }
                               return out;
                             })
      .def("lengths",
           [](const Dataset& d) {
             std::vector<uint64_t> lengths = d.lengths();
             py::array_t<int64_t> out(static_cast<py::ssize_t>(lengths.size()));
             auto view = out.mutable_unchecked<1>();
             for (size_t i = 0; i < lengths.size(); ++i) {
               view(static_cast<py::ssize_t>(i)) = static_cast<int64_t>(lengths[i]);
             }
             return out;
           })
      .def("location",
           [](const Dataset& d, int64_t i) {
             SampleLocation loc = d.location(CheckIndex(d, i));
             py::dict out;
             out["shard"] = loc.shard;
             out["flags"] = loc.flags;
             out["offset"] = loc.offset;
             out["stored_size"] = loc.stored_size;
             out["raw_size"] = loc.raw_size;
             out["checksum"] = loc.checksum;
             out["length"] = loc.length;
             return out;
           })
      .def("source_file",
           [](const Dataset& d, int64_t i) {
             return SourceFileInfoToPython(ValueOrThrow(d.source_file(CheckIndex(d, i))));
           })
      .def("metadata",
           [](const Dataset& d, int64_t i) {
             return MetadataToPython(ValueOrThrow(d.metadata(CheckIndex(d, i))));
           })
      .def(
          "read",
          [](const Dataset& d, int64_t i) {
            const uint64_t index = CheckIndex(d, i);
            Result<Sample> sample = [&] {
              py::gil_scoped_release release;
              return d.Read(index);
            }();
            return SampleToPython(ValueOrThrow(std::move(sample)));
          },
          "Reads sample i (GIL released) as (index, fields, metadata); see SampleToPython.")
      .def(
          "read_rows",
          [](const Dataset& d, int64_t i, std::optional<uint64_t> start,
             std::optional<uint64_t> stop, const std::vector<std::string>& fields) {
            const uint64_t index = CheckIndex(d, i);
            ReadRequest request;
            if (start || stop) request.rows = RowRange{start.value_or(0), stop.value_or(RowRange::kEnd)};
            request.fields = fields;
            Result<Sample> sample = [&] {
              py::gil_scoped_release release;
              return d.Read(index, request);
            }();
            return SampleToPython(ValueOrThrow(std::move(sample)));
          },
          py::arg("i"), py::arg("start") = py::none(), py::arg("stop") = py::none(),
          py::arg("fields") = std::vector<std::string>(),
          "Dataset::Read(i, ReadRequest): rows [start, stop) of the fields with a sequence "
          "dimension (None: from 0 / to the end), of `fields` (empty: all); (index, fields, "
          "metadata) as read().")
      .def("verify", [](const Dataset& d, int64_t i) {
        const uint64_t index = CheckIndex(d, i);
        Status status = [&] {
          py::gil_scoped_release release;
          return d.Verify(index);
        }();
        ThrowIfError(status);
      });
}

}  // namespace libshard::python
