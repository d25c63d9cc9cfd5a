// Internal declarations shared by the translation units of the `libshard._core` extension.
//
// Conventions: every function that calls into the library and can block (file I/O, waiting for the
// loader) releases the GIL around that call and converts results to Python objects only after
// re-acquiring it. A non-OK Status becomes a Python exception through ThrowStatus().
#pragma once

#include <pybind11/pybind11.h>

#include <utility>

#include "libshard/attributes.h"
#include "libshard/loader.h"
#include "libshard/sample.h"
#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard::python {

namespace py = pybind11;

// Raises the Python exception for `status` (which must not be OK): the libshard.Error subclass of
// its code, which also derives from the matching built-in (see errors.cc for the table; IoError
// and NotFound are raised as cls(errno, message)). Never returns.
[[noreturn]] void ThrowStatus(const Status& status);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}

// A Python str of bytes read from a dataset (names, source paths, metadata keys and strings):
// FORMAT.md §1 makes them raw bytes, UTF-8 by convention only. Undecodable bytes become lone
// surrogates (PEP 383 "surrogateescape"), as Python does for file names, so nothing read from a
// dataset raises UnicodeDecodeError and os.fsencode() gives the original bytes back.
// `pickled`: the bytes came from a pickled str (metadata keys and values), which pickle writes
// with "surrogatepass"; those are decoded the same way first, so 'caf\udce9' comes back as saved.
py::str DecodeDatasetString(std::string_view bytes, bool pickled = false);

// Python value of a metadata entry, and a dict of all entries.
py::object MetaValueToPython(const MetaValue& value);
py::dict MetadataToPython(const Metadata& metadata);

// {"fields": [{"name", "dtype", "rank", "seq_dim"}, ...], "length_field": int} (Dataset.schema,
// Writer.schema).
py::dict SchemaToPython(const Schema& schema);

// A sample as plain Python data for the pure-Python layer, which makes the torch tensors:
//   (index, [(name, dtype_name, shape_tuple, memory_or_None), ...], metadata_dict)
// `memory` is a `_core.TensorMemory` exporting the tensor's bytes as a 1-D uint8 buffer; it holds
// the Sample's memory owner, so the bytes stay valid while any tensor made from it lives. Zero-size
// tensors get None (torch.frombuffer refuses empty buffers).
//
// `release_hook` (None, or a callable) is called, instead of releasing the memory, when the last
// reference to one of the sample's TensorMemory objects goes: with a `_core.MemoryToken` that
// holds the memory until the hook drops it. The Loader sets it for a pinned arena, so that a
// caller's asynchronous copy to the GPU completes before the memory is reused (libshard._loader).
py::tuple SampleToPython(const Sample& sample, const py::object& release_hook = py::none());

// A batch the loader collated (LoaderOptions::collate) for the pure-Python layer:
//   ([(name, dtype_name, shape_tuple, memory_or_None), ...] one per field, [index, ...],
//    {metadata key: [value per sample]} (empty unless `metadata`), [length, ...],
//    [cu_seqlen, ...] (pack; else empty), max_seqlen)
// Each memory is a `_core.TensorMemory` over the batch's region, with `release_hook` as above.
py::tuple CollatedToPython(const CollatedBatch& batch, const py::object& release_hook,
                           bool metadata);

// Dataset attributes (libshard/attributes.h) from a dict of str -> str|int (InvalidArgumentError
// naming `what` otherwise), and back.
Attributes AttributesFromPython(const py::handle& value, const std::string& what);
py::dict AttributesToPython(const Attributes& attributes);

void RegisterErrors(py::module_& m);
void RegisterTensorMemory(py::module_& m);
void RegisterDataset(py::module_& m);
void RegisterLoader(py::module_& m);
void RegisterReadAhead(py::module_& m);  // read_ahead.cc: Dataset.prefetch's engine
void RegisterFollow(py::module_& m);
void RegisterPack(py::module_& m);
void RegisterWriter(py::module_& m);
void RegisterWorld(py::module_& m);  // world.cc: resolve_world
void RegisterSequenceParallel(py::module_& m);  // sequence_parallel.cc: the SP split rules
// A sequence-parallel loader's sample's slice (Sample::sequence_slice) as the dict Python
// samples carry under "__sp__": sequence_parallel_slice's keys plus sp_size, sp_rank and length.
py::dict SequenceSliceToPython(const Sample& sample);
void RegisterCli(py::module_& m);  // cli.cc: cli_main, the `libshard` command line

}  // namespace libshard::python
