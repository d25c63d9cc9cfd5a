#include "readers/torch_pickle.h"

#include <bit>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "libshard/schema.h"
#include "libshard_support/text.h"

namespace libshard::convert {

namespace {

// Bounds that no torch.save output comes near; they keep hostile pickles cheap to refuse.
constexpr size_t kMaxObjects = size_t{1} << 22;
constexpr size_t kMaxMarkDepth = 4096;
constexpr size_t kMaxNesting = 64;             // container depth when flattening
constexpr size_t kMaxFlattenVisits = size_t{1} << 22;
constexpr size_t kMaxRankAccepted = 64;        // torch's own limit on dims
// Most arguments an allowed callable takes (_rebuild_tensor_v3 with its metadata dict: 8).
constexpr size_t kMaxReduceArgs = 8;

// What flattening may materialise is bounded by what one sample of a dataset can hold (FORMAT.md
// §5), not by the object graph: through the memo a 3 MB pickle can name one 1 MiB string a
// million times, which flattened naively is a terabyte of metadata. The budget counts the bytes
// of every metadata key and value (strings by length, numbers as 8) and refuses as soon as it is
// passed, before the copy is made.
constexpr uint64_t kMaxFlattenMetadataBytes = kMaxMetadataBytes;
constexpr size_t kMaxFlattenTensors = kMaxFields;

enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kStr, kTuple, kList, kDict, kGlobal,
                            kStorage, kTensor };
enum class Global : uint8_t { kRebuildV2, kRebuildV3, kRebuildParameter, kOrderedDict,
                              kTypedStorage, kUntypedStorage, kDType };

// A pickled value. Containers, strings, storages and tensors live in side tables indexed by
// `aux`, so memo references share them (lists and dicts are mutable, as in Python) and cycles
// cost nothing to free.
struct Obj {
  Kind kind = Kind::kNone;
  Global global = Global::kRebuildV2;  // kGlobal only
  DType dtype = DType::kUInt8;         // kGlobal kTypedStorage / kDType
  uint32_t aux = 0;
  int64_t i = 0;     // kInt, kBool
  double f = 0;      // kFloat
};

struct StorageInfo {
  std::string key;
  bool typed = false;
  DType dtype = DType::kUInt8;
  uint64_t nbytes = 0;
};

struct TensorInfo {
  uint32_t storage = 0;
  DType dtype = DType::kUInt8;
  uint64_t offset = 0;
  Shape shape;
  std::vector<uint64_t> strides;
  uint64_t pos = 0;
};

std::optional<DType> TypedStorageDType(std::string_view name) {
  static constexpr std::pair<std::string_view, DType> kMap[] = {
      {"DoubleStorage", DType::kFloat64}, {"FloatStorage", DType::kFloat32},
      {"HalfStorage", DType::kFloat16},   {"BFloat16Storage", DType::kBFloat16},
      {"LongStorage", DType::kInt64},     {"IntStorage", DType::kInt32},
      {"ShortStorage", DType::kInt16},    {"CharStorage", DType::kInt8},
      {"ByteStorage", DType::kUInt8},     {"BoolStorage", DType::kBool},
  };
  for (const auto& [n, d] : kMap)
    if (n == name) return d;
  return std::nullopt;
}

std::string Printable(std::string_view s) { return PrintableBytes(s, 120); }

bool MulOverflow(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }
bool AddOverflow(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

class Machine {
 public:
  Machine(std::span<const std::byte> data, const std::string& file) : data_(data), file_(file) {}

  Result<PickledObject> Run() {
    LIBSHARD_ASSIGN_OR_RETURN(uint32_t root, Interpret());
    PickledObject out;
    const Obj& r = objs_[root];
    if (r.kind != Kind::kDict && r.kind != Kind::kList && r.kind != Kind::kTuple)
      return Error(StatusCode::kUnsupported, 0,
                   std::string("the top-level object is a ") + KindName(r.kind) +
                       "; libshard reads a dict of tensors (torch.save({'name': tensor, ...}))");
    std::string prefix;
    LIBSHARD_RETURN_IF_ERROR(Flatten(root, prefix, 0, &out));
    return out;
  }

 private:
  Status Error(StatusCode code, uint64_t at, const std::string& what) const {
    return Status(code, file_ + ": data.pkl byte " + std::to_string(at) + ": " + what);
  }
  Status Corrupt(uint64_t at, const std::string& what) const {
    return Error(StatusCode::kCorruption, at,
                 what + " (the pickle is malformed; the file is damaged or not from torch.save)");
  }

  static const char* KindName(Kind k) {
    switch (k) {
      case Kind::kNone: return "None";
      case Kind::kBool: return "bool";
      case Kind::kInt: return "int";
      case Kind::kFloat: return "float";
      case Kind::kStr: return "str";
      case Kind::kTuple: return "tuple";
      case Kind::kList: return "list";
      case Kind::kDict: return "dict";
      case Kind::kGlobal: return "global";
      case Kind::kStorage: return "storage";
      case Kind::kTensor: return "tensor";
    }
    return "?";
  }

  Result<uint32_t> New(Obj o) {
    if (objs_.size() >= kMaxObjects)
      return Error(StatusCode::kResourceExhausted, at_,
                   "more than " + std::to_string(kMaxObjects) + " pickled objects; refusing");
    objs_.push_back(o);
    return static_cast<uint32_t>(objs_.size() - 1);
  }
  Status Push(Obj o) {
    LIBSHARD_ASSIGN_OR_RETURN(uint32_t id, New(o));
    stack_.push_back(id);
    return Status::OK();
  }
  Status PushSeq(Kind kind, std::vector<uint32_t> items) {
    seqs_.push_back(std::move(items));
    Obj o;
    o.kind = kind;
    o.aux = static_cast<uint32_t>(seqs_.size() - 1);
    return Push(o);
  }
  Status PushStr(std::string s) {
    strs_.push_back(std::move(s));
    Obj o;
    o.kind = Kind::kStr;
    o.aux = static_cast<uint32_t>(strs_.size() - 1);
    return Push(o);
  }
  Status PushInt(int64_t v) {
    Obj o;
    o.kind = Kind::kInt;
    o.i = v;
    return Push(o);
  }

  size_t FrameBase() const { return marks_.empty() ? 0 : marks_.back(); }
  Result<uint32_t> Pop() {
    if (stack_.size() <= FrameBase()) return Corrupt(at_, "stack underflow");
    uint32_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Result<uint32_t> Top() const {
    if (stack_.size() <= FrameBase()) return Corrupt(at_, "stack underflow");
    return stack_.back();
  }
  Result<std::vector<uint32_t>> PopMark() {
    if (marks_.empty()) return Corrupt(at_, "no MARK before a multi-item opcode");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<uint32_t> items(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }

  Result<std::span<const std::byte>> Take(uint64_t n) {
    if (n > data_.size() - pos_)
      return Corrupt(at_, "opcode argument of " + std::to_string(n) +
                              " bytes runs past the end of data.pkl");
    auto s = data_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  Result<uint64_t> TakeLE(int n) {
    LIBSHARD_ASSIGN_OR_RETURN(auto b, Take(n));
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | std::to_integer<uint64_t>(b[k]);
    return v;
  }
  Result<std::string> TakeLine() {
    for (uint64_t p = pos_; p < data_.size(); ++p) {
      if (data_[p] == std::byte{'\n'}) {
        std::string s(reinterpret_cast<const char*>(data_.data() + pos_), p - pos_);
        pos_ = p + 1;
        return s;
      }
    }
    return Corrupt(at_, "GLOBAL argument is not newline-terminated");
  }

  // Two's-complement little-endian integer of any length; refused unless it fits int64.
  Status PushLong(std::span<const std::byte> b) {
    if (b.empty()) return PushInt(0);
    bool negative = (std::to_integer<uint8_t>(b.back()) & 0x80) != 0;
    std::byte ext = negative ? std::byte{0xff} : std::byte{0};
    size_t n = b.size();
    // Strip sign-extension bytes beyond the eighth.
    while (n > 8 && b[n - 1] == ext) --n;
    if (n > 8 || (b.size() > 8 && ((std::to_integer<uint8_t>(b[7]) & 0x80) != 0) != negative))
      return Error(StatusCode::kUnsupported, at_,
                   "integer of " + std::to_string(b.size()) +
                       " bytes does not fit in int64; libshard stores int64 metadata only");
    uint64_t v = negative ? ~uint64_t{0} : 0;
    for (size_t k = std::min<size_t>(n, 8); k-- > 0;)
      v = (v << 8) | std::to_integer<uint64_t>(b[k]);
    if (n < 8) {  // sign-extend from n bytes
      unsigned shift = static_cast<unsigned>(64 - 8 * n);
      v = static_cast<uint64_t>(static_cast<int64_t>(v << shift) >> shift);
    }
    return PushInt(static_cast<int64_t>(v));
  }

  Status ResolveGlobal(const std::string& module, const std::string& name) {
    Obj o;
    o.kind = Kind::kGlobal;
    bool ok = true;
    if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      o.global = Global::kRebuildV2;
    } else if (module == "torch._utils" && name == "_rebuild_tensor_v3") {
      o.global = Global::kRebuildV3;
    } else if (module == "torch._utils" && name == "_rebuild_parameter") {
      o.global = Global::kRebuildParameter;
    } else if (module == "collections" && name == "OrderedDict") {
      o.global = Global::kOrderedDict;
    } else if ((module == "torch.storage" || module == "torch") && name == "UntypedStorage") {
      o.global = Global::kUntypedStorage;
    } else if (module == "torch" && name.ends_with("Storage")) {
      auto d = TypedStorageDType(name);
      if (!d)
        return Error(StatusCode::kUnsupported, at_,
                     "storage type torch." + Printable(name) +
                         " holds a dtype libshard does not store (complex or quantized); "
                         "supported: bool, (u)int8..64, float16, bfloat16, float32, float64, "
                         "float8_e4m3fn, float8_e5m2");
      o.global = Global::kTypedStorage;
      o.dtype = *d;
    } else if (module == "torch" && DTypeFromName(name).has_value() && name != "Storage") {
      o.global = Global::kDType;
      o.dtype = *DTypeFromName(name);
    } else {
      ok = false;
    }
    if (!ok)
      return Error(StatusCode::kUnsupported, at_,
                   "GLOBAL '" + Printable(module) + " " + Printable(name) +
                       "' is not allowed: libshard reads only tensors and plain values and never "
                       "runs code from a file (this pickle would import and call it; if the file "
                       "is untrusted, treat it as malicious)");
    return Push(o);
  }

  Status Persist(uint32_t pid_id) {
    const Obj& pid = objs_[pid_id];
    auto bad = [&](const std::string& why) {
      return Error(StatusCode::kUnsupported, at_,
                   "persistent id is not a torch.save storage reference "
                   "('storage', type, key, location, numel): " + why);
    };
    if (pid.kind != Kind::kTuple) return bad(std::string("a ") + KindName(pid.kind));
    const auto& t = seqs_[pid.aux];
    if (t.size() != 5) return bad(std::to_string(t.size()) + " items");
    const Obj& tag = objs_[t[0]];
    if (tag.kind != Kind::kStr || strs_[tag.aux] != "storage") return bad("first item is not 'storage'");
    const Obj& type = objs_[t[1]];
    if (type.kind != Kind::kGlobal ||
        (type.global != Global::kTypedStorage && type.global != Global::kUntypedStorage))
      return bad("second item is not a storage type");
    const Obj& key = objs_[t[2]];
    const Obj& loc = objs_[t[3]];
    const Obj& numel = objs_[t[4]];
    if (key.kind != Kind::kStr || loc.kind != Kind::kStr) return bad("key or location is not a str");
    if (numel.kind != Kind::kInt || numel.i < 0) return bad("numel is not a non-negative int");
    StorageInfo s;
    s.key = strs_[key.aux];
    s.typed = type.global == Global::kTypedStorage;
    s.dtype = type.dtype;
    uint64_t elem = s.typed ? DTypeSize(s.dtype) : 1;
    if (MulOverflow(static_cast<uint64_t>(numel.i), elem, &s.nbytes))
      return Corrupt(at_, "storage size overflows");
    storages_.push_back(std::move(s));
    Obj o;
    o.kind = Kind::kStorage;
    o.aux = static_cast<uint32_t>(storages_.size() - 1);
    return Push(o);
  }

  Result<std::vector<uint64_t>> IntTuple(uint32_t id, const char* what) {
    const Obj& o = objs_[id];
    if (o.kind != Kind::kTuple && o.kind != Kind::kList)
      return Corrupt(at_, std::string("tensor ") + what + " is a " + KindName(o.kind) +
                              ", not a tuple of ints");
    const auto& items = seqs_[o.aux];
    if (items.size() > kMaxRankAccepted)
      return Error(StatusCode::kUnsupported, at_,
                   std::string("tensor ") + what + " has " + std::to_string(items.size()) +
                       " dims; at most " + std::to_string(kMaxRankAccepted) + " are supported");
    std::vector<uint64_t> v;
    for (uint32_t it : items) {
      const Obj& x = objs_[it];
      if (x.kind != Kind::kInt || x.i < 0)
        return Corrupt(at_, std::string("tensor ") + what + " holds a negative or non-int value");
      v.push_back(static_cast<uint64_t>(x.i));
    }
    return v;
  }

  Status RebuildTensor(bool v3, const std::vector<uint32_t>& args) {
    size_t base = v3 ? 7 : 6;
    const char* fn = v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2";
    if (args.size() != base && args.size() != base + 1)
      return Corrupt(at_, std::string(fn) + " called with " + std::to_string(args.size()) +
                              " arguments");
    const Obj& st = objs_[args[0]];
    if (st.kind != Kind::kStorage)
      return Corrupt(at_, std::string(fn) + " argument 0 is a " + KindName(st.kind) +
                              ", not a storage (BINPERSID)");
    const StorageInfo& storage = storages_[st.aux];
    TensorInfo t;
    t.storage = st.aux;
    t.pos = at_;
    if (v3) {
      const Obj& d = objs_[args[6]];
      if (d.kind != Kind::kGlobal || d.global != Global::kDType)
        return Corrupt(at_, "_rebuild_tensor_v3 argument 6 is not a torch dtype");
      t.dtype = d.dtype;
    } else {
      if (!storage.typed)
        return Corrupt(at_, "_rebuild_tensor_v2 on an UntypedStorage (no dtype)");
      t.dtype = storage.dtype;
    }
    const Obj& off = objs_[args[1]];
    if (off.kind != Kind::kInt || off.i < 0) return Corrupt(at_, "storage offset is not an int >= 0");
    t.offset = static_cast<uint64_t>(off.i);
    LIBSHARD_ASSIGN_OR_RETURN(t.shape, IntTuple(args[2], "size"));
    LIBSHARD_ASSIGN_OR_RETURN(t.strides, IntTuple(args[3], "stride"));
    if (t.shape.size() != t.strides.size())
      return Corrupt(at_, "tensor has " + std::to_string(t.shape.size()) + " sizes but " +
                              std::to_string(t.strides.size()) + " strides");
    if (args.size() == base + 1) {
      const Obj& meta = objs_[args[base]];
      if (meta.kind != Kind::kDict) return Corrupt(at_, "tensor metadata is not a dict");
      if (!seqs_[meta.aux].empty())
        return Error(StatusCode::kUnsupported, at_,
                     "tensor carries math bits (conj/neg view metadata); call .resolve_conj() "
                     "and .resolve_neg() (or .clone()) before torch.save");
    }
    // Geometry: element count, byte size and the largest element the view touches.
    const uint64_t item = DTypeSize(t.dtype);
    uint64_t numel = 1, nbytes = 0;
    for (uint64_t s : t.shape)
      if (MulOverflow(numel, s, &numel)) return Corrupt(at_, "tensor element count overflows");
    if (MulOverflow(numel, item, &nbytes)) return Corrupt(at_, "tensor byte size overflows");
    if (numel > 0) {
      uint64_t last = t.offset, span_bytes = 0;
      for (size_t k = 0; k < t.shape.size(); ++k) {
        uint64_t step = 0;
        if (MulOverflow(t.shape[k] - 1, t.strides[k], &step) || AddOverflow(last, step, &last))
          return Corrupt(at_, "tensor extent overflows");
      }
      if (AddOverflow(last, 1, &last) || MulOverflow(last, item, &span_bytes) ||
          span_bytes > storage.nbytes)
        return Corrupt(at_, "tensor view (offset " + std::to_string(t.offset) + ", sizes and "
                                "strides) reaches past its storage '" + Printable(storage.key) +
                                "' of " + std::to_string(storage.nbytes) + " bytes");
    }
    tensors_.push_back(std::move(t));
    Obj o;
    o.kind = Kind::kTensor;
    o.aux = static_cast<uint32_t>(tensors_.size() - 1);
    return Push(o);
  }

  Status Reduce() {
    LIBSHARD_ASSIGN_OR_RETURN(uint32_t args_id, Pop());
    LIBSHARD_ASSIGN_OR_RETURN(uint32_t fn_id, Pop());
    const Obj fn = objs_[fn_id];
    const Obj& args_obj = objs_[args_id];
    if (fn.kind != Kind::kGlobal || fn.global == Global::kTypedStorage ||
        fn.global == Global::kUntypedStorage || fn.global == Global::kDType)
      return Error(StatusCode::kUnsupported, at_,
                   std::string("REDUCE on a ") +
                       (fn.kind == Kind::kGlobal ? "storage type or dtype" : KindName(fn.kind)) +
                       ", which is not an allowed callable");
    if (args_obj.kind != Kind::kTuple) return Corrupt(at_, "REDUCE arguments are not a tuple");
    // Bounded before the copy: a memoised huge tuple REDUCEd over and over must stay cheap.
    if (seqs_[args_obj.aux].size() > kMaxReduceArgs)
      return Corrupt(at_, "REDUCE with " + std::to_string(seqs_[args_obj.aux].size()) +
                              " arguments; no allowed callable takes more than " +
                              std::to_string(kMaxReduceArgs));
    const std::vector<uint32_t> args = seqs_[args_obj.aux];
    switch (fn.global) {
      case Global::kOrderedDict:
        if (!args.empty())
          return Error(StatusCode::kUnsupported, at_, "OrderedDict called with arguments");
        return PushSeq(Kind::kDict, {});
      case Global::kRebuildV2:
        return RebuildTensor(false, args);
      case Global::kRebuildV3:
        return RebuildTensor(true, args);
      case Global::kRebuildParameter:
        // _rebuild_parameter(data, requires_grad, backward_hooks): the Parameter is its data.
        if (args.size() != 3 || objs_[args[0]].kind != Kind::kTensor)
          return Corrupt(at_, "_rebuild_parameter expects (tensor, requires_grad, hooks)");
        stack_.push_back(args[0]);
        return Status::OK();
      default:
        break;
    }
    return Error(StatusCode::kInternal, at_, "unhandled callable");
  }

  Result<uint32_t> Interpret() {
    const size_t n = data_.size();
    while (true) {
      at_ = pos_;
      if (pos_ >= n) return Corrupt(pos_, "data.pkl ends without STOP (truncated)");
      const uint8_t op = std::to_integer<uint8_t>(data_[pos_++]);
      switch (op) {
        case 0x80: {  // PROTO
          LIBSHARD_ASSIGN_OR_RETURN(uint64_t proto, TakeLE(1));
          if (proto < 2 || proto > 5)
            return Error(StatusCode::kUnsupported, at_,
                         "pickle protocol " + std::to_string(proto) +
                             " (torch.save writes 2; 3..5 with pickle_protocol=) ");
          break;
        }
        case 0x95: {  // FRAME: a length hint; frame contents are ordinary opcodes
          LIBSHARD_ASSIGN_OR_RETURN(uint64_t ignored, TakeLE(8));
          (void)ignored;
          break;
        }
        case '.': {  // STOP
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t v, Pop());
          return v;
        }
        case '(':
          if (marks_.size() >= kMaxMarkDepth) return Corrupt(at_, "MARKs nested too deeply");
          marks_.push_back(stack_.size());
          break;
        case '}':
          LIBSHARD_RETURN_IF_ERROR(PushSeq(Kind::kDict, {}));
          break;
        case ']':
          LIBSHARD_RETURN_IF_ERROR(PushSeq(Kind::kList, {}));
          break;
        case ')':
          LIBSHARD_RETURN_IF_ERROR(PushSeq(Kind::kTuple, {}));
          break;
        case 't': {
          LIBSHARD_ASSIGN_OR_RETURN(auto items, PopMark());
          LIBSHARD_RETURN_IF_ERROR(PushSeq(Kind::kTuple, std::move(items)));
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          size_t k = op - 0x84;
          std::vector<uint32_t> items(k);
          for (size_t j = k; j-- > 0;) {
            LIBSHARD_ASSIGN_OR_RETURN(items[j], Pop());
          }
          LIBSHARD_RETURN_IF_ERROR(PushSeq(Kind::kTuple, std::move(items)));
          break;
        }
        case 'a': {  // APPEND
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t v, Pop());
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t list, Top());
          if (objs_[list].kind != Kind::kList)
            return Error(StatusCode::kUnsupported, at_,
                         std::string("APPEND to a ") + KindName(objs_[list].kind));
          seqs_[objs_[list].aux].push_back(v);
          break;
        }
        case 'e': {  // APPENDS
          LIBSHARD_ASSIGN_OR_RETURN(auto items, PopMark());
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t list, Top());
          if (objs_[list].kind != Kind::kList)
            return Error(StatusCode::kUnsupported, at_,
                         std::string("APPENDS to a ") + KindName(objs_[list].kind));
          auto& seq = seqs_[objs_[list].aux];
          seq.insert(seq.end(), items.begin(), items.end());
          break;
        }
        case 's': {  // SETITEM (a one-key dict is EMPTY_DICT key value SETITEM)
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t v, Pop());
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t k, Pop());
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t dict, Top());
          if (objs_[dict].kind != Kind::kDict)
            return Error(StatusCode::kUnsupported, at_,
                         std::string("SETITEM on a ") + KindName(objs_[dict].kind));
          seqs_[objs_[dict].aux].push_back(k);
          seqs_[objs_[dict].aux].push_back(v);
          break;
        }
        case 'u': {  // SETITEMS
          LIBSHARD_ASSIGN_OR_RETURN(auto items, PopMark());
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t dict, Top());
          if (objs_[dict].kind != Kind::kDict)
            return Error(StatusCode::kUnsupported, at_,
                         std::string("SETITEMS on a ") + KindName(objs_[dict].kind));
          if (items.size() % 2 != 0) return Corrupt(at_, "SETITEMS with an odd item count");
          auto& seq = seqs_[objs_[dict].aux];
          seq.insert(seq.end(), items.begin(), items.end());
          break;
        }
        case 'J': {
          LIBSHARD_ASSIGN_OR_RETURN(uint64_t v, TakeLE(4));
          LIBSHARD_RETURN_IF_ERROR(PushInt(static_cast<int32_t>(static_cast<uint32_t>(v))));
          break;
        }
        case 'K': {
          LIBSHARD_ASSIGN_OR_RETURN(uint64_t v, TakeLE(1));
          LIBSHARD_RETURN_IF_ERROR(PushInt(static_cast<int64_t>(v)));
          break;
        }
        case 'M': {
          LIBSHARD_ASSIGN_OR_RETURN(uint64_t v, TakeLE(2));
          LIBSHARD_RETURN_IF_ERROR(PushInt(static_cast<int64_t>(v)));
          break;
        }
        case 0x8a: {  // LONG1
          LIBSHARD_ASSIGN_OR_RETURN(uint64_t len, TakeLE(1));
          LIBSHARD_ASSIGN_OR_RETURN(auto b, Take(len));
          LIBSHARD_RETURN_IF_ERROR(PushLong(b));
          break;
        }
        case 0x8b: {  // LONG4
          LIBSHARD_ASSIGN_OR_RETURN(uint64_t len, TakeLE(4));
          if (len & 0x80000000u) return Corrupt(at_, "LONG4 with a negative length");
          LIBSHARD_ASSIGN_OR_RETURN(auto b, Take(len));
          LIBSHARD_RETURN_IF_ERROR(PushLong(b));
          break;
        }
        case 'N':
          LIBSHARD_RETURN_IF_ERROR(Push(Obj{}));
          break;
        case 0x88:
        case 0x89: {
          Obj o;
          o.kind = Kind::kBool;
          o.i = op == 0x88;
          LIBSHARD_RETURN_IF_ERROR(Push(o));
          break;
        }
        case 'G': {  // BINFLOAT: big-endian IEEE 754 double
          LIBSHARD_ASSIGN_OR_RETURN(auto b, Take(8));
          uint64_t bits = 0;
          for (int k = 0; k < 8; ++k) bits = (bits << 8) | std::to_integer<uint64_t>(b[k]);
          Obj o;
          o.kind = Kind::kFloat;
          o.f = std::bit_cast<double>(bits);
          LIBSHARD_RETURN_IF_ERROR(Push(o));
          break;
        }
        case 'X':     // BINUNICODE
        case 0x8c:    // SHORT_BINUNICODE
        case 0x8d:    // BINUNICODE8
        case 'U':     // SHORT_BINSTRING
        case 'T': {   // BINSTRING
          int width = (op == 0x8c || op == 'U') ? 1 : (op == 0x8d ? 8 : 4);
          LIBSHARD_ASSIGN_OR_RETURN(uint64_t len, TakeLE(width));
          if (op == 'T' && (len & 0x80000000u)) return Corrupt(at_, "BINSTRING with a negative length");
          LIBSHARD_ASSIGN_OR_RETURN(auto b, Take(len));
          LIBSHARD_RETURN_IF_ERROR(
              PushStr(std::string(reinterpret_cast<const char*>(b.data()), b.size())));
          break;
        }
        case 'c': {  // GLOBAL
          LIBSHARD_ASSIGN_OR_RETURN(std::string module, TakeLine());
          LIBSHARD_ASSIGN_OR_RETURN(std::string name, TakeLine());
          LIBSHARD_RETURN_IF_ERROR(ResolveGlobal(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t name, Pop());
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t module, Pop());
          if (objs_[name].kind != Kind::kStr || objs_[module].kind != Kind::kStr)
            return Corrupt(at_, "STACK_GLOBAL on non-strings");
          LIBSHARD_RETURN_IF_ERROR(ResolveGlobal(strs_[objs_[module].aux], strs_[objs_[name].aux]));
          break;
        }
        case 'q':
        case 'r':
        case 0x94: {  // BINPUT, LONG_BINPUT, MEMOIZE
          uint64_t idx = memo_.size();
          if (op != 0x94) {
            LIBSHARD_ASSIGN_OR_RETURN(idx, TakeLE(op == 'q' ? 1 : 4));
          }
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t v, Top());
          if (memo_.size() >= kMaxObjects && !memo_.contains(static_cast<uint32_t>(idx)))
            return Error(StatusCode::kResourceExhausted, at_, "memo too large");
          memo_[static_cast<uint32_t>(idx)] = v;
          break;
        }
        case 'h':
        case 'j': {  // BINGET, LONG_BINGET
          LIBSHARD_ASSIGN_OR_RETURN(uint64_t idx, TakeLE(op == 'h' ? 1 : 4));
          auto it = memo_.find(static_cast<uint32_t>(idx));
          if (it == memo_.end())
            return Corrupt(at_, "memo entry " + std::to_string(idx) + " was never stored");
          stack_.push_back(it->second);
          break;
        }
        case 'Q': {  // BINPERSID
          LIBSHARD_ASSIGN_OR_RETURN(uint32_t pid, Pop());
          LIBSHARD_RETURN_IF_ERROR(Persist(pid));
          break;
        }
        case 'R':
          LIBSHARD_RETURN_IF_ERROR(Reduce());
          break;
        default:
          return Error(StatusCode::kUnsupported, at_,
                       "opcode " + OpName(op) +
                           " is outside the subset torch.save emits for tensors and plain values; "
                           "refusing (nothing is executed)");
      }
      if (stack_.size() > kMaxObjects) return Error(StatusCode::kResourceExhausted, at_, "stack too deep");
    }
  }

  static std::string OpName(uint8_t op) {
    static const char* kHex = "0123456789abcdef";
    std::string hex = std::string("0x") + kHex[op >> 4] + kHex[op & 15];
    switch (op) {
      case 'b': return hex + " (BUILD)";
      case 0x81: return hex + " (NEWOBJ)";
      case 0x92: return hex + " (NEWOBJ_EX)";
      case 'i': return hex + " (INST)";
      case 'o': return hex + " (OBJ)";
      case 'P': return hex + " (PERSID)";
      case 0x82: case 0x83: case 0x84: return hex + " (EXT)";
      case 'I': case 'L': case 'F': case 'S': case 'V': return hex + " (protocol 0 text opcode)";
      case 'B': case 'C': case 0x8e: case 0x96: return hex + " (bytes)";
      case 0x8f: case 0x90: case 0x91: return hex + " (set/frozenset)";
      case 0x97: case 0x98: return hex + " (out-of-band buffer)";
      default: break;
    }
    if (op >= 0x20 && op < 0x7f) return hex + " ('" + std::string(1, static_cast<char>(op)) + "')";
    return hex;
  }

  // Names a leaf "prefix.part" and records it; containers recurse.
  Status Flatten(uint32_t id, std::string& prefix, size_t depth, PickledObject* out) {
    if (++visits_ > kMaxFlattenVisits)
      return Error(StatusCode::kResourceExhausted, 0, "the pickled object graph is too large");
    if (depth > kMaxNesting)
      return Error(StatusCode::kUnsupported, 0,
                   "containers nested deeper than " + std::to_string(kMaxNesting) +
                       " (or a self-referencing container) under '" + Printable(prefix) + "'");
    const Obj& o = objs_[id];
    auto child = [&](std::string_view part, uint32_t v) -> Status {
      size_t keep = prefix.size();
      // A name longer than any field or metadata key may be (FORMAT.md §5) is refused before it
      // is built, so a long key repeated through the memo cannot grow the prefix.
      if (keep + (keep != 0 ? 1 : 0) + part.size() > kMaxNameBytes)
        return Error(StatusCode::kUnsupported, 0,
                     "entry name '" + Printable(prefix) + (prefix.empty() ? "" : ".") +
                         Printable(part) +
                         "' is longer than " + std::to_string(kMaxNameBytes) +
                         " bytes, the most a dataset field or metadata key may have "
                         "(FORMAT.md §5); use shorter dict keys");
      if (!prefix.empty()) prefix += '.';
      prefix += part;
      Status st = Flatten(v, prefix, depth + 1, out);
      prefix.resize(keep);
      return st;
    };
    auto leaf_name = [&]() -> Status {
      if (prefix.empty()) return Error(StatusCode::kUnsupported, 0, "empty entry name");
      if (!names_.insert(prefix).second)
        return Error(StatusCode::kUnsupported, 0,
                     "two entries flatten to the same name '" + Printable(prefix) +
                         "' (duplicate or clashing keys)");
      return Status::OK();
    };
    // Charges one metadata entry (key plus value bytes) to the budget before it is copied.
    auto charge_metadata = [&](uint64_t value_bytes) -> Status {
      metadata_bytes_ += prefix.size() + value_bytes;
      if (metadata_bytes_ > kMaxFlattenMetadataBytes)
        return Error(StatusCode::kResourceExhausted, 0,
                     "the non-tensor entries (metadata) come to more than " +
                         std::to_string(kMaxFlattenMetadataBytes) + " bytes (at '" +
                         Printable(prefix) + "'); a sample holds at most " +
                         std::to_string(kMaxMetadataBytes) +
                         " bytes of metadata (FORMAT.md §5): store large values as tensors or "
                         "leave them out of the file");
      return Status::OK();
    };
    switch (o.kind) {
      case Kind::kDict: {
        // By reference: seqs_ does not change while flattening, and a copy per visit would make
        // a memoised large container cost its size at every reference.
        const auto& items = seqs_[o.aux];
        for (size_t k = 0; k + 1 < items.size(); k += 2) {
          const Obj& key = objs_[items[k]];
          std::string number;
          std::string_view part;
          if (key.kind == Kind::kStr) {
            part = strs_[key.aux];  // a view: never copied, however long (child() checks it)
          } else if (key.kind == Kind::kInt) {
            number = std::to_string(key.i);
            part = number;
          } else {
            return Error(StatusCode::kUnsupported, 0,
                         std::string("dict key of type ") + KindName(key.kind) + " under '" +
                             Printable(prefix) + "'; keys must be str or int");
          }
          if (part.empty())
            return Error(StatusCode::kUnsupported, 0,
                         "empty dict key under '" + Printable(prefix) + "'");
          LIBSHARD_RETURN_IF_ERROR(child(part, items[k + 1]));
        }
        return Status::OK();
      }
      case Kind::kList:
      case Kind::kTuple: {
        const auto& items = seqs_[o.aux];
        for (size_t k = 0; k < items.size(); ++k)
          LIBSHARD_RETURN_IF_ERROR(child(std::to_string(k), items[k]));
        return Status::OK();
      }
      case Kind::kNone:
        return Status::OK();  // dropped, see SourceFile::metadata()
      case Kind::kBool:
        LIBSHARD_RETURN_IF_ERROR(charge_metadata(8));
        LIBSHARD_RETURN_IF_ERROR(leaf_name());
        out->metadata.push_back({prefix, MetaValue(o.i != 0)});
        return Status::OK();
      case Kind::kInt:
        LIBSHARD_RETURN_IF_ERROR(charge_metadata(8));
        LIBSHARD_RETURN_IF_ERROR(leaf_name());
        out->metadata.push_back({prefix, MetaValue(o.i)});
        return Status::OK();
      case Kind::kFloat:
        LIBSHARD_RETURN_IF_ERROR(charge_metadata(8));
        LIBSHARD_RETURN_IF_ERROR(leaf_name());
        out->metadata.push_back({prefix, MetaValue(o.f)});
        return Status::OK();
      case Kind::kStr:
        LIBSHARD_RETURN_IF_ERROR(charge_metadata(strs_[o.aux].size()));
        LIBSHARD_RETURN_IF_ERROR(leaf_name());
        out->metadata.push_back({prefix, MetaValue(strs_[o.aux])});
        return Status::OK();
      case Kind::kTensor: {
        if (out->tensors.size() >= kMaxFlattenTensors)
          return Error(StatusCode::kResourceExhausted, 0,
                       "more than " + std::to_string(kMaxFlattenTensors) + " tensors (at '" +
                           Printable(prefix) + "'); a dataset sample holds at most " +
                           std::to_string(kMaxFields) + " fields (FORMAT.md §5)");
        LIBSHARD_RETURN_IF_ERROR(leaf_name());
        const TensorInfo& t = tensors_[o.aux];
        const StorageInfo& s = storages_[t.storage];
        PickledTensor p;
        p.name = prefix;
        p.storage_key = s.key;
        p.dtype = t.dtype;
        p.storage_nbytes = s.nbytes;
        p.storage_offset = t.offset;
        p.shape = t.shape;
        p.strides = t.strides;
        p.pickle_offset = t.pos;
        out->tensors.push_back(std::move(p));
        return Status::OK();
      }
      case Kind::kGlobal:
      case Kind::kStorage:
        break;
    }
    return Error(StatusCode::kUnsupported, 0,
                 std::string("entry '") + Printable(prefix) + "' is a bare " + KindName(o.kind) +
                     ", not a tensor or plain value");
  }

  std::span<const std::byte> data_;
  const std::string& file_;
  uint64_t pos_ = 0;
  uint64_t at_ = 0;  // offset of the opcode being executed
  std::vector<Obj> objs_;
  std::vector<std::string> strs_;
  std::vector<std::vector<uint32_t>> seqs_;
  std::vector<StorageInfo> storages_;
  std::vector<TensorInfo> tensors_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, uint32_t> memo_;
  std::unordered_set<std::string> names_;
  size_t visits_ = 0;
  uint64_t metadata_bytes_ = 0;  // charged by Flatten, see kMaxFlattenMetadataBytes
};

}  // namespace

Result<PickledObject> UnpickleTorch(std::span<const std::byte> pickle, const std::string& file) {
  Machine m(pickle, file);
  return m.Run();
}

}  // namespace libshard::convert
