// The model config of a GGUF file, from its metadata as llama.cpp reads it:
// general.architecture picks the ArchSpec (arch.h); {arch}.context_length,
// .embedding_length, .block_count, .feed_forward_length,
// .attention.head_count, .attention.head_count_kv, .attention.key_length,
// .attention.layer_norm_rms_epsilon, .rope.freq_base and the rope scaling
// keys give the fields; the vocab size is token_embd's row count; tied
// embeddings are an absent output.weight; llama3 scaling is the rope_freqs
// tensor. The same kernel limits as config.json's are checked, naming the key.
#pragma once

#include "core/status.h"
#include "model/gguf_checkpoint.h"
#include "model/model_config.h"

namespace kvfork {

// Errors name the file and the key (or tensor) at fault.
StatusOr<ModelConfig> ModelConfigFromGguf(const GgufCheckpoint& gguf);

}  // namespace kvfork
