// Converts a kvfork / Hugging Face model directory (config.json, safetensors,
// tokenizer.json) into a GGUF v3 file that llama.cpp loads, doing what
// llama.cpp's convert_hf_to_gguf.py does for LlamaForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, SmolLM3ForCausalLM and Phi3ForCausalLM:
//   - hyperparameters as {arch}.* keys (general.architecture = the
//     ArchSpec's gguf_name); phi3 as Phi3MiniModel writes them (no key/value
//     length, rope.dimension_count = the partial rotary dims,
//     rope.scaling.original_context_length, attention.sliding_window 0);
//   - smollm3 only when no_rope_layers is llama.cpp's fixed pattern;
//   - for longrope, rope_factors_long / rope_factors_short tensors and
//     rope.scaling.attn_factor;
//   - tensors renamed (token_embd, blk.N.attn_q, ..., output_norm, output;
//     output omitted when the embeddings are tied);
//   - for llama and smollm3, Q and K rows permuted from HF's rotate-half order back to
//     llama.cpp's interleaved pairs (LlamaModel.permute); qwen3 uses NeoX
//     RoPE and is written unpermuted;
//   - for llama3 rope scaling, a rope_freqs tensor of per-pair factors;
//   - tokenizer.* keys built from tokenizer.json/tokenizer_config.json as
//     the converter's _set_vocab_gpt2 + SpecialVocab do, or copied verbatim
//     from a llama.cpp vocab GGUF.
// 1-D tensors (norms, rope_freqs) stay F32 whatever the dtype, as in the
// converter. Cost: reads every weight once; memory is one tensor at a time.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/arch.h"
#include "model/gguf_writer.h"

namespace kvfork {

struct GgufExportOptions {
  // Element type of the 2-D weights: F32 (default), F16 or BF16.
  GgmlType dtype = GgmlType::kF32;
  // Directory holding tokenizer.json and tokenizer_config.json; empty = the
  // model directory.
  std::string tokenizer_dir;
  // If set, the tokenizer.* keys are copied from this GGUF (one of
  // llama.cpp's models/ggml-vocab-*.gguf) instead of built from tokenizer.json.
  std::string vocab_gguf;
  // tokenizer.ggml.pre; empty = by architecture ("llama-bpe" for llama and
  // smollm3, "qwen2" for qwen2/qwen3, "gpt-4o" for phi3: what
  // convert_hf_to_gguf's hash detection yields for the Llama 3, Qwen 2/3 and
  // Phi-4-mini tokenizers).
  std::string tokenizer_pre;
  // general.name; empty = the model directory's base name.
  std::string name;
  // If set, picks each tensor's type from its GGUF name, ne (ggml order) and
  // the type it would otherwise get (f32 for 1-D, else `dtype`); block types
  // are quantized row by row (kernels/quantize_row.h). `kvfork quantize`
  // passes its recipe (model/quantize_recipe.h) here.
  std::function<GgmlType(const std::string& name, const std::vector<int64_t>& ne, GgmlType type)>
      tensor_type;
  // Metadata set after the export's own keys (replacing any of them), e.g.
  // general.file_type and general.quantization_version of a quantized file.
  std::vector<std::pair<std::string, GgufValue>> extra_metadata;
  // Threads that convert / quantize a tensor's rows (not owned); null = the
  // calling thread. The bytes do not depend on it.
  ThreadPool* pool = nullptr;
  // Non-empty: a progress line with this label while tensors are written,
  // on a terminal only (core/progress.h). The CLI sets it; tests leave it.
  std::string progress_label;
};

// Writes out_path. Errors name the file, field or tensor at fault.
Status ExportGguf(const std::string& model_dir, const std::string& out_path,
                  const GgufExportOptions& options);

// LlamaRopePermutation is in model/arch.h.

}  // namespace kvfork
