// A restricted interpreter for the data.pkl of a torch.save archive. It understands only what
// torch.save emits for dicts/lists/tuples of tensors and plain values, and builds descriptions,
// never objects: no code from the file runs.
//
// Opcodes (pickle protocols 2..5): PROTO FRAME STOP MARK EMPTY_DICT EMPTY_LIST EMPTY_TUPLE TUPLE
// TUPLE1 TUPLE2 TUPLE3 APPEND APPENDS SETITEM SETITEMS BININT BININT1 BININT2 LONG1 LONG4 NONE
// NEWTRUE NEWFALSE BINFLOAT BINUNICODE SHORT_BINUNICODE BINUNICODE8 SHORT_BINSTRING BINSTRING
// GLOBAL STACK_GLOBAL BINPUT LONG_BINPUT MEMOIZE BINGET LONG_BINGET BINPERSID REDUCE.
// Globals: torch._utils._rebuild_tensor_v2 / _rebuild_tensor_v3 / _rebuild_parameter (callable),
// collections.OrderedDict (callable, no arguments), torch.<X>Storage for the typed storages of
// supported dtypes, torch.storage.UntypedStorage (and torch.UntypedStorage), torch.<dtype>.
// Everything else (any other GLOBAL, BUILD, NEWOBJ, INST, OBJ, a REDUCE on a non-callable,
// persistent ids other than ("storage", type, key, location, numel)) is refused.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "libshard/dtype.h"
#include "libshard/sample.h"
#include "libshard/status.h"

namespace libshard::convert {

// One tensor view over a storage record `data/<storage_key>`.
struct PickledTensor {
  std::string name;  // flattened: "a.b", "hidden_states.0"
  std::string storage_key;
  DType dtype = DType::kUInt8;
  // Bytes of the whole storage as its persistent id declares them (numel * element size of the
  // storage type; UntypedStorage counts bytes). Checked against the record size by the caller.
  uint64_t storage_nbytes = 0;
  uint64_t storage_offset = 0;  // in elements of dtype
  Shape shape;
  std::vector<uint64_t> strides;  // in elements; never negative
  uint64_t pickle_offset = 0;     // byte offset in data.pkl of the REDUCE that built it
};

struct PickledObject {
  std::vector<PickledTensor> tensors;  // in pickle (dict insertion) order
  Metadata metadata;
};

// Interprets `pickle`. `file` is used in messages ("<file>: data.pkl byte N: ..."). The root must
// be a dict (or OrderedDict), list or tuple. Validates view geometry (rank, sizes, strides and
// offsets; that offset + extent of every non-empty view fits in storage_nbytes) so callers only
// need to compare storage_nbytes with the record size.
Result<PickledObject> UnpickleTorch(std::span<const std::byte> pickle, const std::string& file);

}  // namespace libshard::convert
