#include "readers/torch_zip_source.h"


#include <unordered_map>

#include "readers/crc32.h"
#include "readers/tensor_copy.h"

namespace libshard::convert {

namespace {

Status CrcMismatch(const std::string& file, const std::string& record, uint64_t offset,
                   uint64_t size, uint32_t want, uint32_t got) {
  char buf[64];
  snprintf(buf, sizeof buf, " (stored %08x, computed %08x)", want, got);
  return Status::Corruption(file + ": CRC-32 mismatch in zip record '" + record + "' at bytes [" +
                            std::to_string(offset) + ", +" + std::to_string(size) + ")" + buf +
                            ": the file is corrupt; re-create it");
}

Result<std::string> ReadSmallRecord(const ByteSource& src, const ZipArchive& zip,
                                    const ZipEntry& entry, uint64_t limit) {
  if (entry.size > limit)
    return Status::ResourceExhausted(src.name() + ": zip record '" + entry.name + "' has " +
                                     std::to_string(entry.size) + " bytes, over the limit of " +
                                     std::to_string(limit));
  LIBSHARD_ASSIGN_OR_RETURN(uint64_t off, zip.DataOffset(src, entry));
  std::string s(entry.size, '\0');
  LIBSHARD_RETURN_IF_ERROR(src.ReadAt(off, std::as_writable_bytes(std::span(s)), entry.name));
  return s;
}

}  // namespace

Result<std::unique_ptr<TorchZipSource>> TorchZipSource::Open(std::unique_ptr<ByteSource> src,
                                                             uint64_t file_size, bool gzipped,
                                                             const SourceOptions& options) {
  const std::string& file = src->name();
  LIBSHARD_ASSIGN_OR_RETURN(ZipArchive zip, ZipArchive::Open(*src, options.max_header_bytes));
  if (zip.entries().empty())
    return Status::Corruption(file + ": empty zip archive, not a torch.save file");
  // The archive folder is whatever precedes the first '/' of the first entry ("archive" for
  // file objects, the file's stem for paths); never assumed.
  const std::string& first = zip.entries().front().name;
  size_t slash = first.find('/');
  if (slash == std::string::npos || slash == 0)
    return Status::Corruption(file + ": first zip entry '" + first +
                              "' has no archive folder; not a torch.save file");
  const std::string prefix = first.substr(0, slash + 1);
  if (zip.Find(prefix + "constants.pkl") != nullptr)
    return Status::Unsupported(file + ": a TorchScript archive (torch.jit.save: has " + prefix +
                               "constants.pkl), not a torch.save file of tensors; libshard does "
                               "not run TorchScript. Save the tensors with torch.save instead");
  for (const ZipEntry& e : zip.entries())
    if (e.name.starts_with(prefix + "code/"))
      return Status::Unsupported(file + ": a TorchScript archive (has " + prefix +
                                 "code/), not a torch.save file of tensors");

  auto out = std::unique_ptr<TorchZipSource>(new TorchZipSource());
  out->file_size_ = file_size;
  out->gzipped_ = gzipped;
  out->verify_crc32_ = options.verify_crc32;

  if (const ZipEntry* bo = zip.Find(prefix + "byteorder")) {
    LIBSHARD_ASSIGN_OR_RETURN(std::string order, ReadSmallRecord(*src, zip, *bo, 64));
    if (order == "big") {
      out->big_endian_ = true;
    } else if (order != "little") {
      return Status::Corruption(file + ": record '" + bo->name + "' says byte order '" +
                                order.substr(0, 16) + "', expected 'little' or 'big'");
    }
  }

  const ZipEntry* pkl = zip.Find(prefix + "data.pkl");
  if (pkl == nullptr)
    return Status::Corruption(file + ": no '" + prefix + "data.pkl' record; not a torch.save "
                              "file (the first entry named the archive folder '" + prefix + "')");
  LIBSHARD_ASSIGN_OR_RETURN(std::string pickle,
                            ReadSmallRecord(*src, zip, *pkl, options.max_header_bytes));
  if (options.verify_crc32 && pkl->crc32 != 0) {
    uint32_t got = Crc32(std::as_bytes(std::span(pickle)));
    if (got != pkl->crc32)
      return CrcMismatch(file, pkl->name, pkl->local_header_offset, pkl->size, pkl->crc32, got);
  }
  LIBSHARD_ASSIGN_OR_RETURN(PickledObject obj,
                            UnpickleTorch(std::as_bytes(std::span(pickle)), file));

  // Views can materialise more bytes than the file holds (expand(): zero strides; or many names
  // for one storage). What the tensors materialise beyond the bytes of the records they read is
  // bounded like an inflated gzip is, by max_decompressed_bytes: a 2 KB file must not make the
  // caller allocate and fill 8 GiB.
  const uint64_t excess_limit = options.max_decompressed_bytes != 0
                                    ? options.max_decompressed_bytes
                                    : DefaultMaxDecompressedBytes(1);
  uint64_t materialised = 0, stored = 0;
  std::unordered_map<std::string, size_t> record_index;
  for (PickledTensor& t : obj.tensors) {
    auto it = record_index.find(t.storage_key);
    if (it == record_index.end()) {
      const std::string name = prefix + "data/" + t.storage_key;
      const ZipEntry* e = zip.Find(name);
      if (e == nullptr)
        return Status::Corruption(file + ": tensor '" + t.name + "' (data.pkl byte " +
                                  std::to_string(t.pickle_offset) + ") refers to storage '" +
                                  t.storage_key + "' but the archive has no record '" + name +
                                  "'");
      LIBSHARD_ASSIGN_OR_RETURN(uint64_t off, zip.DataOffset(*src, *e));
      out->records_.push_back({name, off, e->size, e->crc32});
      it = record_index.emplace(t.storage_key, out->records_.size() - 1).first;
      stored += e->size;  // records lie in the file: no overflow
    }
    const Record& r = out->records_[it->second];
    // The pickle's declared storage size must be what the archive holds (a mismatch is the
    // CVE-2026-24747 class of bug in other readers).
    if (t.storage_nbytes != r.size)
      return Status::Corruption(file + ": tensor '" + t.name + "' (data.pkl byte " +
                                std::to_string(t.pickle_offset) + ") declares a storage of " +
                                std::to_string(t.storage_nbytes) + " bytes but record '" +
                                r.name + "' holds " + std::to_string(r.size) + " bytes");
    SourceTensor st;
    st.name = t.name;
    st.dtype = t.dtype;
    st.shape = t.shape;
    st.nbytes = NumElements(t.shape) * DTypeSize(t.dtype);  // overflow ruled out by UnpickleTorch
    if (st.nbytes > options.max_tensor_bytes)
      return Status::ResourceExhausted(
          file + ": tensor '" + t.name + "' (data.pkl byte " + std::to_string(t.pickle_offset) +
          ") materialises to " + std::to_string(st.nbytes) + " bytes, over the limit of " +
          std::to_string(options.max_tensor_bytes) + " (SourceOptions::max_tensor_bytes)");
    if (__builtin_add_overflow(materialised, st.nbytes, &materialised) ||
        (materialised > stored && materialised - stored > excess_limit))
      return Status::ResourceExhausted(
          file + ": tensor '" + t.name + "' (data.pkl byte " + std::to_string(t.pickle_offset) +
          ", " + std::to_string(st.nbytes) + " bytes) is a view that, with the tensors before it, "
          "materialises more than " + std::to_string(excess_limit) + " bytes beyond the " +
          std::to_string(stored) + " the file stores for them (expand() or repeated references "
          "to one storage); refusing a possible memory bomb. Save .contiguous() tensors, or "
          "raise the limit (" + options.max_decompressed_name + ")");
    out->tensors_.push_back(std::move(st));
    out->views_.push_back({it->second, std::move(t)});
  }
  out->crc_checked_ = std::make_unique<std::atomic<bool>[]>(out->records_.size());
  out->metadata_ = std::move(obj.metadata);
  out->src_ = std::move(src);
  return out;
}

Status TorchZipSource::ReadTensor(size_t t, std::span<std::byte> dst) const {
  if (t >= tensors_.size())
    return Status::InvalidArgument(path() + ": tensor index " + std::to_string(t) +
                                   " out of range (" + std::to_string(tensors_.size()) + ")");
  const SourceTensor& st = tensors_[t];
  if (dst.size() != st.nbytes)
    return Status::InvalidArgument(path() + ": tensor '" + st.name + "' has " +
                                   std::to_string(st.nbytes) + " bytes, destination has " +
                                   std::to_string(dst.size()));
  if (st.nbytes == 0) return Status::OK();
  const View& v = views_[t];
  const Record& r = records_[v.record];
  const size_t item = DTypeSize(st.dtype);
  const uint64_t first = v.tensor.storage_offset * item;  // in range: checked at open
  const bool want_crc = verify_crc32_ && r.crc32 != 0 && !crc_checked_[v.record].load();
  auto check_crc = [&](std::span<const std::byte> whole) -> Status {
    uint32_t got = Crc32(whole);
    if (got != r.crc32) return CrcMismatch(path(), r.name, r.data_offset, r.size, r.crc32, got);
    crc_checked_[v.record].store(true);
    return Status::OK();
  };
  const bool contiguous = IsContiguous(v.tensor.shape, v.tensor.strides);
  if (contiguous && (!want_crc || (first == 0 && st.nbytes == r.size))) {
    // The common case: one copy from the file into dst.
    LIBSHARD_RETURN_IF_ERROR(src_->ReadAt(r.data_offset + first, dst, r.name));
    if (want_crc) LIBSHARD_RETURN_IF_ERROR(check_crc(dst));
  } else {
    // A view: read the span of the storage it touches (the whole record when its CRC is still
    // unchecked) and gather.
    uint64_t last = v.tensor.storage_offset;
    for (size_t k = 0; k < v.tensor.shape.size(); ++k)
      last += (v.tensor.shape[k] - 1) * v.tensor.strides[k];
    const uint64_t begin = want_crc ? 0 : first;
    const uint64_t end = want_crc ? r.size : (last + 1) * item;
    std::vector<std::byte> buf(end - begin);
    LIBSHARD_RETURN_IF_ERROR(src_->ReadAt(r.data_offset + begin, buf, r.name));
    if (want_crc) LIBSHARD_RETURN_IF_ERROR(check_crc(buf));
    GatherStrided(std::span<const std::byte>(buf).subspan(first - begin), v.tensor.shape,
                  v.tensor.strides, item, dst);
  }
  if (big_endian_) SwapElementBytes(dst, item);
  return Status::OK();
}

}  // namespace libshard::convert
