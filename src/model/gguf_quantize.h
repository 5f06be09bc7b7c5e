// `kvfork quantize`: a model -- a Hugging Face / kvfork directory, or a GGUF
// file whose weights are f32, f16 or bf16 -- becomes a GGUF file quantized
// with one of llama.cpp's mixes (model/quantize_recipe.h), as
// convert_hf_to_gguf.py followed by llama-quantize would write it: the same
// per-tensor types and, block for block, the same bytes (without an
// importance matrix).
//
// Cost: every weight is read once and quantized on the calling thread
// (scalar code; a 0.6B model takes about a minute); memory is one tensor's
// source plus its output at a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/status.h"
#include "model/gguf_export.h"
#include "model/quantize_recipe.h"

namespace kvfork {

struct QuantizeOptions {
  QuantizeMix mix = QuantizeMix::kQ4_K_M;
  // For a directory input: the tokenizer and naming options of export-gguf
  // (dtype, tensor_type and extra_metadata are set by QuantizeModel).
  GgufExportOptions export_options;
};

// What was written.
struct QuantizeSummary {
  std::map<std::string, int> tensors_by_type;  // "Q4_K" -> count
  uint64_t file_bytes = 0;
};

// Writes out_path. `model` is a directory holding config.json, or a .gguf
// file. Errors name the file, tensor or key at fault.
StatusOr<QuantizeSummary> QuantizeModel(const std::string& model, const std::string& out_path,
                                        const QuantizeOptions& options);

}  // namespace kvfork
