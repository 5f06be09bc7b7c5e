// Reads a GGUF v2/v3 file's metadata and tensor directory (see gguf_writer.h
// for the layout), and tensor bytes on demand. Used to copy tokenizer
// metadata from llama.cpp's vocab files and to check exported files.
//
// Ownership: the reader owns the parsed metadata; ReadTensor opens the file
// again and copies the tensor's bytes out (cost: one read of that tensor).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gguf_writer.h"

namespace kvfork {

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;    // raw ggml_type (GgmlType for the ones we write)
  std::vector<int64_t> ne;   // ggml order: ne[0] innermost
  uint64_t offset = 0;       // relative to the data section
};

class GgufReader {
 public:
  static StatusOr<GgufReader> Open(const std::string& path);
  // Parses the header at the start of `size` bytes (a whole mmapped file);
  // a header that runs past `size` is a kDataLoss "truncated" error.
  static StatusOr<GgufReader> Parse(const uint8_t* data, size_t size, const std::string& path);

  const std::string& path() const { return path_; }
  // Offset of the tensor data section in the file (header end, aligned).
  uint64_t data_start() const { return data_start_; }

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* Find(const std::string& key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(const std::string& name) const;

  // Typed getters; errors name the key and the type found.
  StatusOr<uint32_t> GetU32(const std::string& key) const;
  StatusOr<float> GetF32(const std::string& key) const;
  // Any integer type (u8..u64, i8..i64) with a value >= 0: writers differ
  // (split.count is u16, some converters write i32 where others write u32).
  StatusOr<uint64_t> GetUInt(const std::string& key) const;
  StatusOr<bool> GetBool(const std::string& key) const;
  StatusOr<std::string> GetString(const std::string& key) const;
  // Length of an array value.
  StatusOr<uint64_t> GetArrayLength(const std::string& key) const;
  StatusOr<std::vector<std::string>> GetStringArray(const std::string& key) const;
  // The elements of an array of a 4-byte type (int32, uint32, float32) as
  // their raw little-endian words; the caller reads them per array_type.
  StatusOr<std::vector<uint32_t>> GetArrayWords(const std::string& key) const;

  // The bytes of an F32/F16/BF16 tensor.
  StatusOr<std::vector<uint8_t>> ReadTensor(const std::string& name) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_start_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace kvfork
