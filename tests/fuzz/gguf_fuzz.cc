#include "engine/model_tokenizer.h"
#include "fuzz/fuzz_targets.h"
#include "model/gguf_checkpoint.h"
#include "model/gguf_config.h"
#include "model/gguf_reader.h"
#include "model/model.h"

namespace kvfork::fuzz {

void FuzzGguf(std::string_view input) {
  const std::string path = WriteScratchFile("model.gguf", input);
  StatusOr<GgufReader> r = GgufReader::Open(path);
  if (!r.ok()) {
    KVFORK_CHECK(!r.status().message().empty());
  } else {
    // Every typed getter on every key: the right type gives a value, the
    // wrong one an error; neither may read outside the value's bytes.
    for (const auto& [key, value] : r->metadata()) {
      KVFORK_CHECK(r->Find(key) != nullptr);
      (void)r->GetU32(key);
      (void)r->GetUInt(key);
      (void)r->GetF32(key);
      (void)r->GetBool(key);
      (void)r->GetString(key);
      (void)r->GetArrayLength(key);
      (void)r->GetStringArray(key);
      (void)r->GetArrayWords(key);
    }
    for (const GgufTensorInfo& t : r->tensors()) {
      KVFORK_CHECK(r->FindTensor(t.name) != nullptr);
      (void)r->ReadTensor(t.name);
    }
  }

  // The tokenizer from the metadata (both gpt2 BPE and llama SentencePiece),
  // for vocabularies small enough to keep the target fast: a tokenizer that
  // loads encodes and decodes without faulting and only gives its own ids.
  if (r.ok()) {
    StatusOr<uint64_t> n = r->GetArrayLength("tokenizer.ggml.tokens");
    if (n.ok() && *n <= 4096) {
      StatusOr<std::unique_ptr<Tokenizer>> tok = LoadModelTokenizer(path);
      if (!tok.ok()) {
        KVFORK_CHECK(!tok.status().message().empty());
      } else {
        for (bool add_special : {false, true}) {
          const std::vector<int32_t> ids =
              (*tok)->Encode(" Hello,  world\n\xe4\xbd\xa0\xff <s></s> <|end|>", add_special);
          for (int32_t id : ids) KVFORK_CHECK(id >= 0 && id < (*tok)->vocab_size());
          (void)(*tok)->Decode(ids, false);
          (void)(*tok)->Decode(ids, true);
        }
      }
    }
  }

  // The model loader: the mmapped tensor source, the config from metadata,
  // and binding. Every tensor Open accepts lies inside its file: touching
  // its first and last byte must not fault.
  StatusOr<std::unique_ptr<GgufCheckpoint>> ck = GgufCheckpoint::Open(path);
  if (!ck.ok()) {
    KVFORK_CHECK(!ck.status().message().empty());
    return;
  }
  unsigned sum = 0;
  for (const auto& [name, t] : (*ck)->tensors()) {
    size_t rows = 1;
    for (size_t d = 0; d + 1 < t.shape.size(); ++d) rows *= static_cast<size_t>(t.shape[d]);
    KVFORK_CHECK(t.num_bytes == rows * RowBytes(t.dtype, t.shape.back()));
    if (t.num_bytes > 0) sum += t.data[0] + t.data[t.num_bytes - 1];
  }
  (void)sum;
  StatusOr<ModelConfig> config = ModelConfigFromGguf(**ck);
  if (!config.ok()) {
    KVFORK_CHECK(!config.status().message().empty());
    return;
  }
  ModelLoadOptions lo;
  lo.show_progress = false;
  StatusOr<std::unique_ptr<Model>> model = Model::Load(path, lo);
  if (!model.ok()) KVFORK_CHECK(!model.status().message().empty());
  // No forward pass: the kernels for block formats are another slice's, and
  // what this target guards is that no file reaches a read outside it.
}

}  // namespace kvfork::fuzz
