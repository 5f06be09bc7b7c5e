// LlamaForCausalLM (Llama 3.x): the common decoder with nothing extra.
// GQA and llama3 rope scaling are handled by the shared code and
// ModelConfig::RopeInvFreq; attention_bias / mlp_bias are rejected at parse.
#include "model/arch.h"

namespace kvfork {

const ArchSpec& LlamaArch() {
  static const ArchSpec spec = {"LlamaForCausalLM", nullptr, nullptr};
  return spec;
}

const ArchSpec& ArchFor(Architecture arch) {
  return arch == Architecture::kLlama ? LlamaArch() : Qwen3Arch();
}

}  // namespace kvfork
