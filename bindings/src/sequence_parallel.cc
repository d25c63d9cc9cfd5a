// libshard._core.sequence_parallel_*: the library's split rules (libshard/sequence_parallel.h)
// for Python, which decides none of them: the loader's sequence_parallel option and the tests
// that compare each rule with its trainer's own slicing (tests/python/test_sp_rules.py).
#include "libshard/sequence_parallel.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"

namespace libshard::python {
namespace {

// A non-negative Python int no larger than `max`, or InvalidArgumentError naming it.
uint64_t Count(const char* name, const py::handle& v, uint64_t max) {
  if (py::isinstance<py::bool_>(v) || !py::isinstance<py::int_>(v))
    ThrowStatus(Status::InvalidArgument(std::string(name) + " must be an integer, got " +
                                        std::string(py::repr(v))));
  const py::int_ i = py::reinterpret_borrow<py::int_>(v);
  if (i < py::int_(0) || i > py::int_(max))
    ThrowStatus(Status::InvalidArgument(std::string(name) + " = " + std::string(py::str(v)) +
                                        " is out of range; use 0.." + std::to_string(max)));
  return i.cast<uint64_t>();
}

py::dict InfoToPython(const SplitRuleInfo& info) {
  py::dict d;
  d["name"] = std::string(info.name);
  py::list aliases;
  for (std::string_view a : info.aliases) aliases.append(std::string(a));
  d["aliases"] = aliases;
  d["trainer"] = std::string(info.trainer);
  d["source"] = std::string(info.source);
  d["takes_ttt"] = info.takes_ttt;
  d["needs_multiple"] = info.needs_multiple;
  d["packed"] = info.packed;
  d["attention_mask"] = info.attention_mask;
  d["zero_last_loss"] = info.zero_last_loss;
  return d;
}

py::dict SliceDict(SplitRule rule, const SequenceSlice& s) {
  py::dict d;
  d["rule"] = std::string(SplitRuleName(rule));
  d["full_length"] = s.full_length;
  d["chunk"] = s.chunk;
  d["start"] = s.start;
  d["stop"] = s.stop;
  d["pad_to"] = s.pad_to;
  d["offset"] = s.offset;
  d["position_begin"] = s.position_begin;
  d["position_count"] = s.position_count;
  d["position_pad_to"] = s.position_pad_to;
  d["batch_pad_to"] = s.batch_pad_to;
  return d;
}

}  // namespace

py::dict SequenceSliceToPython(const Sample& sample) {
  const Sample::SequenceParallelSlice& sp = sample.sequence_slice();
  py::dict d = SliceDict(sp.rule, sp.slice);
  d["sp_size"] = sp.sp_size;
  d["sp_rank"] = sp.sp_rank;
  d["length"] = sample.length();
  return d;
}

void RegisterSequenceParallel(py::module_& m) {
  m.def(
      "sequence_parallel_rules",
      [] {
        py::list out;
        for (const SplitRuleInfo& info : SplitRules()) out.append(InfoToPython(info));
        return out;
      },
      "The split rules of sequence parallelism (libshard/sequence_parallel.h), in table order: "
      "[{name, aliases, trainer, source, takes_ttt, needs_multiple, packed, attention_mask, "
      "zero_last_loss}, ...].");
  m.def(
      "sequence_parallel_slice",
      [](const std::string& rule, const py::object& length, const py::object& sp_size,
         const py::object& sp_rank, const py::object& ttt_length,
         const py::object& ulysses_size, const py::object& max_len) {
        const SplitRule r = ValueOrThrow(ParseSplitRule(rule));
        SplitRequest q;
        q.length = Count("length", length, UINT64_MAX);
        q.sp_size = static_cast<uint32_t>(Count("sp_size", sp_size, UINT32_MAX));
        q.sp_rank = static_cast<uint32_t>(Count("sp_rank", sp_rank, UINT32_MAX));
        q.ttt_length = static_cast<uint32_t>(Count("ttt_length", ttt_length, UINT32_MAX));
        q.ulysses_size = static_cast<uint32_t>(Count("ulysses_size", ulysses_size, UINT32_MAX));
        q.max_len = Count("max_len", max_len, UINT64_MAX);
        return SliceDict(r, ValueOrThrow(SliceOf(r, q)));
      },
      py::arg("rule"), py::arg("length"), py::arg("sp_size"), py::arg("sp_rank"),
      py::arg("ttt_length") = 0, py::arg("ulysses_size") = 0, py::arg("max_len") = 0,
      "The rows rank `sp_rank` of an SP group of `sp_size` gets of a sample of `length` rows "
      "under `rule` (a name or alias; libshard/sequence_parallel.h SliceOf): {rule, full_length, "
      "chunk, start, stop, pad_to, offset, position_begin, position_count, position_pad_to, "
      "batch_pad_to}. InvalidArgumentError for what the rule refuses.");
  m.def(
      "sequence_parallel_packed_parts",
      [](const std::vector<py::object>& lengths, const py::object& start,
         const py::object& stop) {
        std::vector<uint64_t> n;
        n.reserve(lengths.size());
        for (const py::object& v : lengths) n.push_back(Count("a length", v, UINT64_MAX));
        const std::vector<PackedPart> parts = ValueOrThrow(
            PackedParts(n, Count("start", start, UINT64_MAX), Count("stop", stop, UINT64_MAX)));
        py::list out;
        for (const PackedPart& p : parts)
          out.append(py::make_tuple(p.sample, p.begin, p.end, p.at));
        return out;
      },
      py::arg("lengths"), py::arg("start"), py::arg("stop"),
      "Which rows of which sample of a packed row fall in the rows [start, stop) "
      "(libshard/sequence_parallel.h PackedParts): [(sample, begin, end, at), ...].");
}

}  // namespace libshard::python
