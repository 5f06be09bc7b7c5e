// Model::Load: config.json -> architecture -> checkpoint -> bound weights.
#include "model/model.h"

#include <filesystem>

#include "core/logging.h"
#include "model/arch.h"
#include "model/decoder.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace kvfork {

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir,
                                             const ModelLoadOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return NotFoundError(dir + ": model directory not found");
  KVFORK_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir + "/config.json"));
  const ArchSpec& arch = ArchFor(config.arch);
  KVFORK_ASSIGN_OR_RETURN(auto checkpoint, SafetensorsCheckpoint::Open(dir));
  auto weights = BindWeights(config, arch, std::move(checkpoint), options);
  if (!weights.ok()) return weights.status().WithContext("loading " + dir);
  KVFORK_LOG(kInfo) << "loaded " << arch.hf_name << " from " << dir << ": "
                    << (*weights)->num_params / 1e6 << "M params, " << config.num_layers
                    << " layers, hidden " << config.hidden_size << ", vocab " << config.vocab_size
                    << ", weights " << DTypeName((*weights)->embed_tokens.dtype);
  return std::unique_ptr<Model>(
      std::make_unique<Decoder>(std::move(config), arch, std::move(weights).value()));
}

KvLayout Model::MakeKvLayout(KvDType dtype, int block_size) const {
  KvLayout layout;
  layout.num_layers = static_cast<int>(config().num_layers);
  layout.num_kv_heads = static_cast<int>(config().num_kv_heads);
  layout.head_dim = static_cast<int>(config().head_dim);
  layout.block_size = block_size;
  layout.dtype = dtype;
  return layout;
}

}  // namespace kvfork
