// The architecture registry: one line per architecture file.
#include "model/arch.h"

namespace kvfork {

ExpectedTensor LayerTensor(int64_t layer, TensorRole role, const char* hf_suffix,
                           const char* gguf_suffix, std::vector<int64_t> shape, bool is_vector) {
  ExpectedTensor t;
  t.name = "model.layers." + std::to_string(layer) + "." + hf_suffix;
  t.gguf_name = "blk." + std::to_string(layer) + "." + gguf_suffix;
  t.shape = std::move(shape);
  t.is_vector = is_vector;
  t.role = role;
  t.layer = layer;
  return t;
}

const std::vector<const ArchSpec*>& Architectures() {
  static const std::vector<const ArchSpec*> all = {&LlamaArch(), &Qwen2Arch(), &Qwen3Arch(),
                                                   &SmolLM3Arch(), &Phi3Arch(), &MistralArch(),
                                                   &Gemma3Arch(),  &Qwen3MoeArch()};
  return all;
}

const ArchSpec& ArchFor(Architecture arch) {
  for (const ArchSpec* a : Architectures())
    if (a->id == arch) return *a;
  return LlamaArch();  // unreachable: every Architecture value has a spec
}

const ArchSpec* ArchForHfName(const std::string& hf_name) {
  for (const ArchSpec* a : Architectures())
    if (hf_name == a->hf_name) return a;
  return nullptr;
}

const ArchSpec* ArchForGgufName(const std::string& gguf_name) {
  for (const ArchSpec* a : Architectures())
    if (gguf_name == a->gguf_name) return a;
  return nullptr;
}

const ArchSpec* ArchForModelType(const std::string& model_type) {
  for (const ArchSpec* a : Architectures())
    if (model_type == a->ModelType()) return a;
  return nullptr;
}

std::string SupportedArchNames(bool gguf) {
  std::string s;
  for (const ArchSpec* a : Architectures()) {
    if (gguf && ArchForGgufName(a->gguf_name) != a) continue;  // listed once
    s += (s.empty() ? "" : ", ") + std::string(gguf ? a->gguf_name : a->hf_name);
  }
  return s;
}

}  // namespace kvfork
