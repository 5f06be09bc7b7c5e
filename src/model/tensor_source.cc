#include "model/tensor_source.h"

namespace kvfork {

StatusOr<int64_t> TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return DataLossError(file + ": tensor \"" + name + "\": shape " + ShapeString() +
                           " has more elements than fit 64 bits");
  }
  return n;
}

std::string TensorInfo::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace kvfork
