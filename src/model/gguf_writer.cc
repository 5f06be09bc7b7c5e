#include "model/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/progress.h"

namespace kvfork {
namespace {

template <typename T>
void Append(std::vector<uint8_t>* out, T v) {
  // resize + memcpy rather than insert: GCC 12 warns falsely on small inserts.
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

void AppendString(std::vector<uint8_t>* out, const std::string& s) {
  Append<uint64_t>(out, s.size());
  const size_t at = out->size();
  out->resize(at + s.size());
  if (!s.empty()) std::memcpy(out->data() + at, s.data(), s.size());
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

size_t GgmlTypeSize(GgmlType t) { return t == GgmlType::kF32 ? 4 : 2; }

const char* GgmlTypeName(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kBf16: return "BF16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ4_1: return "Q4_1";
    case GgmlType::kQ5_0: return "Q5_0";
    case GgmlType::kQ5_1: return "Q5_1";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ4_K: return "Q4_K";
    case GgmlType::kQ5_K: return "Q5_K";
    case GgmlType::kQ6_K: return "Q6_K";
  }
  return "?";
}

DType DTypeOfGgml(GgmlType t) {
  // Every GgmlType value is a row of the dtype table (tests/model check both ways).
  return TraitsForGgmlType(static_cast<uint32_t>(t))->dtype;
}

GgmlType GgmlTypeOf(DType t) { return static_cast<GgmlType>(Traits(t).ggml_type); }

GgufValue GgufValue::U32(uint32_t v) {
  GgufValue r;
  r.type = GgufType::kUint32;
  Append(&r.payload, v);
  return r;
}

GgufValue GgufValue::I32(int32_t v) {
  GgufValue r;
  r.type = GgufType::kInt32;
  Append(&r.payload, v);
  return r;
}

GgufValue GgufValue::F32(float v) {
  GgufValue r;
  r.type = GgufType::kFloat32;
  Append(&r.payload, v);
  return r;
}

GgufValue GgufValue::Bool(bool v) {
  GgufValue r;
  r.type = GgufType::kBool;
  Append<uint8_t>(&r.payload, v ? 1 : 0);
  return r;
}

GgufValue GgufValue::String(const std::string& v) {
  GgufValue r;
  r.type = GgufType::kString;
  AppendString(&r.payload, v);
  return r;
}

GgufValue GgufValue::StringArray(const std::vector<std::string>& v) {
  GgufValue r;
  r.type = GgufType::kArray;
  r.array_type = GgufType::kString;
  Append<uint32_t>(&r.payload, static_cast<uint32_t>(GgufType::kString));
  Append<uint64_t>(&r.payload, v.size());
  for (const std::string& s : v) AppendString(&r.payload, s);
  return r;
}

GgufValue GgufValue::I32Array(const std::vector<int32_t>& v) {
  GgufValue r;
  r.type = GgufType::kArray;
  r.array_type = GgufType::kInt32;
  Append<uint32_t>(&r.payload, static_cast<uint32_t>(GgufType::kInt32));
  Append<uint64_t>(&r.payload, v.size());
  for (int32_t x : v) Append(&r.payload, x);
  return r;
}

void GgufWriter::Set(const std::string& key, GgufValue value) {
  auto it = kv_index_.find(key);
  if (it != kv_index_.end()) {
    kv_[it->second].second = std::move(value);
    return;
  }
  kv_index_[key] = kv_.size();
  kv_.emplace_back(key, std::move(value));
}

Status GgufWriter::AddTensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                             FillFn fill) {
  if (tensor_index_.count(name)) return InvalidArgumentError("GGUF tensor \"" + name + "\" added twice");
  if (ne.empty() || ne.size() > 4)
    return InvalidArgumentError("GGUF tensor \"" + name + "\" must have 1 to 4 dimensions");
  uint64_t rows = 1;
  for (int64_t d : ne) {
    if (d <= 0) return InvalidArgumentError("GGUF tensor \"" + name + "\" has a dimension <= 0");
  }
  for (size_t i = 1; i < ne.size(); ++i) rows *= static_cast<uint64_t>(ne[i]);
  const DType dtype = DTypeOfGgml(type);
  if (!RowFits(dtype, ne[0]))
    return InvalidArgumentError("GGUF tensor \"" + name + "\": " + GgmlTypeName(type) +
                                " needs rows of a multiple of " +
                                std::to_string(Traits(dtype).block_elems) + " values, ne[0] is " +
                                std::to_string(ne[0]));
  const uint64_t num_bytes = rows * RowBytes(dtype, ne[0]);
  tensor_index_[name] = tensors_.size();
  tensors_.push_back({name, type, std::move(ne), num_bytes, std::move(fill)});
  return OkStatus();
}

Status GgufWriter::Write(const std::string& path, const std::string& progress_label) const {
  std::vector<uint8_t> header;
  header.insert(header.end(), {'G', 'G', 'U', 'F'});
  Append<uint32_t>(&header, 3);
  Append<uint64_t>(&header, tensors_.size());
  Append<uint64_t>(&header, kv_.size());
  for (const auto& [key, value] : kv_) {
    AppendString(&header, key);
    Append<uint32_t>(&header, static_cast<uint32_t>(value.type));
    header.insert(header.end(), value.payload.begin(), value.payload.end());
  }
  std::vector<uint64_t> offsets;
  uint64_t offset = 0;
  for (const TensorEntry& t : tensors_) {
    AppendString(&header, t.name);
    Append<uint32_t>(&header, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Append<uint64_t>(&header, static_cast<uint64_t>(d));
    Append<uint32_t>(&header, static_cast<uint32_t>(t.type));
    Append<uint64_t>(&header, offset);
    offsets.push_back(offset);
    offset = AlignUp(offset + t.num_bytes, alignment_);
  }
  header.resize(AlignUp(header.size(), alignment_), 0);

  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return NotFoundError(path + ": cannot open for writing: " + std::strerror(errno));
  auto write_all = [&](const uint8_t* p, size_t n) -> Status {
    if (n != 0 && std::fwrite(p, 1, n, f.get()) != n)
      return DataLossError(path + ": write failed: " + std::strerror(errno));
    return OkStatus();
  };
  KVFORK_RETURN_IF_ERROR(write_all(header.data(), header.size()));
  std::vector<uint8_t> buf;
  uint64_t written = 0;
  ProgressOptions po;
  po.label = progress_label;
  po.total = static_cast<int64_t>(offset);
  po.bytes = true;
  if (progress_label.empty()) po.enabled = false;
  Progress progress(po);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorEntry& t = tensors_[i];
    progress.Update(static_cast<int64_t>(written), t.name);
    std::vector<uint8_t> pad(offsets[i] - written, 0);
    KVFORK_RETURN_IF_ERROR(write_all(pad.data(), pad.size()));
    buf.assign(t.num_bytes, 0);
    KVFORK_RETURN_IF_ERROR(t.fill(buf.data()).WithContext("GGUF tensor \"" + t.name + "\""));
    KVFORK_RETURN_IF_ERROR(write_all(buf.data(), buf.size()));
    written = offsets[i] + t.num_bytes;
  }
  progress.Update(static_cast<int64_t>(offset), "");  // the padded end: 100%
  progress.Finish();
  std::vector<uint8_t> tail(AlignUp(written, alignment_) - written, 0);
  KVFORK_RETURN_IF_ERROR(write_all(tail.data(), tail.size()));
  if (std::fflush(f.get()) != 0) return DataLossError(path + ": flush failed: " + std::strerror(errno));
  return OkStatus();
}

}  // namespace kvfork
