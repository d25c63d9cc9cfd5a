// The `libshard._core` extension module. The public Python API lives in libshard/__init__.py.
#include <pybind11/pybind11.h>

#include <string>

#include "bindings.h"
#include "libshard_support/units.h"
#include "libshard/version.h"

PYBIND11_MODULE(_core, m) {
  namespace lp = libshard::python;
  m.doc() = "libshard C++ core (internal; use the `libshard` package).";
  m.attr("__version__") = LIBSHARD_VERSION_STRING;
  lp::RegisterErrors(m);
  lp::RegisterTensorMemory(m);
  lp::RegisterDataset(m);
  lp::RegisterLoader(m);
  lp::RegisterReadAhead(m);
  lp::RegisterFollow(m);
  lp::RegisterPack(m);
  lp::RegisterWriter(m);
  lp::RegisterWorld(m);
  lp::RegisterSequenceParallel(m);
  lp::RegisterCli(m);
  // The one byte-size parser (libshard_support/units.h), for libshard._units.
  m.def(
      "parse_byte_size",
      [](const std::string& text) -> uint64_t {
        libshard::Result<uint64_t> size = libshard::ParseByteSize(text);
        if (!size.ok()) lp::ThrowStatus(size.status());
        return *size;
      },
      pybind11::arg("text"),
      "Bytes from a size such as '4096', '512M', '4GiB', '4Gi' or '64MB' (K/M/G/T and their "
      "i/iB forms are powers of 1024, KB/MB/GB/TB powers of 1000); InvalidArgumentError "
      "otherwise.");
}
