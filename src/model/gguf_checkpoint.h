// A GGUF model as a TensorSource: one file, or the split files
// NAME-00001-of-0000N.gguf that llama.cpp's gguf-split writes (split.count,
// split.no metadata), every tensor used in place from the mmap (zero copy).
//
// Tensor shapes are given row-major as TensorSource promises: GGUF's ne
// order reversed, so a [rows, cols] matrix has ne = {cols, rows}. Block
// formats (q8_0, q4_k, ...) keep their ggml layout; num_bytes is rows x
// RowBytes(dtype, cols).
//
// Every offset and size is checked against its file at Open: a truncated
// file, an unknown ggml type (naming the tensor and the id), a tensor past
// the end of its file, a missing or inconsistent split all are errors naming
// the file and the key or tensor; nothing reads outside a mapping.
//
// Ownership: owns the mmaps and the first file's metadata. Cost of Open: maps
// the files and parses their headers; no tensor byte is read.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gguf_reader.h"
#include "model/tensor_source.h"

namespace kvfork {

class GgufCheckpoint final : public TensorSource {
 public:
  ~GgufCheckpoint() override;
  GgufCheckpoint(const GgufCheckpoint&) = delete;
  GgufCheckpoint& operator=(const GgufCheckpoint&) = delete;

  // `path` is a .gguf file; for a split model, any one of its files.
  static StatusOr<std::unique_ptr<GgufCheckpoint>> Open(const std::string& path);

  TensorNaming naming() const override { return TensorNaming::kGguf; }
  const std::string& path() const override { return path_; }
  const TensorInfo* Find(const std::string& name) const override;
  const std::map<std::string, TensorInfo>& tensors() const override { return tensors_; }

  // The metadata of the first file (split.no 0), where the model's keys are.
  const GgufReader& metadata() const { return metadata_; }
  // The files mapped, in split order.
  const std::vector<std::string>& files() const { return file_paths_; }

 private:
  struct Mapping {
    void* addr = nullptr;
    size_t size = 0;
  };
  GgufCheckpoint() = default;
  // Maps one file and adds its tensors; returns its parsed header. With
  // split_no >= 0 the file must say it is that part of split_count.
  StatusOr<GgufReader> AddFile(const std::string& file, int64_t split_no = -1,
                               int64_t split_count = 0);

  std::string path_;
  GgufReader metadata_;
  std::vector<Mapping> mappings_;
  std::vector<std::string> file_paths_;
  std::map<std::string, TensorInfo> tensors_;
};

// The file name of split `index` (0-based) of `count` for a split prefix:
// "dir/model" -> "dir/model-00002-of-00003.gguf", as llama.cpp names them.
std::string GgufSplitPath(const std::string& prefix, int index, int count);

}  // namespace kvfork
