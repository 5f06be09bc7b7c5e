#include "core/dtype.h"

namespace kvfork {
namespace {

// Block sizes and ggml ids as ggml-common.h defines them (QK4_0 = 32 ...,
// QK_K = 256): the GGUF format fixes them, so they are constants here.
constexpr DTypeTraits kTable[] = {
    {DType::kF32, "f32", 1, 4, 0, false},
    {DType::kBf16, "bf16", 1, 2, 30, false},
    {DType::kF16, "f16", 1, 2, 1, false},
    {DType::kQ8_0, "q8_0", 32, 34, 8, true},     // f16 d, 32 x int8
    {DType::kQ4_0, "q4_0", 32, 18, 2, true},     // f16 d, 16 bytes of nibbles
    {DType::kQ4_1, "q4_1", 32, 20, 3, true},     // f16 d, f16 m, 16 bytes
    {DType::kQ5_0, "q5_0", 32, 22, 6, true},     // f16 d, 4 bytes high bits, 16 bytes
    {DType::kQ5_1, "q5_1", 32, 24, 7, true},     // f16 d, f16 m, 4 + 16 bytes
    {DType::kQ4_K, "q4_k", 256, 144, 12, true},  // f16 d, dmin, 12 scale bytes, 128
    {DType::kQ5_K, "q5_k", 256, 176, 13, true},  // as q4_k plus 32 bytes high bits
    {DType::kQ6_K, "q6_k", 256, 210, 14, true},  // 128 ql, 64 qh, 16 scales, f16 d
};

constexpr bool TableInDTypeOrder() {
  for (int i = 0; i < static_cast<int>(sizeof(kTable) / sizeof(kTable[0])); ++i)
    if (static_cast<int>(kTable[i].dtype) != i) return false;
  return true;
}
static_assert(TableInDTypeOrder(), "kTable rows must follow the DType enum");

}  // namespace

const DTypeTraits& Traits(DType t) { return kTable[static_cast<int>(t)]; }

const DTypeTraits* TraitsForGgmlType(uint32_t ggml_type) {
  for (const DTypeTraits& f : kTable)
    if (f.ggml_type == ggml_type) return &f;
  return nullptr;
}

const DTypeTraits* TraitsForName(const std::string& name) {
  for (const DTypeTraits& f : kTable)
    if (name == f.name) return &f;
  return nullptr;
}

}  // namespace kvfork
