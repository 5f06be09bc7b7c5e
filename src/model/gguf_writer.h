// GGUF v3 files (llama.cpp's model format): the value types, and a writer.
//
// Layout written (gguf-py/gguf/gguf_writer.py, ggml/include/gguf.h):
//   "GGUF" u32 version=3, u64 n_tensors, u64 n_kv,
//   n_kv x (string key, u32 type, value),
//   n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset),
//   zero padding to `alignment`, then tensor data, each tensor's offset (relative
//   to the data start) a multiple of `alignment` (32 unless general.alignment).
// Strings are u64 length + bytes; everything little endian.
//
// Ownership: the writer owns the metadata it was given and, for each tensor, a
// fill function called once during Write() to produce its bytes, so a model
// is streamed to disk one tensor at a time (memory = the largest tensor).
// Not thread-safe; one thread builds and writes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace kvfork {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// ggml tensor types we write (ggml.h enum ggml_type): the element types and
// the block formats of core/dtype.h.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBf16 = 30,
};

// Bytes of one element; element types (F32, F16, BF16) only.
size_t GgmlTypeSize(GgmlType t);
// "Q4_K", as ggml_type_name spells it.
const char* GgmlTypeName(GgmlType t);
DType DTypeOfGgml(GgmlType t);
GgmlType GgmlTypeOf(DType t);

// One metadata value, kept as its serialized payload (the bytes after the
// u32 type), so values read from one file can be copied verbatim into another.
struct GgufValue {
  GgufType type = GgufType::kUint32;
  GgufType array_type = GgufType::kUint32;  // element type when type == kArray
  std::vector<uint8_t> payload;

  static GgufValue U32(uint32_t v);
  static GgufValue I32(int32_t v);
  static GgufValue F32(float v);
  static GgufValue Bool(bool v);
  static GgufValue String(const std::string& v);
  static GgufValue StringArray(const std::vector<std::string>& v);
  static GgufValue I32Array(const std::vector<int32_t>& v);
};

class GgufWriter {
 public:
  // Fills exactly the tensor's byte size (rows x RowBytes(type, ne[0])) at dst.
  using FillFn = std::function<Status(uint8_t* dst)>;

  // Metadata is written in insertion order; setting a key again replaces it.
  void Set(const std::string& key, GgufValue value);

  // ne is in ggml order: ne[0] is the contiguous (innermost) dimension, so a
  // row-major [rows, cols] matrix is ne = {cols, rows}. For a block format
  // ne[0] must be a multiple of its block size.
  Status AddTensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, FillFn fill);

  // Writes the file; errors name the path or the tensor whose fill failed.
  // A non-empty progress_label reports the tensor bytes written on a
  // terminal (core/progress.h), for the CLI's export and quantize.
  Status Write(const std::string& path, const std::string& progress_label = "") const;

  size_t num_tensors() const { return tensors_.size(); }

 private:
  struct TensorEntry {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t num_bytes;
    FillFn fill;
  };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, size_t> tensor_index_;
  uint64_t alignment_ = 32;
};

}  // namespace kvfork
