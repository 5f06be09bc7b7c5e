// Memory layout of one KV block, shared by the KV cache (which owns blocks)
// and the attention kernels (which read and write them). One block holds
// block_size consecutive positions of K and V for every layer, contiguous:
//
//   data:   [layers][2 (K, V)][kv_heads][block_size][head_dim] elements
//   scales: [layers][2 (K, V)][kv_heads][block_size] f32   (int8 only)
//
// so copying, evicting or persisting a block moves one chunk of memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvfork {

enum class KvDType { kBf16, kF32, kInt8 };

const char* KvDTypeName(KvDType t);

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;  // tokens per block
  KvDType dtype = KvDType::kBf16;

  size_t ElementBytes() const { return dtype == KvDType::kF32 ? 4 : dtype == KvDType::kBf16 ? 2 : 1; }
  // Elements of one (layer, K or V, head) plane: block_size * head_dim.
  size_t PlaneElements() const { return static_cast<size_t>(block_size) * head_dim; }
  size_t DataBytes() const {
    return static_cast<size_t>(num_layers) * 2 * num_kv_heads * PlaneElements() * ElementBytes();
  }
  size_t ScaleBytes() const {
    return dtype == KvDType::kInt8
               ? static_cast<size_t>(num_layers) * 2 * num_kv_heads * block_size * sizeof(float)
               : 0;
  }
  // Bytes of one block, rounded up to 64 so every block starts cache-aligned.
  size_t BlockBytes() const { return (DataBytes() + ScaleBytes() + 63) / 64 * 64; }
  // KV bytes per token across all layers (for accounting and benchmarks).
  size_t BytesPerToken() const { return (DataBytes() + ScaleBytes()) / block_size; }

  // Byte offset, inside a block, of the plane for (layer, kv = 0 for K / 1 for V, head).
  size_t PlaneOffset(int layer, int kv, int head) const {
    return ((static_cast<size_t>(layer) * 2 + kv) * num_kv_heads + head) * PlaneElements() *
           ElementBytes();
  }
  // Byte offset of the scales [block_size] f32 for (layer, kv, head); int8 only.
  size_t ScaleOffset(int layer, int kv, int head) const {
    return DataBytes() +
           ((static_cast<size_t>(layer) * 2 + kv) * num_kv_heads + head) * block_size *
               sizeof(float);
  }
};

}  // namespace kvfork
