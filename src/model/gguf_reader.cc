#include "model/gguf_reader.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <type_traits>

namespace kvfork {
namespace {

// Bounds-checked little-endian cursor over the file's bytes.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  template <typename T>
  StatusOr<T> Read() {
    if (sizeof(T) > size_ - pos_) return Truncated();
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  StatusOr<std::string> ReadString() {
    KVFORK_ASSIGN_OR_RETURN(uint64_t n, Read<uint64_t>());
    if (n > size_ - pos_) return Truncated();
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

  Status Skip(uint64_t n) {
    if (n > size_ - pos_) return Truncated();
    pos_ += n;
    return OkStatus();
  }

  size_t pos() const { return pos_; }
  const uint8_t* at(size_t p) const { return data_ + p; }

 private:
  Status Truncated() const {
    return DataLossError(path_ + ": truncated GGUF header at byte " + std::to_string(pos_));
  }
  const uint8_t* data_;
  size_t size_;
  const std::string& path_;
  size_t pos_ = 0;
};

StatusOr<uint64_t> ScalarSize(GgufType t, const std::string& path) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    default: break;
  }
  return DataLossError(path + ": bad GGUF value type " + std::to_string(static_cast<uint32_t>(t)));
}

// Skips one value of type t (not an array).
Status SkipScalarOrString(Cursor* c, GgufType t, const std::string& path) {
  if (t == GgufType::kString) return c->ReadString().status();
  KVFORK_ASSIGN_OR_RETURN(uint64_t size, ScalarSize(t, path));
  return c->Skip(size);
}

std::string ShapeString(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

}  // namespace

StatusOr<GgufReader> GgufReader::Parse(const uint8_t* data, size_t size, const std::string& path) {
  GgufReader r;
  r.path_ = path;
  Cursor c(data, size, path);
  KVFORK_ASSIGN_OR_RETURN(uint32_t magic, c.Read<uint32_t>());
  if (std::memcmp(&magic, "GGUF", 4) != 0) return InvalidArgumentError(path + ": not a GGUF file");
  KVFORK_ASSIGN_OR_RETURN(r.version_, c.Read<uint32_t>());
  if (r.version_ < 2 || r.version_ > 3)
    return UnimplementedError(path + ": GGUF version " + std::to_string(r.version_));
  KVFORK_ASSIGN_OR_RETURN(uint64_t n_tensors, c.Read<uint64_t>());
  KVFORK_ASSIGN_OR_RETURN(uint64_t n_kv, c.Read<uint64_t>());
  for (uint64_t i = 0; i < n_kv; ++i) {
    KVFORK_ASSIGN_OR_RETURN(std::string key, c.ReadString());
    KVFORK_ASSIGN_OR_RETURN(uint32_t type, c.Read<uint32_t>());
    GgufValue v;
    v.type = static_cast<GgufType>(type);
    size_t begin = c.pos();
    if (v.type == GgufType::kArray) {
      KVFORK_ASSIGN_OR_RETURN(uint32_t at, c.Read<uint32_t>());
      v.array_type = static_cast<GgufType>(at);
      KVFORK_ASSIGN_OR_RETURN(uint64_t n, c.Read<uint64_t>());
      if (v.array_type == GgufType::kString) {
        for (uint64_t j = 0; j < n; ++j) KVFORK_RETURN_IF_ERROR(c.ReadString().status());
      } else {
        KVFORK_ASSIGN_OR_RETURN(uint64_t size, ScalarSize(v.array_type, path));
        // n * size must not wrap around to a small skip.
        if (n > UINT64_MAX / size)
          return DataLossError(path + ": key " + key + ": array of " + std::to_string(n) +
                               " elements is larger than the file");
        KVFORK_RETURN_IF_ERROR(c.Skip(n * size));
      }
    } else {
      KVFORK_RETURN_IF_ERROR(SkipScalarOrString(&c, v.type, path).WithContext("key " + key));
    }
    v.payload.assign(c.at(begin), c.at(c.pos()));
    r.kv_index_[key] = r.kv_.size();
    r.kv_.emplace_back(key, std::move(v));
  }
  if (const GgufValue* a = r.Find("general.alignment")) {
    KVFORK_ASSIGN_OR_RETURN(uint32_t al, r.GetU32("general.alignment"));
    (void)a;
    if (al == 0 || (al & (al - 1)) != 0)
      return DataLossError(path + ": general.alignment must be a power of two");
    r.alignment_ = al;
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    KVFORK_ASSIGN_OR_RETURN(t.name, c.ReadString());
    KVFORK_ASSIGN_OR_RETURN(uint32_t n_dims, c.Read<uint32_t>());
    if (n_dims == 0 || n_dims > 4)
      return DataLossError(path + ": tensor " + t.name + " has " + std::to_string(n_dims) +
                           " dims");
    for (uint32_t d = 0; d < n_dims; ++d) {
      KVFORK_ASSIGN_OR_RETURN(uint64_t ne, c.Read<uint64_t>());
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    KVFORK_ASSIGN_OR_RETURN(t.ggml_type, c.Read<uint32_t>());
    KVFORK_ASSIGN_OR_RETURN(t.offset, c.Read<uint64_t>());
    r.tensor_index_[t.name] = r.tensors_.size();
    r.tensors_.push_back(std::move(t));
  }
  r.data_start_ = (c.pos() + r.alignment_ - 1) / r.alignment_ * r.alignment_;
  return r;
}

StatusOr<GgufReader> GgufReader::Open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open GGUF file");
  // Read the header only: grow the buffer until the tensor directory parses.
  // Vocab files are all header (a few MiB); model files have data after it.
  std::vector<uint8_t> data;
  uint64_t want = 1 << 20;
  for (;;) {
    data.resize(want);
    in.clear();
    in.seekg(0);
    in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(want));
    data.resize(static_cast<size_t>(in.gcount()));
    bool eof = data.size() < want;

    StatusOr<GgufReader> r = Parse(data.data(), data.size(), path);
    if (r.ok()) return r;
    const Status& st = r.status();
    if (st.code() != StatusCode::kDataLoss || eof) return st;
    want *= 4;
  }
}
const GgufValue* GgufReader::Find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufReader::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
StatusOr<const GgufValue*> FindTyped(const GgufReader& r, const std::string& path,
                                     const std::string& key, GgufType type) {
  const GgufValue* v = r.Find(key);
  if (v == nullptr) return NotFoundError(path + ": no GGUF key " + key);
  if (v->type != type)
    return InvalidArgumentError(path + ": GGUF key " + key + " has type " +
                                std::to_string(static_cast<uint32_t>(v->type)) + ", expected " +
                                std::to_string(static_cast<uint32_t>(type)));
  return v;
}
}  // namespace

StatusOr<uint32_t> GgufReader::GetU32(const std::string& key) const {
  KVFORK_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(*this, path_, key, GgufType::kUint32));
  uint32_t x;
  std::memcpy(&x, v->payload.data(), 4);
  return x;
}

StatusOr<uint64_t> GgufReader::GetUInt(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(path_ + ": no GGUF key " + key);
  auto load = [&](auto zero) -> StatusOr<uint64_t> {
    decltype(zero) x;
    if (v->payload.size() < sizeof(x))
      return DataLossError(path_ + ": GGUF key " + key + " is truncated");
    std::memcpy(&x, v->payload.data(), sizeof(x));
    if constexpr (std::is_signed_v<decltype(zero)>) {
      if (x < 0)
        return InvalidArgumentError(path_ + ": GGUF key " + key + " is negative (" +
                                    std::to_string(x) + ")");
    }
    return static_cast<uint64_t>(x);
  };
  switch (v->type) {
    case GgufType::kUint8:
      return load(uint8_t{0});
    case GgufType::kInt8:
      return load(int8_t{0});
    case GgufType::kUint16:
      return load(uint16_t{0});
    case GgufType::kInt16:
      return load(int16_t{0});
    case GgufType::kUint32:
      return load(uint32_t{0});
    case GgufType::kInt32:
      return load(int32_t{0});
    case GgufType::kUint64:
      return load(uint64_t{0});
    case GgufType::kInt64:
      return load(int64_t{0});
    default:
      break;
  }
  return InvalidArgumentError(path_ + ": GGUF key " + key + " has type " +
                              std::to_string(static_cast<uint32_t>(v->type)) +
                              ", expected an integer");
}

StatusOr<bool> GgufReader::GetBool(const std::string& key) const {
  KVFORK_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(*this, path_, key, GgufType::kBool));
  return v->payload[0] != 0;
}

StatusOr<float> GgufReader::GetF32(const std::string& key) const {
  KVFORK_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(*this, path_, key, GgufType::kFloat32));
  float x;
  std::memcpy(&x, v->payload.data(), 4);
  return x;
}

StatusOr<std::string> GgufReader::GetString(const std::string& key) const {
  KVFORK_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(*this, path_, key, GgufType::kString));
  return std::string(v->payload.begin() + 8, v->payload.end());
}

StatusOr<uint64_t> GgufReader::GetArrayLength(const std::string& key) const {
  KVFORK_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(*this, path_, key, GgufType::kArray));
  uint64_t n;
  std::memcpy(&n, v->payload.data() + 4, 8);
  return n;
}

StatusOr<std::vector<std::string>> GgufReader::GetStringArray(const std::string& key) const {
  KVFORK_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(*this, path_, key, GgufType::kArray));
  if (v->array_type != GgufType::kString)
    return InvalidArgumentError(path_ + ": GGUF key " + key + " is not a string array");
  Cursor c(v->payload.data(), v->payload.size(), path_);
  KVFORK_RETURN_IF_ERROR(c.Skip(4));
  KVFORK_ASSIGN_OR_RETURN(uint64_t n, c.Read<uint64_t>());
  std::vector<std::string> out;
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    KVFORK_ASSIGN_OR_RETURN(std::string s, c.ReadString());
    out.push_back(std::move(s));
  }
  return out;
}

StatusOr<std::vector<uint32_t>> GgufReader::GetArrayWords(const std::string& key) const {
  KVFORK_ASSIGN_OR_RETURN(const GgufValue* v, FindTyped(*this, path_, key, GgufType::kArray));
  if (v->array_type != GgufType::kInt32 && v->array_type != GgufType::kUint32 &&
      v->array_type != GgufType::kFloat32)
    return InvalidArgumentError(path_ + ": GGUF key " + key + " is not an array of a 4-byte type");
  uint64_t n;
  std::memcpy(&n, v->payload.data() + 4, 8);
  std::vector<uint32_t> words(n);
  // The parser checked that the payload holds n elements. An empty vector's
  // data() may be null, which memcpy must not get even for 0 bytes.
  if (n > 0) std::memcpy(words.data(), v->payload.data() + 12, n * 4);
  return words;
}

StatusOr<std::vector<uint8_t>> GgufReader::ReadTensor(const std::string& name) const {
  const GgufTensorInfo* t = FindTensor(name);
  if (t == nullptr) return NotFoundError(path_ + ": no tensor " + name);
  const DTypeTraits* traits = TraitsForGgmlType(t->ggml_type);
  if (traits == nullptr)
    return UnimplementedError(path_ + ": tensor " + name + " has ggml type " +
                              std::to_string(t->ggml_type) + ", which kvfork does not read");
  if (t->ne.empty() || t->ne[0] % traits->block_elems != 0)
    return DataLossError(path_ + ": tensor " + name + " of shape " + ShapeString(t->ne) + " is not whole " +
                         traits->name + " blocks");
  std::ifstream in(path_, std::ios::binary | std::ios::ate);
  if (!in) return NotFoundError(path_ + ": cannot open GGUF file");
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  // The size comes from the file: check it against the file before
  // allocating (a bad shape must not ask for terabytes or wrap around).
  const uint64_t start = data_start_ + t->offset;
  if (t->offset > file_size || start > file_size)
    return DataLossError(path_ + ": tensor " + name + " starts past the end of the file");
  // Bytes of a row's blocks, then times the other dimensions.
  uint64_t n = static_cast<uint64_t>(traits->block_bytes);
  std::vector<int64_t> dims = t->ne;
  dims[0] /= traits->block_elems;
  for (int64_t d : dims) {
    const uint64_t dim = static_cast<uint64_t>(d);
    if (d < 0 || (dim != 0 && n > (file_size - start) / dim))
      return DataLossError(path_ + ": tensor " + name + " of shape " + ShapeString(t->ne) +
                           " is larger than the file");
    n *= dim;
  }
  in.seekg(static_cast<std::streamoff>(start));
  std::vector<uint8_t> out(n);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n));
  if (static_cast<uint64_t>(in.gcount()) != n)
    return DataLossError(path_ + ": tensor " + name + " data is truncated");
  return out;
}

}  // namespace kvfork
