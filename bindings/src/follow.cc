// libshard._core.Follower: a dataset followed while it is being written (libshard/follow.h),
// for the Python layer's `libshard.open(path, follow=True)` (libshard/_dataset.py). Polls and
// snapshots release the GIL; a snapshot is a libshard._core.Dataset.
#include "libshard/follow.h"

#include "libshard/dataset.h"
#include "libshard/option_table.h"

#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <string>

#include "bindings.h"
#include "options.h"

namespace libshard::python {
namespace {

// One thread at a time polls the follower (libshard/follow.h); Python threads are serialised.
class PyFollower {
 public:
  PyFollower(const std::string& path, bool verify_checksums, const std::string& cache_dir,
             uint64_t cache_size) {
    DatasetOptions options;
    options.caller = Caller::kPython;
    options.verify_checksums = verify_checksums;
    options.cache_dir = cache_dir;
    options.cache_size = cache_size;
    Result<std::unique_ptr<DatasetFollower>> opened = [&] {
      py::gil_scoped_release release;
      return DatasetFollower::Open(path, options);
    }();
    follower_ = ValueOrThrow(std::move(opened));
  }

  void Poll() {
    Status st;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      st = follower_->Poll();
    }
    ThrowIfError(st);
  }

  py::dict Progress() {
    FollowProgress p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      p = follower_->progress();
    }
    py::dict out;
    out["samples"] = p.samples;
    out["complete"] = p.complete;
    out["writers"] = p.writers;
    out["waiting_for"] = DecodeDatasetString(p.waiting_for);
    return out;
  }

  std::shared_ptr<Dataset> Snapshot() {
    Result<std::shared_ptr<Dataset>> snapshot = [&] {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      return follower_->Snapshot();
    }();
    return ValueOrThrow(std::move(snapshot));
  }

 private:
  std::mutex mu_;
  std::unique_ptr<DatasetFollower> follower_;
};

}  // namespace

void RegisterFollow(py::module_& m) {
  // The cache settings of a followed dataset, read by DatasetOptionTable as libshard.open reads
  // them (cache_size None or 0: no bound), so follow mode takes the same values and gives the
  // same errors.
  m.def(
      "dataset_settings",
      [](const py::dict& settings) {
        const OptionTable<DatasetOptions>& table = DatasetOptionTable();
        DatasetOptions options;
        for (const auto& [k, v] : settings) {
          const std::string key = py::str(k);
          ThrowIfError(table.Set(options, key, ToOptionValue(table.what(), key, v)));
        }
        return py::make_tuple(options.cache_dir, options.cache_size);
      },
      py::arg("settings"),
      "(cache_dir, cache_size) from DatasetOptionTable's keys (cache, cache_size), as "
      "Dataset.open reads them.");
  py::class_<PyFollower>(m, "Follower",
                         "A dataset followed while it is being written; see "
                         "libshard.open(path, follow=True).")
      .def(py::init<const std::string&, bool, const std::string&, uint64_t>(), py::arg("path"),
           py::arg("verify_checksums") = true, py::arg("cache_dir") = "",
           py::arg("cache_size") = 0)
      .def("poll", &PyFollower::Poll,
           "Looks for what the writers committed since the last call (GIL released).")
      .def("progress", &PyFollower::Progress,
           "{'samples', 'complete', 'writers', 'waiting_for'}")
      .def("snapshot", &PyFollower::Snapshot,
           "The samples known now as a Dataset (index = arrival order); NotFoundError before "
           "the writer wrote its schema.");
}

}  // namespace libshard::python
