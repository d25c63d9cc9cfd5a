// libshard._core.Loader: the streaming loader (libshard/loader.h) for the Python layer.
//
// Options arrive as a dict keyed by the loader option table's names (LoaderOptionTable; "order"
// may be the option group as a dict, "resume" is a state's encoding); unknown keys and wrong
// values raise ValueError naming the key as given, in the library's words. The state crosses as
// the library encodes it (EncodeLoaderState), untouched. next() blocks with the GIL
// released. Consumer calls (next, set_epoch, state) are serialised by a mutex so that misuse from
// several Python threads cannot race inside the library; stats() and stop() may run concurrently.
#include "libshard/loader.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "options.h"

namespace libshard::python {
namespace {

const OptionReader kOptions("Loader option");

// Every key is read through the library's option table (LoaderOptionsFrom): its names,
// spellings, types, bounds and errors. "order" may be a dict, the option group (libshard.Order);
// "resume" is a state's encoding (text), which the library decodes.
LoaderOptions OptionsFromPython(const py::dict& d) {
  const OptionTable<LoaderOptions>& table = LoaderOptionTable();
  std::vector<OptionEntry> given;
  for (const auto& [k, v] : d) {
    const std::string key = py::str(k);
    const OptionSpec<LoaderOptions>* row = table.Find(key);
    if (row != nullptr && row->type == OptionType::kGroup && py::isinstance<py::dict>(v)) {
      std::vector<OptionEntry> entries;
      for (const auto& [gk, gv] : py::reinterpret_borrow<py::dict>(v)) {
        const std::string name = py::str(gk);
        entries.push_back({name, ToOptionValue(table.what(), key + "." + name, gv)});
      }
      given.push_back({key, OptionValue::Group(std::move(entries))});
      continue;
    }
    given.push_back({key, ToOptionValue(table.what(), key, v)});
  }
  return ValueOrThrow(LoaderOptionsFrom(given));
}

py::dict StatsToPython(const LoaderStats& s) {
  py::dict out;
  out["samples_delivered"] = s.samples_delivered;
  out["batches_delivered"] = s.batches_delivered;
  out["bytes_delivered"] = s.bytes_delivered;
  out["bytes_read"] = s.bytes_read;
  out["elapsed_seconds"] = s.elapsed_seconds;
  out["throughput_gbps"] = s.throughput_gbps;
  out["wait_seconds"] = s.wait_seconds;
  out["wait_share"] = s.wait_share;
  out["reads_in_flight"] = s.reads_in_flight;
  out["oldest_read_age_seconds"] = s.oldest_read_age_seconds;
  py::list inflight;
  for (const InflightRead& r : s.inflight) {
    py::dict d;
    d["file"] = DecodeDatasetString(r.file);
    d["offset"] = r.offset;
    d["length"] = r.length;
    d["sample"] = r.sample;
    d["age_seconds"] = r.age_seconds;
    inflight.append(std::move(d));
  }
  out["inflight"] = std::move(inflight);
  out["engine"] = s.engine;
  out["engine_status"] = s.engine_status;
  out["direct_io"] = s.direct_io;
  out["io_status"] = s.io_status;
  out["pinned"] = s.pinned;
  out["pin_status"] = s.pin_status;
  out["arena_budget"] = s.arena_budget;
  out["arena_in_use"] = s.arena_in_use;
  out["arena_peak"] = s.arena_peak;
  out["worker_backlog_peak"] = s.worker_backlog_peak;
  out["checksum_failures"] = s.checksum_failures;
  out["samples_skipped"] = s.samples_skipped;
  out["samples_repeated"] = s.samples_repeated;
  out["batch_positions"] = s.batch_positions;
  out["padding_positions"] = s.padding_positions;
  out["padding_share"] = s.padding_share;
  return out;
}

// Owns the library Loader. close() (or destruction) stops reads in flight and waits for them
// with the GIL released.
class PyLoader {
 public:
  PyLoader(std::shared_ptr<Dataset> dataset, const py::dict& options) {
    LoaderOptions o = OptionsFromPython(options);
    Result<std::unique_ptr<Loader>> created = [&] {
      py::gil_scoped_release release;
      return Loader::Create(std::move(dataset), o);
    }();
    loader_ = std::shared_ptr<Loader>(ValueOrThrow(std::move(created)));
  }
  // Follow mode (Loader::Follow): the dataset at `path` while it is being written.
  PyLoader(const std::string& path, const py::dict& options, const DatasetOptions& dataset) {
    LoaderOptions o = OptionsFromPython(options);
    Result<std::unique_ptr<Loader>> created = [&] {
      py::gil_scoped_release release;
      return Loader::Follow(path, o, dataset);
    }();
    loader_ = std::shared_ptr<Loader>(ValueOrThrow(std::move(created)));
  }
  PyLoader(const PyLoader&) = delete;
  PyLoader& operator=(const PyLoader&) = delete;
  ~PyLoader() {
    if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
      py::gil_scoped_release release;
      Close();
    } else {
      Close();
      // No interpreter to drop the hook's reference in (interpreter shutdown): leak it.
      release_hook_.release();
    }
  }

  py::object Next() {
    std::shared_ptr<Loader> loader = Get();
    Result<std::optional<Batch>> batch = [&] {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(consumer_mu_);
      return loader->Next();
    }();
    std::optional<Batch> value = ValueOrThrow(std::move(batch));
    if (!value.has_value()) return py::none();
    if (value->collated) {
      py::tuple out = CollatedToPython(*value->collated, release_hook_, metadata_);
      value.reset();  // only Python objects hold the region from here on
      return out;
    }
    py::list out(value->samples.size());
    for (size_t i = 0; i < value->samples.size(); ++i) {
      const Sample& sample = value->samples[i];
      py::tuple t = SampleToPython(sample, release_hook_);
      // Sequence parallelism: (index, fields, metadata, slice) (libshard/_tensors.py).
      if (sample.has_sequence_slice())
        t = py::make_tuple(t[0], t[1], t[2], SequenceSliceToPython(sample));
      out[i] = std::move(t);
    }
    // Drop the library's references before returning so memory is held only by Python objects.
    value.reset();
    return out;
  }

  void SetEpoch(uint64_t epoch) {
    std::shared_ptr<Loader> loader = Get();
    Status status = [&] {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(consumer_mu_);
      return loader->SetEpoch(epoch);
    }();
    ThrowIfError(status);
  }

  // CallerOrder: epoch `epoch` in the order of `samples` (int64, every step's indices one
  // after the other) cut at `bounds` (int64, steps + 1 offsets from 0).
  void SetEpochSteps(uint64_t epoch, const py::array_t<int64_t, py::array::c_style |
                                                                     py::array::forcecast>& samples,
                     const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& bounds) {
    std::shared_ptr<Loader> loader = Get();
    EpochSteps steps;
    steps.samples = Unsigned(samples, "sample index");
    steps.bounds = Unsigned(bounds, "step bound");
    Status status = [&] {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(consumer_mu_);
      return loader->SetEpochSteps(epoch, std::move(steps));
    }();
    ThrowIfError(status);
  }

  // The state's encoding (EncodeLoaderState), untouched; `next_epoch`: of the start of the epoch
  // after the state's (StartOfNextEpoch), for a stream whose epoch ended.
  std::string State(bool next_epoch) {
    std::shared_ptr<Loader> loader = Get();
    LoaderState state;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(consumer_mu_);
      state = loader->state();
    }
    return EncodeLoaderState(next_epoch ? StartOfNextEpoch(state) : state);
  }
  uint64_t Epoch() {
    std::shared_ptr<Loader> loader = Get();
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(consumer_mu_);
    return loader->state().epoch;
  }

  uint64_t BatchesPerEpoch() { return Get()->batches_per_epoch(); }
  bool BatchesPerEpochKnown() { return Get()->batches_per_epoch_known(); }
  py::dict Stats() { return StatsToPython(Get()->stats()); }

  // Stops, waits for reads in flight, and frees the arena once no sample holds it. Idempotent.
  // Call without the GIL.
  void Close() {
    std::shared_ptr<Loader> loader;
    {
      std::lock_guard<std::mutex> lock(ptr_mu_);
      loader = std::move(loader_);
    }
    if (!loader) return;
    loader->Stop();
    std::lock_guard<std::mutex> lock(consumer_mu_);  // a next() in flight returns Aborted first
    loader.reset();
  }

  // See SampleToPython (bindings.h): applies to samples handed out from now on.
  void SetReleaseHook(py::object hook) { release_hook_ = std::move(hook); }
  // Whether collated batches carry the samples' metadata (the Python Loader's `metadata`).
  void SetMetadata(bool metadata) { metadata_ = metadata; }

 private:
  std::shared_ptr<Loader> Peek() {
    std::lock_guard<std::mutex> lock(ptr_mu_);
    return loader_;
  }
  std::shared_ptr<Loader> Get() {
    std::shared_ptr<Loader> loader = Peek();
    if (!loader) ThrowStatus(Status::InvalidArgument("the Loader is closed"));
    return loader;
  }

  // The values of a 1-D int64 array, refused (InvalidArgumentError naming `what`) when one is
  // negative.
  static std::vector<uint64_t> Unsigned(
      const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& a, const char* what) {
    if (a.ndim() != 1) ThrowStatus(Status::InvalidArgument(std::string(what) + " array must be 1-D"));
    std::vector<uint64_t> out(static_cast<size_t>(a.shape(0)));
    const int64_t* p = a.data();
    for (size_t i = 0; i < out.size(); ++i) {
      if (p[i] < 0)
        ThrowStatus(Status::InvalidArgument(std::string(what) + " " + std::to_string(p[i]) +
                                            " (entry " + std::to_string(i) +
                                            ") is negative; indices start at 0"));
      out[i] = static_cast<uint64_t>(p[i]);
    }
    return out;
  }

  std::mutex ptr_mu_;       // guards loader_
  std::mutex consumer_mu_;  // serialises next/set_epoch/state
  std::shared_ptr<Loader> loader_;
  py::object release_hook_ = py::none();  // touched with the GIL held only
  bool metadata_ = true;                   // touched with the GIL held only
};

}  // namespace

void RegisterLoader(py::module_& m) {
  m.def("loader_option_table", [] { return OptionTableToPython(LoaderOptionTable()); },
        "The loader's option table (libshard/loader.h LoaderOptionTable): one dict per option "
        "with name, member, type, py_type, default, min, max, unset, choices, aliases, doc.");
  m.def(
      "resolve_loader_options",
      [](const py::dict& options) {
        Result<LoaderOptions> r = ResolveLoaderOptions(OptionsFromPython(options));
        const LoaderOptions o = ValueOrThrow(std::move(r));
        py::dict out;
        out["token_budget"] = o.token_budget == TokenBudget::kPadded ? "padded" : "sum";
        out["bucket_window"] = o.bucket_window;
        return out;
      },
      py::arg("options"),
      "What the library decides for the options' \"auto\" settings (token_budget, "
      "bucket_window), without a dataset.");
  m.def(
      "resolve_loader_order",
      [](const py::dict& options) {
        const LoaderOptions o = ValueOrThrow(ResolveLoaderOptions(OptionsFromPython(options)));
        return std::string(o.order.name());
      },
      py::arg("options"),
      "The kind of order the options spell (shuffled, unshuffled, node_local, caller or "
      "follow), after the library checked them, without a dataset.");
  m.def("order_option_table", [] { return OptionTableToPython(OrderOptionTable()); },
        "The settings of the loader option group \"order\" (libshard.Order's keywords).");
  py::class_<PyLoader>(m, "Loader", "The streaming loader; see libshard.Loader for the Python API.")
      .def(py::init<std::shared_ptr<Dataset>, const py::dict&>(), py::arg("dataset"),
           py::arg("options"))
      .def("next", &PyLoader::Next,
           "The next batch as a list of samples (see Dataset.read), or with a collate the "
           "collated batch (fields, indices, metadata, lengths, cu_seqlens, max_seqlen), or None "
           "at the end of the epoch. Blocks with the GIL released.")
      .def_static(
          "follow",
          [](const std::string& path, const py::dict& options, bool verify_checksums,
             const std::string& cache_dir, uint64_t cache_size) {
            DatasetOptions dataset;
            dataset.caller = Caller::kPython;
            dataset.verify_checksums = verify_checksums;
            dataset.cache_dir = cache_dir;
            dataset.cache_size = cache_size;
            return std::make_unique<PyLoader>(path, options, dataset);
          },
          py::arg("path"), py::arg("options"), py::arg("verify_checksums") = false,
          py::arg("cache_dir") = "", py::arg("cache_size") = 0,
          "Follow mode: a Loader of the dataset at `path` while it is being written.")
      .def("batches_per_epoch_known", &PyLoader::BatchesPerEpochKnown)
      .def("set_epoch", &PyLoader::SetEpoch, py::arg("epoch"))
      .def("set_epoch_steps", &PyLoader::SetEpochSteps, py::arg("epoch"), py::arg("samples"),
           py::arg("bounds"),
           "A caller's order (a sampler): starts epoch `epoch` with this rank's steps: step k is "
           "samples[bounds[k]:bounds[k+1]] (int64 arrays). Blocks with the GIL released.")
      .def("state", &PyLoader::State, py::arg("next_epoch") = false,
           "The state's encoding (JSON text, docs/ORDER.md §8); next_epoch: of the start of the "
           "next epoch.")
      .def("epoch", &PyLoader::Epoch, "The epoch of the state.")
      .def("batches_per_epoch", &PyLoader::BatchesPerEpoch)
      .def("stats", &PyLoader::Stats)
      .def("close", &PyLoader::Close, py::call_guard<py::gil_scoped_release>())
      .def("set_release_hook", &PyLoader::SetReleaseHook, py::arg("hook"),
           "hook(token) is called when the last tensor of a sample handed out later is freed, "
           "with a MemoryToken that keeps the sample's memory until the hook drops it (None: "
           "release at once).")
      .def("set_metadata", &PyLoader::SetMetadata, py::arg("metadata"),
           "Whether collated batches carry the samples' metadata (default True).");
}

}  // namespace libshard::python
