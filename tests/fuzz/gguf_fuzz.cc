#include "fuzz/fuzz_targets.h"
#include "model/gguf_reader.h"

namespace kvfork::fuzz {

void FuzzGguf(std::string_view input) {
  const std::string path = WriteScratchFile("model.gguf", input);
  StatusOr<GgufReader> r = GgufReader::Open(path);
  if (!r.ok()) {
    KVFORK_CHECK(!r.status().message().empty());
    return;
  }
  // Every typed getter on every key: the right type gives a value, the wrong
  // one an error; neither may read outside the value's bytes.
  for (const auto& [key, value] : r->metadata()) {
    KVFORK_CHECK(r->Find(key) != nullptr);
    (void)r->GetU32(key);
    (void)r->GetF32(key);
    (void)r->GetString(key);
    (void)r->GetArrayLength(key);
    (void)r->GetStringArray(key);
  }
  for (const GgufTensorInfo& t : r->tensors()) {
    KVFORK_CHECK(r->FindTensor(t.name) != nullptr);
    (void)r->ReadTensor(t.name);
  }
}

}  // namespace kvfork::fuzz
