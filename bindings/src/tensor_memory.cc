// TensorMemory: the bytes of one tensor of a Sample, exported through the Python buffer protocol.
//
// The Python layer turns it into a tensor with torch.frombuffer (no LibTorch in this extension).
// torch keeps a reference to the exporting object for as long as the tensor's storage lives, and
// the object holds the Sample's memory owner, so arena slots and Dataset::Read buffers outlive the
// Loader and Dataset that produced them.
//
// The buffer is exported writable. That is safe: every Sample gets memory of its own (a Read buffer
// or an arena slot that is not reused while any holder lives), so a write only changes this
// sample's tensors. A read-only export would make torch.frombuffer warn on every tensor.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <type_traits>
#include <variant>

#include "bindings.h"

namespace libshard::python {
namespace {

// Holds a sample's memory for a release hook (see SampleToPython in bindings.h).
class MemoryToken {
 public:
  explicit MemoryToken(std::shared_ptr<const void> owner) : owner_(std::move(owner)) {}

 private:
  std::shared_ptr<const void> owner_;
};

class TensorMemory {
 public:
  TensorMemory(std::shared_ptr<const void> owner, const std::byte* data, uint64_t nbytes,
               py::object release_hook)
      : owner_(std::move(owner)), data_(data), nbytes_(nbytes),
        release_hook_(std::move(release_hook)) {}
  TensorMemory(TensorMemory&&) noexcept = default;
  TensorMemory& operator=(TensorMemory&&) = delete;
  TensorMemory(const TensorMemory&) = delete;
  TensorMemory& operator=(const TensorMemory&) = delete;

  // Runs with the GIL held (pybind11 deallocates holders under it). A hook that fails is
  // reported as unraisable and the memory is released at once.
  ~TensorMemory() {
    if (owner_ == nullptr || !release_hook_ || release_hook_.is_none()) return;
    try {
      release_hook_(py::cast(MemoryToken(std::move(owner_))));
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("libshard: the release hook of a pinned sample");
    } catch (...) {
    }
  }

  py::buffer_info Buffer() const {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): see the file comment.
    void* ptr = const_cast<std::byte*>(data_);
    return py::buffer_info(ptr, /*itemsize=*/1, py::format_descriptor<uint8_t>::format(),
                           /*ndim=*/1, {static_cast<py::ssize_t>(nbytes_)}, {py::ssize_t{1}},
                           /*readonly=*/false);
  }
  uint64_t nbytes() const { return nbytes_; }
  uintptr_t address() const { return reinterpret_cast<uintptr_t>(data_); }

 private:
  std::shared_ptr<const void> owner_;
  const std::byte* data_;
  uint64_t nbytes_;
  py::object release_hook_;
};

}  // namespace

void RegisterTensorMemory(py::module_& m) {
  py::class_<MemoryToken>(m, "MemoryToken",
                          "Keeps a sample's memory (an arena slot) from reuse while referenced; "
                          "given to a release hook.");
  py::class_<TensorMemory>(m, "TensorMemory", py::buffer_protocol(),
                           "The bytes of one sample tensor (a 1-D uint8 buffer). Keeps the "
                           "sample's memory alive while referenced.")
      .def_buffer(&TensorMemory::Buffer)
      .def_property_readonly("nbytes", &TensorMemory::nbytes)
      .def_property_readonly("address", &TensorMemory::address)
      .def("__len__", &TensorMemory::nbytes);
}

py::str DecodeDatasetString(std::string_view bytes, bool pickled) {
  const auto size = static_cast<Py_ssize_t>(bytes.size());
  if (pickled) {
    if (PyObject* s = PyUnicode_DecodeUTF8(bytes.data(), size, "surrogatepass"))
      return py::reinterpret_steal<py::str>(s);
    PyErr_Clear();
  }
  PyObject* s = PyUnicode_DecodeUTF8(bytes.data(), size, "surrogateescape");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

py::object MetaValueToPython(const MetaValue& value) {
  return std::visit(
      [](const auto& v) -> py::object {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>) {
          return py::bool_(v);
        } else if constexpr (std::is_same_v<V, int64_t>) {
          return py::int_(v);
        } else if constexpr (std::is_same_v<V, double>) {
          return py::float_(v);
        } else {
          return DecodeDatasetString(v, /*pickled=*/true);
        }
      },
      value);
}

py::dict MetadataToPython(const Metadata& metadata) {
  py::dict out;
  for (const MetaEntry& entry : metadata) out[DecodeDatasetString(entry.key, /*pickled=*/true)] = MetaValueToPython(entry.value);
  return out;
}

py::tuple SampleToPython(const Sample& sample, const py::object& release_hook) {
  const std::vector<TensorView>& views = sample.tensors();
  py::list fields(views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    const TensorView& view = views[i];
    py::tuple shape(view.shape.size());
    for (size_t d = 0; d < view.shape.size(); ++d) shape[d] = py::int_(view.shape[d]);
    py::object memory = py::none();
    if (view.nbytes > 0) {
      memory = py::cast(
          TensorMemory(sample.memory_owner(), view.data, view.nbytes, release_hook));
    }
    fields[i] = py::make_tuple(DecodeDatasetString(view.name),
                               py::str(std::string(DTypeName(view.dtype))), std::move(shape),
                               std::move(memory));
  }
  return py::make_tuple(py::int_(sample.index()), std::move(fields),
                        MetadataToPython(sample.metadata()));
}

py::tuple CollatedToPython(const CollatedBatch& batch, const py::object& release_hook,
                           bool metadata) {
  py::list fields(batch.tensors.size());
  for (size_t i = 0; i < batch.tensors.size(); ++i) {
    const TensorView& view = batch.tensors[i];
    py::tuple shape(view.shape.size());
    for (size_t d = 0; d < view.shape.size(); ++d) shape[d] = py::int_(view.shape[d]);
    py::object memory = py::none();
    if (view.nbytes > 0)
      memory = py::cast(TensorMemory(batch.memory, view.data, view.nbytes, release_hook));
    fields[i] = py::make_tuple(DecodeDatasetString(view.name),
                               py::str(std::string(DTypeName(view.dtype))), std::move(shape),
                               std::move(memory));
  }
  // Metadata as pad_collate gives it: the first sample's keys, each with a list of every
  // sample's value (None where a sample lacks the key).
  py::dict meta;
  if (metadata && !batch.metadata.empty()) {
    for (const MetaEntry& entry : batch.metadata[0]) {
      py::list values(batch.metadata.size());
      for (size_t s = 0; s < batch.metadata.size(); ++s) {
        py::object value = py::none();
        for (const MetaEntry& e : batch.metadata[s]) {
          if (e.key == entry.key) {
            value = MetaValueToPython(e.value);
            break;
          }
        }
        values[s] = std::move(value);
      }
      meta[DecodeDatasetString(entry.key, /*pickled=*/true)] = std::move(values);
    }
  }
  return py::make_tuple(std::move(fields), py::cast(batch.indices), std::move(meta),
                        py::cast(batch.lengths), py::cast(batch.cu_seqlens),
                        py::int_(batch.max_seqlen));
}

}  // namespace libshard::python
