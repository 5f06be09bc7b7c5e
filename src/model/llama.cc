// LlamaForCausalLM (Llama 3.x), GGUF "llama": the common decoder with
// nothing extra. GQA and llama3 rope scaling are handled by the shared code
// and ModelConfig::RopeInvFreq; attention_bias / mlp_bias are rejected at
// parse. llama.cpp's converter stores Q and K rows permuted for its
// interleaved RoPE; the loader undoes that (ExpectedTensor::gguf_rope_heads).
#include "model/arch.h"

namespace kvfork {

std::vector<int64_t> LlamaRopePermutation(int64_t n_head, int64_t head_dim) {
  // weights.reshape(n_head, 2, head_dim / 2, cols).swapaxes(1, 2): output
  // index (h, i, j) reads input index (h, j, i).
  std::vector<int64_t> map(n_head * head_dim);
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) map[h * head_dim + 2 * i + j] = h * head_dim + j * half + i;
  return map;
}

const ArchSpec& LlamaArch() {
  static const ArchSpec spec = {
      Architecture::kLlama,   "LlamaForCausalLM",          "llama",
      /*default_head_dim=*/0, /*gguf_rope_permuted=*/true, nullptr, nullptr};
  return spec;
}

}  // namespace kvfork
