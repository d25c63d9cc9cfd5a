// libshard._core.Writer: the C++ Writer (libshard/writer.h) behind a bounded, ordered pipeline,
// for libshard.Writer (libshard/_writer.py).
//
// submit() hands a sample (raw pointers to tensor bytes the Python layer keeps alive) to a queue
// bounded in bytes and returns at once unless the queue is full (then it waits with the GIL
// released). Worker threads run Writer::Encode (lay out, compress, checksum) with no GIL; one
// appender thread runs Writer::AppendEncoded in submission order. The Python layer holds the
// tensors of every sample until take_encoded() lists its sequence number: from then on the
// library no longer reads them. The first error of any thread is kept and raised by the next
// submit(), flush() or finish(); after it the pipeline takes nothing more.
//
// Thread-safety: one Python thread at a time (libshard.Writer is not thread-safe); the pipeline's
// own threads synchronise on one mutex.
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bindings.h"
#include "libshard/dataset.h"
#include "libshard/merge.h"
#include "libshard/writer.h"
#include "options.h"

namespace libshard::python {
namespace {

const OptionReader kOptions("Writer option");

class Pipeline {
 public:
  Pipeline(std::unique_ptr<Writer> writer, unsigned threads, uint64_t queue_bytes)
      : writer_(std::move(writer)), queue_bytes_(queue_bytes) {
    for (unsigned i = 0; i < threads; ++i) encoders_.emplace_back([this] { EncodeLoop(); });
    appender_ = std::thread([this] { AppendLoop(); });
  }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  // Stops without committing: samples not yet appended are dropped; what the journal holds stays
  // for Writer::Resume. Joins every thread, so no thread reads caller memory after this returns.
  ~Pipeline() { Stop(); }

  // Waits (GIL released by the caller) while the queue is over its byte budget; a sample larger
  // than the budget is admitted alone. Returns the error that stopped the pipeline, if any.
  Status Submit(SampleInput sample, uint64_t bytes) {
    std::unique_lock lock(mu_);
    const auto start = std::chrono::steady_clock::now();
    space_.wait(lock, [&] { return !error_.ok() || stopping_ || inflight_bytes_ == 0 ||
                                   inflight_bytes_ + bytes <= queue_bytes_; });
    blocked_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!error_.ok()) return error_;
    if (stopping_) return Status::Aborted("the writer is closed");
    inflight_bytes_ += bytes;
    jobs_.push_back(Job{next_seq_++, std::move(sample), bytes});
    work_.notify_one();
    return Status::OK();
  }

  // Sequence numbers whose input bytes the library no longer reads (encoded, or failed).
  std::vector<uint64_t> TakeEncoded() {
    std::lock_guard lock(mu_);
    std::vector<uint64_t> out;
    out.swap(encoded_);
    return out;
  }

  // Waits until every submitted sample is appended (or an error stopped the pipeline).
  Status Flush() {
    std::unique_lock lock(mu_);
    space_.wait(lock, [&] { return !error_.ok() || appended_ == next_seq_; });
    return error_;
  }

  // Flush, stop the threads, then Writer::Finish (the commit).
  Result<WriteSummary> Finish() {
    LIBSHARD_RETURN_IF_ERROR(Flush());
    Stop();
    return writer_->Finish();
  }

  void Stop() {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopping_ = true;
    }
    work_.notify_all();
    ready_.notify_all();
    space_.notify_all();
    for (std::thread& t : encoders_) t.join();
    appender_.join();
    std::lock_guard lock(mu_);
    stopped_ = true;
    jobs_.clear();
    results_.clear();
  }

  Status error() {
    std::lock_guard lock(mu_);
    return error_;
  }
  double blocked_seconds() {
    std::lock_guard lock(mu_);
    return blocked_seconds_;
  }
  uint64_t submitted() {
    std::lock_guard lock(mu_);
    return next_seq_;
  }
  uint64_t appended() {
    std::lock_guard lock(mu_);
    return appended_;
  }
  Writer& writer() { return *writer_; }

 private:
  struct Job {
    uint64_t seq;
    SampleInput sample;
    uint64_t bytes;
  };
  struct Done {
    Result<EncodedSample> encoded;
    uint64_t bytes;
  };

  void EncodeLoop() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mu_);
        work_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      Result<EncodedSample> encoded = writer_->Encode(job.sample);
      job.sample = SampleInput{};  // no pointer into caller memory survives past this point
      {
        std::lock_guard lock(mu_);
        encoded_.push_back(job.seq);
        results_.emplace(job.seq, Done{std::move(encoded), job.bytes});
      }
      ready_.notify_all();
    }
  }

  void AppendLoop() {
    for (;;) {
      Done done{Status::Internal("unset"), 0};
      {
        std::unique_lock lock(mu_);
        ready_.wait(lock, [&] { return stopping_ || results_.count(appended_) != 0; });
        if (stopping_) return;
        auto it = results_.find(appended_);
        done = std::move(it->second);
        results_.erase(it);
      }
      Status st = done.encoded.ok() ? writer_->AppendEncoded(std::move(done.encoded).value())
                                    : done.encoded.status();
      {
        std::lock_guard lock(mu_);
        inflight_bytes_ -= done.bytes;
        if (!st.ok() && error_.ok()) error_ = st;
        ++appended_;
      }
      space_.notify_all();
      if (!st.ok()) return;  // the writer refuses more after a failed append; stop here
    }
  }

  std::unique_ptr<Writer> writer_;
  const uint64_t queue_bytes_;
  std::mutex mu_;
  std::condition_variable work_;   // jobs_ gained a job, or stopping_
  std::condition_variable ready_;  // results_ gained a result, or stopping_
  std::condition_variable space_;  // a sample was appended (budget freed), an error, or stopping_
  std::deque<Job> jobs_;
  std::map<uint64_t, Done> results_;
  std::vector<uint64_t> encoded_;
  uint64_t next_seq_ = 0;
  uint64_t appended_ = 0;
  uint64_t inflight_bytes_ = 0;
  double blocked_seconds_ = 0;
  Status error_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::vector<std::thread> encoders_;
  std::thread appender_;
};

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

struct PipelineOptions {
  WriterOptions writer;
  unsigned threads = 2;
  uint64_t queue_bytes = uint64_t{1} << 30;
};

PipelineOptions OptionsFromPython(const py::dict& d) {
  PipelineOptions o;
  for (const auto& [k, v] : d) {
    const std::string key = py::str(k);
    if (key == "shard_size") o.writer.shard_size = kOptions.Unsigned(key, v);
    else if (key == "compress") {
      // The user's spec, parsed by the library's one parser (ParseCompression).
      if (v.is_none()) continue;
      Result<CompressionSpec> spec = ParseCompression(kOptions.Get<std::string>(key, v));
      if (!spec.ok()) kOptions.Bad(key, spec.status().message());
      o.writer.compression = spec->compression;
      o.writer.zstd_level = spec->level;
      o.writer.field_codecs = spec->field_codecs;
    } else if (key == "compression") {
      const std::string c = kOptions.Get<std::string>(key, v);
      if (c == "none") o.writer.compression = Compression::kNone;
      else if (c == "zstd") o.writer.compression = Compression::kZstd;
      else if (c == "auto") o.writer.field_codecs = FieldCodecPolicy::kAuto;
      else if (c == "planes") o.writer.field_codecs = FieldCodecPolicy::kPlanes;
      else kOptions.Bad(key, "must be 'none', 'auto', 'planes' or 'zstd', got '" + c + "'");
    } else if (key == "zstd_level") o.writer.zstd_level = kOptions.Get<int>(key, v);
    else if (key == "fsync") o.writer.fsync = kOptions.Get<bool>(key, v);
    else if (key == "created_by") o.writer.created_by = kOptions.Get<std::string>(key, v);
    else if (key == "source_root") o.writer.source_root = kOptions.Get<std::string>(key, v);
    else if (key == "journal_every_bytes") {
      o.writer.journal_every_bytes = kOptions.Unsigned(key, v);
      if (o.writer.journal_every_bytes == 0) kOptions.Bad(key, "must be > 0");
    } else if (key == "threads") {
      const uint64_t t = kOptions.Unsigned(key, v);
      if (t == 0 || t > 256) kOptions.Bad(key, "must be in 1..256");
      o.threads = static_cast<unsigned>(t);
    } else if (key == "queue_bytes") {
      o.queue_bytes = kOptions.Unsigned(key, v);
      if (o.queue_bytes == 0) kOptions.Bad(key, "must be > 0");
    } else if (key == "attributes") {
      o.writer.attributes = AttributesFromPython(v, "Writer option 'attrs'");
    } else kOptions.Bad(key, "is not a known option");
  }
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

// What libshard.Writer holds: the pipeline, created on open or (schema from the first sample)
// on the first submit.
class PyWriter {
 public:
  explicit PyWriter(std::unique_ptr<Pipeline> pipeline) : pipeline_(std::move(pipeline)) {}

  // tensors: [(name, dtype_name, shape, data_address, nbytes)]; the bytes must stay valid until
  // take_encoded() lists the returned sequence number.
  uint64_t Submit(const std::string& key, const py::list& tensors, const py::dict& metadata) {
    Pipeline& p = Get();
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
    const uint64_t seq = p.submitted();
    Status st;
    {
      py::gil_scoped_release release;
      st = p.Submit(std::move(in), bytes);
    }
    ThrowIfError(st);
    return seq;
  }

  std::vector<uint64_t> TakeEncoded() { return Get().TakeEncoded(); }

  void Flush() {
    Pipeline& p = Get();
    Status st;
    {
      py::gil_scoped_release release;
      st = p.Flush();
    }
    ThrowIfError(st);
  }

  py::dict Finish() {
    Pipeline& p = Get();
    Result<WriteSummary> summary = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      summary = p.Finish();
    }
    const WriteSummary s = ValueOrThrow(std::move(summary));
    py::dict out;
    out["samples"] = s.samples;
    out["shards"] = s.shards;
    out["raw_bytes"] = s.raw_bytes;
    out["stored_bytes"] = s.stored_bytes;
    out["blocked_seconds"] = p.blocked_seconds();
    pipeline_.reset();
    return out;
  }

  // Stops without committing (see ~Pipeline). Idempotent.
  void Abort() {
    std::unique_ptr<Pipeline> p = std::move(pipeline_);
    if (p) {
      py::gil_scoped_release release;
      p.reset();
    }
  }

  py::list ExistingKeys() {
    py::list out;
    for (const Provenance& p : Get().writer().existing_sources())
      out.append(DecodeDatasetString(p.path));
    return out;
  }
  py::dict Schema() { return SchemaToPython(Get().writer().schema()); }
  double BlockedSeconds() { return Get().blocked_seconds(); }
  uint64_t Appended() { return Get().appended(); }

 private:
  Pipeline& Get() {
    if (!pipeline_) ThrowStatus(Status::InvalidArgument("the writer is closed"));
    return *pipeline_;
  }
  std::unique_ptr<Pipeline> pipeline_;
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
            PipelineOptions o = OptionsFromPython(options);
            Result<std::unique_ptr<Writer>> w = Status::Internal("unset");
            if (resume) {
              py::gil_scoped_release release;
              w = Writer::Resume(dir, o.writer);
            } else {
              const libshard::Schema s = SchemaFromPython(schema.cast<py::dict>());
              py::gil_scoped_release release;
              w = Writer::Create(dir, s, o.writer);
            }
            return std::make_unique<PyWriter>(std::make_unique<Pipeline>(
                ValueOrThrow(std::move(w)), o.threads, o.queue_bytes));
          },
          py::arg("dir"), py::arg("schema"), py::arg("options"), py::arg("resume"),
          "Writer::Create (resume=False, with the schema dict) or Writer::Resume.")
      .def("submit", &PyWriter::Submit, py::arg("key"), py::arg("tensors"), py::arg("metadata"))
      .def("take_encoded", &PyWriter::TakeEncoded)
      .def("flush", &PyWriter::Flush)
      .def("finish", &PyWriter::Finish)
      .def("abort", &PyWriter::Abort)
      .def("existing_keys", &PyWriter::ExistingKeys)
      .def_property_readonly("schema", &PyWriter::Schema)
      .def_property_readonly("blocked_seconds", &PyWriter::BlockedSeconds)
      .def_property_readonly("appended", &PyWriter::Appended);

  m.def(
      "merge",
      [](const std::string& out, const std::vector<std::string>& parts, bool by_key, bool link) {
        MergeOptions o;
        o.link = link;
        o.by_key = by_key;
        Status st;
        {
          py::gil_scoped_release release;
          st = MergeDatasets(out, parts, o);
        }
        ThrowIfError(st);
      },
      py::arg("out"), py::arg("parts"), py::arg("by_key") = false, py::arg("link") = true,
      "MergeDatasets (libshard/merge.h).");

  m.def("dataset_attributes", [](const std::shared_ptr<Dataset>& ds) {
    return AttributesToPython(ds->provenance().attributes);
  });
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
