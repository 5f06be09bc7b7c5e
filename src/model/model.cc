// Model::Load: (config.json | GGUF metadata) -> architecture -> tensor
// source -> bound weights.
#include "model/model.h"

#include <algorithm>
#include <filesystem>

#include "core/logging.h"
#include "model/arch.h"
#include "model/decoder.h"
#include "model/gguf_checkpoint.h"
#include "model/gguf_config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace kvfork {
namespace {

StatusOr<std::unique_ptr<Model>> Finish(ModelConfig config, std::unique_ptr<TensorSource> source,
                                        const ModelLoadOptions& options) {
  const ArchSpec& arch = ArchFor(config.arch);
  const std::string path = source->path();
  if (config.rope_scaling.type == RopeScaling::Type::kLongRope) {
    const int64_t context =
        options.context_length > 0 ? options.context_length : config.max_position_embeddings;
    config.rope_scaling.use_long_factor =
        context > config.rope_scaling.original_max_position_embeddings;
  }
  auto weights = BindWeights(config, arch, std::move(source), options);
  if (!weights.ok()) return weights.status().WithContext("loading " + path);
  KVFORK_LOG(kInfo) << "loaded " << arch.hf_name << " from " << path << ": "
                    << (*weights)->num_params / 1e6 << "M params, " << config.num_layers
                    << " layers, hidden " << config.hidden_size << ", vocab " << config.vocab_size
                    << ", weights " << DTypeName((*weights)->embed_tokens.dtype);
  return std::unique_ptr<Model>(
      std::make_unique<Decoder>(std::move(config), arch, std::move(weights).value()));
}

}  // namespace

bool IsGgufPath(const std::string& path) {
  std::error_code ec;
  return std::filesystem::path(path).extension() == ".gguf" &&
         !std::filesystem::is_directory(path, ec);
}

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path,
                                             const ModelLoadOptions& options) {
  std::error_code ec;
  if (IsGgufPath(path)) {
    KVFORK_ASSIGN_OR_RETURN(std::unique_ptr<GgufCheckpoint> gguf, GgufCheckpoint::Open(path));
    KVFORK_ASSIGN_OR_RETURN(ModelConfig config, ModelConfigFromGguf(*gguf));
    return Finish(std::move(config), std::move(gguf), options);
  }
  if (!std::filesystem::is_directory(path, ec))
    return NotFoundError(path + ": model directory not found (nor a .gguf file)");
  KVFORK_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(path + "/config.json"));
  KVFORK_ASSIGN_OR_RETURN(auto checkpoint, SafetensorsCheckpoint::Open(path));
  return Finish(std::move(config), std::move(checkpoint), options);
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

KvGroupMap MapKvGroups(const ModelConfig& config, KvDType dtype, int block_size) {
  KvGroupMap m;
  std::vector<int64_t> windows = {0};
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const int64_t w = config.LayerWindow(l);
    if (std::find(windows.begin(), windows.end(), w) == windows.end()) windows.push_back(w);
  }
  std::sort(windows.begin() + 1, windows.end());
  for (int64_t w : windows) {
    KvGroup g;
    g.layout.num_layers = 0;
    g.layout.num_kv_heads = static_cast<int>(config.num_kv_heads);
    g.layout.head_dim = static_cast<int>(config.head_dim);
    g.layout.block_size = block_size;
    g.layout.dtype = dtype;
    g.window = w;
    m.groups.push_back(g);
  }
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const int g = static_cast<int>(
        std::find(windows.begin(), windows.end(), config.LayerWindow(l)) - windows.begin());
    m.group_of_layer.push_back(g);
    m.index_in_group.push_back(m.groups[g].layout.num_layers++);
  }
  return m;
}

}  // namespace kvfork
