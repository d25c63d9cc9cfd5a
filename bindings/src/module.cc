// The `libshard._core` extension module. The public Python API lives in libshard/__init__.py.
#include <pybind11/pybind11.h>

#include "bindings.h"

PYBIND11_MODULE(_core, m) {
  namespace lp = libshard::python;
  m.doc() = "libshard C++ core (internal; use the `libshard` package).";
  lp::RegisterErrors(m);
  lp::RegisterTensorMemory(m);
  lp::RegisterDataset(m);
  lp::RegisterLoader(m);
  lp::RegisterPack(m);
}
