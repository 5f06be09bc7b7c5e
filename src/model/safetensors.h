// Safetensors files: a read-only mmap reader (single file or a sharded
// model.safetensors.index.json) and a writer.
//
// Ownership: a SafetensorsCheckpoint owns its mmaps; TensorInfo::data points
// into them and stays valid for the checkpoint's lifetime. Not thread-safe
// to construct; read-only access afterwards may be shared.
// Cost: opening maps the files (no copy); the header JSON is parsed once.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/tensor_source.h"

namespace kvfork {

// One mapped .safetensors file.
class SafetensorsFile {
 public:
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Maps and validates: header length, JSON, dtypes, shapes, data offsets
  // within the file and consistent with shape * dtype size.
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<TensorInfo> tensors_;
};

// All tensors of a model directory: model.safetensors, or the shards listed
// by model.safetensors.index.json ("weight_map": tensor -> shard file).
class SafetensorsCheckpoint final : public TensorSource {
 public:
  static StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& dir);

  TensorNaming naming() const override { return TensorNaming::kHuggingFace; }
  const std::string& path() const override { return dir_; }
  const TensorInfo* Find(const std::string& name) const override;
  const std::map<std::string, TensorInfo>& tensors() const override { return tensors_; }
  size_t TotalBytes() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorInfo> tensors_;
};

// A tensor to write: bytes already in the stated dtype, row-major.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Writes one .safetensors file (header padded to 8 bytes so every tensor
// is aligned for in-place use). Tensors are written in name order.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

// Streaming variant for large models: the caller produces each tensor's bytes
// on demand, so at most one tensor is in memory at a time.
struct TensorHeader {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};
class SafetensorsWriter {
 public:
  // Fixes the header; tensors must then be written in the given order.
  static StatusOr<std::unique_ptr<SafetensorsWriter>> Create(
      const std::string& path, const std::vector<TensorHeader>& headers);
  ~SafetensorsWriter();
  // Appends the next tensor's data; size must match its header.
  Status Write(const void* data, size_t num_bytes);
  Status Close();

 private:
  SafetensorsWriter() = default;
  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<size_t> sizes_;
  size_t next_ = 0;
};

}  // namespace kvfork
