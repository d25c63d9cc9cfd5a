// libshard._core.Writer: the library's ParallelWriter (libshard/parallel_writer.h), the one
// pack and C++ generators use, for libshard.Writer (libshard/_writer.py).
//
// submit() hands a sample (raw pointers to tensor bytes the Python layer keeps alive) to the
// ParallelWriter, bounded in bytes; it returns at once unless the bound is full (then it waits
// with the GIL released). Its encode threads run Writer::Encode (lay out, compress, checksum)
// with no GIL; its commit thread appends in submission order. The Python layer holds the tensors
// of every sample until take_encoded() lists its sequence number: from then on the library no
// longer reads them. The first error of any thread is kept and raised by the next submit(),
// flush() or finish(); after it the pipeline takes nothing more.
//
// Thread-safety: every method may be called from several Python threads at once (PyWriter).
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "libshard/dataset.h"
#include "libshard/merge.h"
#include "libshard/parallel_writer.h"
#include "libshard/schema_inference.h"
#include "libshard/writer.h"
#include "options.h"

namespace libshard::python {
namespace {

Schema SchemaFromPython(const py::dict& d) {
  Schema schema;
  for (const py::handle& f : d["fields"].cast<py::list>()) {
    const py::dict fd = f.cast<py::dict>();
    Field field;
    field.name = fd["name"].cast<std::string>();
    const std::string dtype = fd["dtype"].cast<std::string>();
    const std::optional<DType> parsed = DTypeFromName(dtype);
    if (!parsed)
      ThrowStatus(Status::InvalidArgument("Writer schema: field '" + field.name + "' has dtype '" +
                                          dtype + "', which libshard does not store"));
    field.dtype = *parsed;
    field.rank = fd["rank"].cast<uint32_t>();
    field.seq_dim = fd["seq_dim"].cast<int32_t>();
    schema.fields.push_back(std::move(field));
  }
  schema.length_field = d["length_field"].cast<int32_t>();
  ThrowIfError(schema.Validate().WithContext("Writer schema"));
  return schema;
}

// Every key is read through the library's Writer option table (WriterOptionTable): its names,
// spellings, types, bounds and errors; `attrs` (a dict) is converted here. Then the configuration
// is checked as a whole (ValidateWriterConfig: e.g. zstd with field codecs), in Python's words.
WriterConfig OptionsFromPython(const py::dict& d) {
  const OptionTable<WriterConfig>& table = WriterOptionTable();
  WriterConfig o;
  for (const auto& [k, v] : d) {
    const std::string key = py::str(k);
    const OptionSpec<WriterConfig>* spec = table.Find(key);
    if (spec != nullptr && spec->name == "attrs") {
      if (!v.is_none()) o.attributes = AttributesFromPython(v, "Writer option 'attrs'");
      continue;
    }
    ThrowIfError(table.Set(o, key, ToOptionValue(table.what(), key, v)));
  }
  ThrowIfError(ValidateWriterConfig(o, [](std::string_view row) {
    return "Writer option " + SpellWriterOption(row, Caller::kPython);
  }));
  return o;
}

MetaValue MetaFromPython(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) {
    try {
      return v.cast<int64_t>();
    } catch (const py::cast_error&) {
      ThrowStatus(Status::InvalidArgument("metadata '" + key + "': integer out of int64 range"));
    }
  }
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  ThrowStatus(Status::InvalidArgument("metadata '" + key + "' must be a bool, int, float or str"));
}

// [(name, dtype_name, shape)] as InferSchema / InferLength see them; `what` names the sample in
// the error for a dtype libshard does not store.
std::vector<TensorDescription> DescribeTensors(const py::list& tensors, const std::string& what) {
  std::vector<TensorDescription> described;
  for (const py::handle& t : tensors) {
    const py::tuple tt = t.cast<py::tuple>();
    TensorDescription d;
    d.name = tt[0].cast<std::string>();
    const std::string dtype = tt[1].cast<std::string>();
    const std::optional<DType> parsed = DTypeFromName(dtype);
    if (!parsed)
      ThrowStatus(Status::InvalidArgument(what + ": field '" + d.name + "' has dtype " + dtype +
                                          ", which libshard does not store"));
    d.dtype = *parsed;
    d.shape = tt[2].cast<std::vector<uint64_t>>();
    described.push_back(std::move(d));
  }
  return described;
}

// What libshard.Writer holds: the pipeline, created on open or (schema from the first sample)
// on the first submit. Safe to call from several Python threads at once (libshard.Writer also
// takes turns itself): each call holds its own reference to the pipeline (a ParallelWriter, whose
// members may be called at once, parallel_writer.h), so finish() or abort() from one thread never
// destroys it under another's submit(), which then fails with the writer's error.
class PyWriter {
 public:
  explicit PyWriter(std::unique_ptr<ParallelWriter> pipeline) : pipeline_(std::move(pipeline)) {}

  // tensors: [(name, dtype_name, shape, data_address, nbytes)]; the bytes must stay valid until
  // take_encoded() lists the returned sequence number.
  uint64_t Submit(const std::string& key, const py::list& tensors, const py::dict& metadata) {
    const std::shared_ptr<ParallelWriter> p = Get();
    SampleInput in;
    in.source.path = key;
    uint64_t bytes = 0;
    for (const py::handle& t : tensors) {
      const py::tuple tt = t.cast<py::tuple>();
      TensorInput ti;
      ti.name = tt[0].cast<std::string>();
      const std::string dtype = tt[1].cast<std::string>();
      const std::optional<DType> parsed = DTypeFromName(dtype);
      if (!parsed)
        ThrowStatus(Status::InvalidArgument("sample '" + key + "': field '" + ti.name +
                                            "' has dtype " + dtype +
                                            ", which libshard does not store"));
      ti.dtype = *parsed;
      ti.shape = tt[2].cast<std::vector<uint64_t>>();
      ti.data = reinterpret_cast<const void*>(tt[3].cast<uintptr_t>());
      const uint64_t nbytes = tt[4].cast<uint64_t>();
      if (nbytes == 0) ti.data = nullptr;
      bytes += nbytes;
      in.tensors.push_back(std::move(ti));
    }
    for (const auto& [k, v] : metadata) {
      const std::string mk = py::str(k);
      in.metadata.push_back(MetaEntry{mk, MetaFromPython(mk, v)});
    }
    in.source.size = bytes;
    Result<uint64_t> seq = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      seq = p->Submit(std::move(in), bytes);
    }
    return ValueOrThrow(std::move(seq));
  }

  std::vector<uint64_t> TakeEncoded() { return Get()->TakeReleased(); }
  std::vector<std::string> SetAside() { return Get()->writer().set_aside(); }

  void Flush() {
    const std::shared_ptr<ParallelWriter> p = Get();
    Status st;
    {
      py::gil_scoped_release release;
      st = p->Checkpoint();  // flushed, durable and journaled (followers see it)
    }
    ThrowIfError(st);
  }

  py::dict Finish() {
    const std::shared_ptr<ParallelWriter> p = Get();
    pipeline_.reset();  // closed from now on: later calls say so
    Result<WriteSummary> summary = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      summary = p->Finish();
    }
    const WriteSummary s = ValueOrThrow(std::move(summary));
    py::dict out;
    out["samples"] = s.samples;
    out["shards"] = s.shards;
    out["raw_bytes"] = s.raw_bytes;
    out["stored_bytes"] = s.stored_bytes;
    out["blocked_seconds"] = p->blocked_seconds();
    return out;
  }

  // Stops without committing (ParallelWriter::Stop). Idempotent.
  void Abort() {
    std::shared_ptr<ParallelWriter> p = std::move(pipeline_);
    if (p) {
      py::gil_scoped_release release;
      p->Stop();  // a submit() of another thread returns (Aborted) and drops its reference
      p.reset();
    }
  }

  // [(key, raw bytes)] of the samples already in the output, in order.
  py::list ExistingSources() {
    const std::shared_ptr<ParallelWriter> p = Get();
    py::list out;
    for (const SourceFileInfo& s : p->writer().existing_sources())
      out.append(py::make_tuple(DecodeDatasetString(s.path), s.size));
    return out;
  }
  py::list ExistingKeys() {
    const std::shared_ptr<ParallelWriter> p = Get();
    py::list out;
    for (const SourceFileInfo& s : p->writer().existing_sources())
      out.append(DecodeDatasetString(s.path));
    return out;
  }
  py::dict Schema() { return SchemaToPython(Get()->writer().schema()); }
  double BlockedSeconds() { return Get()->blocked_seconds(); }

 private:
  // Called with the GIL held, which guards pipeline_ itself.
  std::shared_ptr<ParallelWriter> Get() {
    if (!pipeline_) ThrowStatus(Status::InvalidArgument("the writer is closed"));
    return pipeline_;
  }
  std::shared_ptr<ParallelWriter> pipeline_;
};

}  // namespace

Attributes AttributesFromPython(const py::handle& value, const std::string& what) {
  if (!py::isinstance<py::dict>(value))
    ThrowStatus(Status::InvalidArgument(what + " must be a dict of str -> str or int"));
  Attributes out;
  for (const auto& [k, v] : value.cast<py::dict>()) {
    if (!py::isinstance<py::str>(k))
      ThrowStatus(Status::InvalidArgument(what + ": keys must be str"));
    const std::string key = k.cast<std::string>();
    if (py::isinstance<py::str>(v)) {
      out[key] = v.cast<std::string>();
    } else if (py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v)) {
      try {
        out[key] = v.cast<int64_t>();
      } catch (const py::cast_error&) {
        ThrowStatus(Status::InvalidArgument(what + " '" + key + "': integer out of int64 range"));
      }
    } else {
      ThrowStatus(Status::InvalidArgument(
          what + " '" + key + "' must be a str or an int, got " +
          std::string(py::str(py::type::of(v).attr("__name__"))) +
          " (write a list of layer ids as a str, e.g. '1,16,29')"));
    }
  }
  ThrowIfError(ValidateAttributes(out).WithContext(what));
  return out;
}

py::dict AttributesToPython(const Attributes& attributes) {
  py::dict out;
  for (const auto& [key, value] : attributes) {
    if (const int64_t* i = std::get_if<int64_t>(&value)) out[DecodeDatasetString(key)] = *i;
    else out[DecodeDatasetString(key)] = DecodeDatasetString(std::get<std::string>(value));
  }
  return out;
}

void RegisterWriter(py::module_& m) {
  py::class_<PyWriter>(m, "Writer", "Internal pipeline of libshard.Writer.")
      .def_static(
          "open",
          [](const std::string& dir, const py::object& schema, const py::dict& options,
             bool resume) -> std::unique_ptr<PyWriter> {
            const WriterConfig config = OptionsFromPython(options);
            WriterOptions wo = WriterOptions::From(config);
            wo.caller = Caller::kPython;
            Result<std::unique_ptr<Writer>> w = Status::Internal("unset");
            if (resume) {
              py::gil_scoped_release release;
              w = Writer::Resume(dir, wo);
            } else {
              const libshard::Schema s = SchemaFromPython(schema.cast<py::dict>());
              py::gil_scoped_release release;
              w = Writer::Create(dir, s, wo);
            }
            std::unique_ptr<Writer> writer = ValueOrThrow(std::move(w));
            Result<std::unique_ptr<ParallelWriter>> p = Status::Internal("unset");
            {
              py::gil_scoped_release release;
              p = ParallelWriter::Start(std::move(writer), ParallelWriterOptions::From(config));
            }
            return std::make_unique<PyWriter>(ValueOrThrow(std::move(p)));
          },
          py::arg("dir"), py::arg("schema"), py::arg("options"), py::arg("resume"),
          "Writer::Create (resume=False, with the schema dict) or Writer::Resume.")
      .def("submit", &PyWriter::Submit, py::arg("key"), py::arg("tensors"), py::arg("metadata"))
      .def("take_encoded", &PyWriter::TakeEncoded)
      .def("flush", &PyWriter::Flush)
      .def("finish", &PyWriter::Finish)
      .def("abort", &PyWriter::Abort)
      .def("existing_keys", &PyWriter::ExistingKeys)
      .def("existing_sources", &PyWriter::ExistingSources)
      .def_property_readonly("schema", &PyWriter::Schema)
      .def_property_readonly("set_aside", &PyWriter::SetAside)
      .def_property_readonly("blocked_seconds", &PyWriter::BlockedSeconds);

  m.def(
      "merge",
      [](const std::string& out, const std::vector<std::string>& parts, bool by_key, bool link,
         bool allow_identity_change) {
        MergeOptions o;
        o.link = link;
        o.by_key = by_key;
        o.allow_identity_change = allow_identity_change;
        o.caller = Caller::kPython;
        Status st;
        {
          py::gil_scoped_release release;
          st = MergeDatasets(out, parts, o);
        }
        ThrowIfError(st);
      },
      py::arg("out"), py::arg("parts"), py::arg("by_key") = false, py::arg("link") = true,
      py::arg("allow_identity_change") = false, "MergeDatasets (libshard/merge.h).");
  m.def(
      "check_write_identity",
      [](const std::string& dir, const py::dict& options) {
        WriterOptions wo = WriterOptions::From(OptionsFromPython(options));
        wo.caller = Caller::kPython;
        Result<std::vector<std::string>> r = Status::Internal("unset");
        {
          py::gil_scoped_release release;
          r = CheckWriteIdentity(dir, wo);
        }
        return ValueOrThrow(std::move(r));
      },
      py::arg("dir"), py::arg("options"),
      "CheckWriteIdentity (libshard/writer.h): the identity check of a write that continues "
      "what `dir` holds; returns what it set aside (allow_identity_change).");
  m.def(
      "begin_part",
      [](const std::string& out, uint32_t rank, uint32_t world_size, bool allow_identity_change) {
        Result<std::vector<std::string>> r = Status::Internal("unset");
        {
          py::gil_scoped_release release;
          r = BeginPart(out, rank, world_size, allow_identity_change, Caller::kPython);
        }
        return ValueOrThrow(std::move(r));
      },
      py::arg("out"), py::arg("rank"), py::arg("world_size"),
      py::arg("allow_identity_change") = false,
      "BeginPart (libshard/merge.h): before rank RANK of WORLD_SIZE writes its part; returns "
      "what it set aside.");

  m.def(
      "check_writer_options", [](const py::dict& options) { (void)OptionsFromPython(options); },
      py::arg("options"),
      "Raises InvalidArgumentError where `options` do not pass the Writer option table.");
  m.def("writer_option_table", [] { return CommandLineTableToPython(WriterOptionTable()); },
        "The Writer's option table (libshard/writer_config.h WriterOptionTable): one dict per "
        "option, with its command-line spelling (flags, negation, help: CommandLineSpellingOf), "
        "which python -m libshard.capture's flags are made from.");
  m.def(
      "format_writer_config",
      [](const py::dict& options) { return FormatWriterConfig(OptionsFromPython(options)); },
      py::arg("options"),
      "FormatWriterConfig (libshard/writer_config.h): the configuration `options` give, one "
      "name=value per row of the Writer's table.");
  m.def(
      "infer_schema",
      [](const py::list& tensors, const std::string& what) {
        const std::vector<TensorDescription> described = DescribeTensors(tensors, what);
        return SchemaToPython(ValueOrThrow(InferSchema(described, {}, what)));
      },
      py::arg("tensors"), py::arg("what"),
      "InferSchema (libshard/schema_inference.h) of [(name, dtype_name, shape)]: the schema "
      "`libshard pack` infers from a file holding these tensors.");
  m.def(
      "infer_length",
      [](const py::list& tensors, const std::string& what) {
        return InferLength(DescribeTensors(tensors, what));
      },
      py::arg("tensors"), py::arg("what"),
      "InferLength (libshard/schema_inference.h) of [(name, dtype_name, shape)]: the token "
      "length of a hidden-state sample (rank-1 input_ids, else token_ids), or None.");
  m.def("part_directory", &PartDirectory, py::arg("out"), py::arg("rank"), py::arg("world_size"),
        "PartDirectory (libshard/merge.h): where rank RANK of WORLD_SIZE writes its part.");
  m.def(
      "mark_part_empty",
      [](const std::string& out, uint32_t rank, uint32_t world_size, bool empty) {
        ThrowIfError(MarkPartEmpty(out, rank, world_size, empty));
      },
      py::arg("out"), py::arg("rank"), py::arg("world_size"), py::arg("empty") = true,
      "MarkPartEmpty (libshard/merge.h).");
  m.def(
      "join_parts",
      [](const std::string& out, uint32_t world_size, bool link, bool allow_identity_change) {
        JoinOptions o;
        o.link = link;
        o.allow_identity_change = allow_identity_change;
        o.caller = Caller::kPython;
        Result<JoinResult> r = Status::Internal("unset");
        {
          py::gil_scoped_release release;
          r = JoinParts(out, world_size, o);
        }
        const JoinResult j = ValueOrThrow(std::move(r));
        py::dict d;
        d["joined"] = j.joined;
        d["already_joined"] = j.already_joined;
        d["ranks_finished"] = j.ranks_finished;
        d["parts_joined"] = j.parts_joined;
        return d;
      },
      py::arg("out"), py::arg("world_size"), py::arg("link") = true,
      py::arg("allow_identity_change") = false,
      "JoinParts (libshard/merge.h, FORMAT.md §7.1): the join of OUT's parts when every rank "
      "has finished.");

  m.def("dataset_attributes", [](const std::shared_ptr<Dataset>& ds) {
    return AttributesToPython(ds->provenance().attributes);
  });
  m.def(
      "dataset_provenance",
      [](const std::shared_ptr<Dataset>& ds) {
        const DatasetProvenance& p = ds->provenance();
        py::dict d;
        d["source_root"] = DecodeDatasetString(p.source_root);
        d["sources"] = p.sources;
        d["created_by"] = DecodeDatasetString(p.created_by);
        d["created_at"] = DecodeDatasetString(p.created_at);
        d["attributes"] = AttributesToPython(p.attributes);
        return d;
      },
      "Dataset::provenance() (libshard/dataset.h): how the dataset was made, as its manifest "
      "records it (FORMAT.md §2.2).");
  m.def(
      "dataset_identity",
      [](const std::shared_ptr<Dataset>& ds) {
        const DatasetIdentity id = ds->identity();
        py::dict d;
        d["xxh3"] = id.digest_text();
        d["recorded"] = id.recorded;
        d["attributes"] = AttributesToPython(id.attributes);
        return d;
      },
      "Dataset::identity() (libshard/identity.h): {xxh3: 16 hex digits of the digest of the "
      "attributes and schema, recorded: whether the manifest records it, attributes}.");
  m.def(
      "check_attributes",
      [](const std::shared_ptr<Dataset>& ds, const py::dict& expected) {
        ThrowIfError(CheckAttributes(ds->provenance().attributes,
                                     AttributesFromPython(expected, "expect"),
                                     "dataset " + ds->path()));
      },
      "CheckAttributes (libshard/attributes.h): InvalidArgumentError when the dataset's "
      "attributes do not match `expected`.");

  // Every sample's source path (a Writer's key), in one call: Dataset.find's map.
  m.def("dataset_sources", [](const std::shared_ptr<Dataset>& ds) {
    py::list out;
    for (uint64_t i = 0; i < ds->size(); ++i)
      out.append(DecodeDatasetString(ValueOrThrow(ds->source(i)).path));
    return out;
  });
}

}  // namespace libshard::python
