// Element and block formats of tensors on disk and in memory.
//
// f32, bf16 and f16 are plain element types. The others are llama.cpp's
// block-quantized weight formats: a row of `cols` weights is cols /
// block_elems blocks of block_bytes each, scales inside the blocks, laid
// out bit for bit as ggml lays them out, so a GGUF tensor is used in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvfork {

enum class DType {
  kF32,
  kBf16,
  kF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
};

// One row of the format table.
struct DTypeTraits {
  DType dtype;
  const char* name;    // "q4_k": lower case, as llama.cpp's --type names them
  int block_elems;     // weights per block (1 for element types)
  int block_bytes;     // bytes per block (the element size for element types)
  uint32_t ggml_type;  // ggml_type id in GGUF files
  bool quantized;
};

// The table, in DType order.
const DTypeTraits& Traits(DType t);
// nullptr when kvfork has no such format (the caller names the tensor).
const DTypeTraits* TraitsForGgmlType(uint32_t ggml_type);
// nullptr for an unknown name; accepts the names Traits gives.
const DTypeTraits* TraitsForName(const std::string& name);

// Bytes of one element of an element type (f32 4, bf16/f16 2). Not for
// quantized formats, whose rows are measured by RowBytes.
inline size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
inline const char* DTypeName(DType t) { return Traits(t).name; }
inline bool IsQuantized(DType t) { return Traits(t).quantized; }

// Bytes of a row of `cols` values; cols must be a multiple of block_elems
// (callers check RowFits first where the shape comes from a file).
inline size_t RowBytes(DType t, int64_t cols) {
  const DTypeTraits& f = Traits(t);
  return static_cast<size_t>(cols / f.block_elems) * static_cast<size_t>(f.block_bytes);
}
inline bool RowFits(DType t, int64_t cols) { return cols % Traits(t).block_elems == 0; }

}  // namespace kvfork
