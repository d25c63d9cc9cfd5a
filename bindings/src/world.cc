// libshard._core.resolve_world: the library's rank resolver (libshard/world.h) for the Python
// Loader and Writer, which add only the torch.distributed case (passed as explicit values).
#include "libshard/world.h"

#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "bindings.h"

namespace libshard::python {
namespace {

std::optional<uint64_t> Count(const char* name, const py::object& v) {
  if (v.is_none()) return std::nullopt;
  if (py::isinstance<py::bool_>(v) || !py::isinstance<py::int_>(v))
    ThrowStatus(Status::InvalidArgument(std::string(name) + " must be an integer or None, got " +
                                        std::string(py::repr(v))));
  if (v.cast<py::int_>() < py::int_(0))
    ThrowStatus(Status::InvalidArgument(std::string("need 0 <= rank < world_size, got ") +
                                        name + "=" + std::string(py::str(v))));
  try {
    return v.cast<uint64_t>();
  } catch (const py::cast_error&) {
    ThrowStatus(Status::InvalidArgument(std::string(name) + " is too large"));
  }
}

}  // namespace

void RegisterWorld(py::module_& m) {
  m.def(
      "resolve_world",
      [](const py::object& rank, const py::object& world_size, const std::string& source,
         const std::optional<std::map<std::string, std::string>>& environment) {
        WorldRequest request;
        request.rank = Count("rank", rank);
        request.world_size = Count("world_size", world_size);
        request.source = source;
        const Environment env =
            environment ? MapEnvironment(*environment) : ProcessEnvironment();
        Result<World> world = [&] {
          py::gil_scoped_release release;
          return ResolveWorld(request, env);
        }();
        const World w = ValueOrThrow(std::move(world));
        py::dict out;
        out["rank"] = w.rank;
        out["world_size"] = w.world_size;
        out["local_rank"] = w.local_rank ? py::object(py::int_(*w.local_rank)) : py::none();
        out["source"] = w.source;
        return out;
      },
      py::arg("rank") = py::none(), py::arg("world_size") = py::none(),
      py::arg("source") = "arguments", py::arg("environment") = py::none(),
      "The rank and world size (libshard/world.h ResolveWorld): the explicit values (from "
      "`source`), else torchrun's RANK/WORLD_SIZE, a Slurm array, Slurm's SLURM_PROCID/"
      "SLURM_NTASKS, else 0 of 1. `environment` (a dict) replaces os.environ, for tests. "
      "Returns {rank, world_size, local_rank, source}.");
}

}  // namespace libshard::python
