// libshard._core.ReadAhead: a Dataset's samples by index, read ahead in an announced order
// (libshard/read_ahead.h), for libshard.Dataset.prefetch.
//
// Options arrive as a dict keyed by the read-ahead option table's names (ReadAheadOptionTable,
// the loader's I/O and memory rows); unknown keys and the loader's other options raise
// InvalidArgumentError naming them. get() and announce() run with the GIL released.
//
// Fork: the engine's threads do not exist in a child process. An object inherited through
// fork() is never destroyed there (its destructor would join threads that are not there): it
// is leaked on purpose, and the Python layer makes a new one in the child.
#include "libshard/read_ahead.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "options.h"

namespace libshard::python {
namespace {

LoaderOptions ReadAheadOptionsFromPython(const py::dict& d) {
  const OptionTable<LoaderOptions>& table = ReadAheadOptionTable();
  LoaderOptions o = DefaultReadAheadOptions();
  for (const auto& [k, v] : d) {
    const std::string key = py::str(k);
    ThrowIfError(table.Set(o, key, ToOptionValue(table.what(), key, v)));
  }
  return o;
}

py::dict StatsToPython(const ReadAheadStats& s) {
  py::dict out;
  out["announced"] = s.announced;
  out["hits"] = s.hits;
  out["waits"] = s.waits;
  out["misses"] = s.misses;
  out["skipped"] = s.skipped;
  out["evicted"] = s.evicted;
  out["held"] = s.held;
  out["bytes_read"] = s.bytes_read;
  out["bytes_served"] = s.bytes_served;
  out["checksum_failures"] = s.checksum_failures;
  out["wait_seconds"] = s.wait_seconds;
  out["engine"] = s.engine;
  out["direct_io"] = s.direct_io;
  out["io_status"] = s.io_status;
  out["pinned"] = s.pinned;
  out["arena_budget"] = s.arena_budget;
  out["arena_in_use"] = s.arena_in_use;
  out["arena_peak"] = s.arena_peak;
  return out;
}

class PyReadAhead {
 public:
  PyReadAhead(std::shared_ptr<Dataset> dataset, const py::dict& options) : pid_(::getpid()) {
    const LoaderOptions o = ReadAheadOptionsFromPython(options);
    Result<std::unique_ptr<ReadAhead>> created = [&] {
      py::gil_scoped_release release;
      return ReadAhead::Create(std::move(dataset), o);
    }();
    ra_ = std::shared_ptr<ReadAhead>(ValueOrThrow(std::move(created)));
  }
  PyReadAhead(const PyReadAhead&) = delete;
  PyReadAhead& operator=(const PyReadAhead&) = delete;
  ~PyReadAhead() {
    if (::getpid() != pid_) {
      // Inherited through fork(): leak it (see the file comment).
      new std::shared_ptr<ReadAhead>(std::move(ra_));  // NOLINT: intentional leak
      return;
    }
    py::gil_scoped_release release;
    ra_.reset();
  }

  void Announce(const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& indices) {
    std::shared_ptr<ReadAhead> ra = Get();
    if (indices.ndim() != 1)
      ThrowStatus(Status::InvalidArgument("read-ahead: the indices must be a 1-D sequence"));
    const int64_t* p = indices.data();
    std::vector<uint64_t> values(static_cast<size_t>(indices.shape(0)));
    for (size_t i = 0; i < values.size(); ++i) {
      if (p[i] < 0)
        ThrowStatus(Status::InvalidArgument(
            "read-ahead: announced index " + std::to_string(p[i]) + " (entry " +
            std::to_string(i) + ") is negative; announce dataset indices (0..len - 1)"));
      values[i] = static_cast<uint64_t>(p[i]);
    }
    Status status = [&] {
      py::gil_scoped_release release;
      return ra->Announce(values);
    }();
    ThrowIfError(status);
  }

  py::tuple GetSample(uint64_t index) {
    std::shared_ptr<ReadAhead> ra = Get();
    Result<Sample> sample = [&] {
      py::gil_scoped_release release;
      return ra->Get(index);
    }();
    return SampleToPython(ValueOrThrow(std::move(sample)));
  }

  py::dict Stats() { return StatsToPython(Get()->stats()); }

  void Close() {
    std::shared_ptr<ReadAhead> ra;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ra = std::move(ra_);
    }
    if (ra == nullptr) return;
    ra->Stop();
    py::gil_scoped_release release;
    ra.reset();
  }

  bool forked() const { return ::getpid() != pid_; }

 private:
  std::shared_ptr<ReadAhead> Get() {
    if (forked())
      ThrowStatus(Status::InvalidArgument(
          "read-ahead: this engine was made in another process (before a fork); make a new "
          "one in this process"));
    std::lock_guard<std::mutex> lock(mu_);
    if (ra_ == nullptr) ThrowStatus(Status::InvalidArgument("the read-ahead is closed"));
    return ra_;
  }

  const pid_t pid_;
  std::mutex mu_;  // guards ra_
  std::shared_ptr<ReadAhead> ra_;
};

}  // namespace

void RegisterReadAhead(py::module_& m) {
  m.def("read_ahead_option_table", [] { return OptionTableToPython(ReadAheadOptionTable()); },
        "The read-ahead's option table (libshard/read_ahead.h ReadAheadOptionTable).");
  py::class_<PyReadAhead>(m, "ReadAhead",
                          "Samples by index, read ahead in an announced order; see "
                          "libshard.Dataset.prefetch.")
      .def(py::init<std::shared_ptr<Dataset>, const py::dict&>(), py::arg("dataset"),
           py::arg("options"))
      .def("announce", &PyReadAhead::Announce, py::arg("indices"),
           "Appends dataset indices (int64, 1-D) to the announced order.")
      .def("get", &PyReadAhead::GetSample, py::arg("index"),
           "Sample `index` as (index, fields, metadata) (see Dataset.read): from the read-ahead "
           "when announced, else read synchronously. Blocks with the GIL released.")
      .def("stats", &PyReadAhead::Stats)
      .def("close", &PyReadAhead::Close)
      .def_property_readonly("forked", &PyReadAhead::forked,
                             "Whether this object was made in another process (before fork).");
}

}  // namespace libshard::python
