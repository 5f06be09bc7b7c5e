// One interface over the mmapped tensor files a model is loaded from: a
// Hugging Face safetensors checkpoint (safetensors.h) or a GGUF file, single
// or split (gguf_checkpoint.h). BindWeights (weights.h) reads only this.
//
// Ownership: a TensorSource owns its mmaps; every TensorInfo::data points
// into them and stays valid for the source's lifetime. Read-only after Open,
// so it may be shared between threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace kvfork {

// Which name table the source's tensors follow (arch.h gives both names of
// every tensor).
enum class TensorNaming { kHuggingFace, kGguf };

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;     // row-major: [rows, cols] for a matrix
  const uint8_t* data = nullptr;  // into the file's mmap
  size_t num_bytes = 0;
  std::string file;  // the file it came from, for error messages

  // The product of the shape; an error naming the tensor when it does not
  // fit int64 (a corrupt header). Open() checks it against the data bytes,
  // so for a tensor of an open file it is always a value.
  StatusOr<int64_t> NumElements() const;
  std::string ShapeString() const;  // "[64, 128]"
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;

  virtual TensorNaming naming() const = 0;
  // What the source was opened from (a directory or a .gguf path).
  virtual const std::string& path() const = 0;
  // nullptr if absent.
  virtual const TensorInfo* Find(const std::string& name) const = 0;
  // Every tensor, by name.
  virtual const std::map<std::string, TensorInfo>& tensors() const = 0;
};

}  // namespace kvfork
