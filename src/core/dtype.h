// Element types of tensors on disk and in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvfork {

enum class DType { kF32, kBf16, kF16 };

inline size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBf16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "?";
}

}  // namespace kvfork
