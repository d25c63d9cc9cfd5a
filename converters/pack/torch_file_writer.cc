#include "pack/torch_file_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include "readers/crc32.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

namespace libshard::convert {
namespace {

static_assert(std::endian::native == std::endian::little, "libshard assumes a little-endian host");

// --- pickle (protocol 2) ---------------------------------------------------------------------

class PickleBuilder {
 public:
  void Op(char c) { out_ += c; }
  void Global(std::string_view module, std::string_view name) {
    out_ += 'c';
    out_.append(module);
    out_ += '\n';
    out_.append(name);
    out_ += '\n';
  }
  void Unicode(std::string_view s) {
    out_ += 'X';
    PutLe(static_cast<uint64_t>(s.size()), 4);
    out_.append(s);
  }
  void Int(int64_t v) {
    if (v >= 0 && v <= 0xff) {
      out_ += 'K';
      PutLe(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v <= 0xffff) {
      out_ += 'M';
      PutLe(static_cast<uint64_t>(v), 2);
    } else if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
      out_ += 'J';
      PutLe(static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
    } else {
      // LONG1: minimal little-endian two's complement, as CPython's pickle emits.
      uint8_t bytes[8];
      auto u = static_cast<uint64_t>(v);
      for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(u >> (8 * i));
      int n = 8;
      while (n > 1) {
        const bool sign_next = (bytes[n - 2] & 0x80) != 0;
        if ((bytes[n - 1] == 0x00 && !sign_next) || (bytes[n - 1] == 0xff && sign_next)) {
          --n;
        } else {
          break;
        }
      }
      out_ += '\x8a';
      out_ += static_cast<char>(n);
      out_.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
    }
  }
  void UInt(uint64_t v) { Int(static_cast<int64_t>(v)); }  // callers check v <= INT64_MAX
  void Float(double d) {
    out_ += 'G';
    const auto bits = std::bit_cast<uint64_t>(d);
    for (int i = 7; i >= 0; --i) out_ += static_cast<char>(bits >> (8 * i));  // big-endian
  }
  void Tuple(const std::vector<uint64_t>& items) {
    if (items.empty()) {
      out_ += ')';
      return;
    }
    if (items.size() > 3) out_ += '(';
    for (uint64_t v : items) UInt(v);
    out_ += items.size() == 1 ? '\x85' : items.size() == 2 ? '\x86' : items.size() == 3 ? '\x87' : 't';
  }
  std::string Take() { return std::move(out_); }

 private:
  void PutLe(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_ += static_cast<char>(v >> (8 * i));
  }
  std::string out_;
};

// The legacy typed storage class of `dtype`, or empty for the dtypes torch serialises as an
// UntypedStorage + dtype (`torch.storage._new_dtypes()`).
std::string_view TypedStorageName(DType dtype) {
  switch (dtype) {
    case DType::kBool: return "BoolStorage";
    case DType::kUInt8: return "ByteStorage";
    case DType::kInt8: return "CharStorage";
    case DType::kInt16: return "ShortStorage";
    case DType::kInt32: return "IntStorage";
    case DType::kInt64: return "LongStorage";
    case DType::kFloat16: return "HalfStorage";
    case DType::kBFloat16: return "BFloat16Storage";
    case DType::kFloat32: return "FloatStorage";
    case DType::kFloat64: return "DoubleStorage";
    default: return "";
  }
}

std::vector<uint64_t> ContiguousStrides(const Shape& shape) {
  // torch.empty(shape).stride(): a zero-size dimension counts as 1.
  std::vector<uint64_t> strides(shape.size());
  uint64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = acc;
    acc *= shape[i] == 0 ? 1 : shape[i];
  }
  return strides;
}

// --- zip -------------------------------------------------------------------------------------

constexpr uint64_t k32Max = 0xFFFFFFFFull;

struct ZipRecord {
  std::string name;
  uint64_t offset = 0;  // of the local header
  uint64_t size = 0;
  uint32_t crc = 0;
};

class ZipFile {
 public:
  explicit ZipFile(std::string path) : path_(std::move(path)) {}
  ~ZipFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ZipFile(const ZipFile&) = delete;
  ZipFile& operator=(const ZipFile&) = delete;

  Status Open() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::FromErrno(errno, "cannot create " + path_);
    return Status::OK();
  }

  // Appends one stored record whose data starts on a 64-byte boundary.
  Status Add(const std::string& name, std::span<const std::byte> data) {
    ZipRecord rec;
    rec.name = name;
    rec.offset = pos_;
    rec.size = data.size();
    rec.crc = Crc32(data);
    const bool zip64 = rec.size >= k32Max || rec.offset >= k32Max;
    // Local header: 30 bytes + name + [zip64 extra: 4 + 16] + 'FB' padding extra (4 + pad).
    uint64_t start = pos_ + 30 + name.size() + 4 + (zip64 ? 20 : 0);
    const uint64_t pad = (64 - start % 64) % 64;
    std::string h;
    Put32(h, 0x04034b50);
    Put16(h, zip64 ? 45 : 20);  // version needed
    Put16(h, 0x0800);           // flags: UTF-8 names
    Put16(h, 0);                // method: stored
    Put16(h, 0);                // time
    Put16(h, 0x21);             // date (1980-01-01)
    Put32(h, rec.crc);
    Put32(h, zip64 ? 0xFFFFFFFFu : static_cast<uint32_t>(rec.size));
    Put32(h, zip64 ? 0xFFFFFFFFu : static_cast<uint32_t>(rec.size));
    Put16(h, static_cast<uint16_t>(name.size()));
    Put16(h, static_cast<uint16_t>((zip64 ? 20 : 0) + 4 + pad));
    h += name;
    if (zip64) {
      Put16(h, 0x0001);
      Put16(h, 16);
      Put64(h, rec.size);
      Put64(h, rec.size);
    }
    Put16(h, 0x4246);  // 'FB'
    Put16(h, static_cast<uint16_t>(pad));
    h.append(pad, 'Z');
    LIBSHARD_RETURN_IF_ERROR(Write(h.data(), h.size()));
    LIBSHARD_RETURN_IF_ERROR(Write(data.data(), data.size()));
    records_.push_back(std::move(rec));
    return Status::OK();
  }

  Status Finish() {
    const uint64_t cd_offset = pos_;
    std::string cd;
    for (const ZipRecord& r : records_) {
      const bool big_size = r.size >= k32Max, big_off = r.offset >= k32Max;
      const uint16_t extra = (big_size || big_off) ? 4 + (big_size ? 16 : 0) + (big_off ? 8 : 0) : 0;
      Put32(cd, 0x02014b50);
      Put16(cd, 45);  // made by
      Put16(cd, extra ? 45 : 20);
      Put16(cd, 0x0800);
      Put16(cd, 0);
      Put16(cd, 0);
      Put16(cd, 0x21);
      Put32(cd, r.crc);
      Put32(cd, big_size ? 0xFFFFFFFFu : static_cast<uint32_t>(r.size));
      Put32(cd, big_size ? 0xFFFFFFFFu : static_cast<uint32_t>(r.size));
      Put16(cd, static_cast<uint16_t>(r.name.size()));
      Put16(cd, extra);
      Put16(cd, 0);  // comment
      Put16(cd, 0);  // disk
      Put16(cd, 0);  // internal attributes
      Put32(cd, 0);  // external attributes
      Put32(cd, big_off ? 0xFFFFFFFFu : static_cast<uint32_t>(r.offset));
      cd += r.name;
      if (extra) {
        Put16(cd, 0x0001);
        Put16(cd, static_cast<uint16_t>(extra - 4));
        if (big_size) {
          Put64(cd, r.size);
          Put64(cd, r.size);
        }
        if (big_off) Put64(cd, r.offset);
      }
    }
    const uint64_t cd_size = cd.size();
    const uint64_t n = records_.size();
    const bool zip64 = cd_offset >= k32Max || n >= 0xFFFF || cd_size >= k32Max;
    std::string tail;
    if (zip64) {
      const uint64_t eocd64_offset = cd_offset + cd_size;
      Put32(tail, 0x06064b50);
      Put64(tail, 44);
      Put16(tail, 45);
      Put16(tail, 45);
      Put32(tail, 0);
      Put32(tail, 0);
      Put64(tail, n);
      Put64(tail, n);
      Put64(tail, cd_size);
      Put64(tail, cd_offset);
      Put32(tail, 0x07064b50);
      Put32(tail, 0);
      Put64(tail, eocd64_offset);
      Put32(tail, 1);
    }
    Put32(tail, 0x06054b50);
    Put16(tail, 0);
    Put16(tail, 0);
    Put16(tail, zip64 ? 0xFFFF : static_cast<uint16_t>(n));
    Put16(tail, zip64 ? 0xFFFF : static_cast<uint16_t>(n));
    Put32(tail, zip64 ? 0xFFFFFFFFu : static_cast<uint32_t>(cd_size));
    Put32(tail, zip64 ? 0xFFFFFFFFu : static_cast<uint32_t>(cd_offset));
    Put16(tail, 0);
    cd += tail;
    LIBSHARD_RETURN_IF_ERROR(Write(cd.data(), cd.size()));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Status::FromErrno(errno, "cannot close " + path_);
    return Status::OK();
  }

 private:
  static void Put16(std::string& s, uint16_t v) {
    s += static_cast<char>(v);
    s += static_cast<char>(v >> 8);
  }
  static void Put32(std::string& s, uint32_t v) {
    for (int i = 0; i < 4; ++i) s += static_cast<char>(v >> (8 * i));
  }
  static void Put64(std::string& s, uint64_t v) {
    for (int i = 0; i < 8; ++i) s += static_cast<char>(v >> (8 * i));
  }
  Status Write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "cannot write " + path_ + " at offset " + std::to_string(pos_));
      }
      p += w;
      n -= static_cast<size_t>(w);
      pos_ += static_cast<uint64_t>(w);
    }
    return Status::OK();
  }

  std::string path_;
  int fd_ = -1;
  uint64_t pos_ = 0;
  std::vector<ZipRecord> records_;
};

std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace

Result<std::string> EncodeTorchPickle(const std::vector<TorchTensorRef>& tensors,
                                      const Metadata& metadata) {
  PickleBuilder p;
  p.Op('\x80');
  p.Op('\x02');
  p.Op('}');
  const bool any = !tensors.empty() || !metadata.empty();
  if (any) p.Op('(');
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TorchTensorRef& t = tensors[k];
    const size_t item = DTypeSize(t.dtype);
    const uint64_t numel = NumElements(t.shape);
    if (item == 0 || numel == UINT64_MAX || numel > uint64_t{INT64_MAX} / item ||
        numel * item != t.data.size()) {
      return Status::InvalidArgument("tensor '" + t.name + "': " + std::to_string(t.data.size()) +
                                     " bytes do not match its shape and dtype");
    }
    for (uint64_t d : t.shape) {
      if (d > uint64_t{INT64_MAX}) return Status::InvalidArgument("tensor '" + t.name + "': dim too large");
    }
    const std::string_view typed = TypedStorageName(t.dtype);
    p.Unicode(t.name);
    p.Global("torch._utils", typed.empty() ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
    p.Op('(');
    {  // persistent id: ('storage', storage_type, key, location, numel)
      p.Op('(');
      p.Unicode("storage");
      if (typed.empty()) {
        p.Global("torch.storage", "UntypedStorage");
      } else {
        p.Global("torch", typed);
      }
      p.Unicode(std::to_string(k));
      p.Unicode("cpu");
      p.UInt(typed.empty() ? numel * item : numel);  // bytes for untyped, elements for typed
      p.Op('t');
      p.Op('Q');  // BINPERSID
    }
    p.Int(0);  // storage_offset
    p.Tuple(t.shape);
    p.Tuple(ContiguousStrides(t.shape));
    p.Op('\x89');  // requires_grad = False
    p.Global("collections", "OrderedDict");
    p.Op(')');
    p.Op('R');
    if (typed.empty()) p.Global("torch", DTypeName(t.dtype));
    p.Op('t');
    p.Op('R');
  }
  for (const MetaEntry& m : metadata) {
    p.Unicode(m.key);
    if (const bool* b = std::get_if<bool>(&m.value)) {
      p.Op(*b ? '\x88' : '\x89');
    } else if (const int64_t* i = std::get_if<int64_t>(&m.value)) {
      p.Int(*i);
    } else if (const double* d = std::get_if<double>(&m.value)) {
      p.Float(*d);
    } else {
      p.Unicode(std::get<std::string>(m.value));
    }
  }
  if (any) p.Op('u');  // SETITEMS
  p.Op('.');
  return p.Take();
}

Status WriteTorchFile(const std::string& path, const std::vector<TorchTensorRef>& tensors,
                      const Metadata& metadata) {
  LIBSHARD_ASSIGN_OR_RETURN(std::string pickle, EncodeTorchPickle(tensors, metadata));
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return Status::IoError("cannot create directory " + parent.string() + ": " + ec.message());
  const std::string tmp = path + ".tmp";
  {
    ZipFile zip(tmp);
    Status st = zip.Open();
    if (st.ok()) st = zip.Add("archive/data.pkl", AsBytes(pickle));
    if (st.ok()) st = zip.Add("archive/byteorder", AsBytes("little"));
    for (size_t k = 0; st.ok() && k < tensors.size(); ++k) {
      st = zip.Add("archive/data/" + std::to_string(k), tensors[k].data);
    }
    if (st.ok()) st = zip.Add("archive/version", AsBytes("3\n"));
    if (st.ok()) st = zip.Finish();
    if (!st.ok()) {
      ::unlink(tmp.c_str());
      return st;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno(e, "cannot rename " + tmp + " to " + path);
  }
  return Status::OK();
}

}  // namespace libshard::convert
