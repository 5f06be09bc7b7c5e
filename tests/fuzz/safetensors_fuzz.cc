#include <cstdint>

#include "fuzz/fuzz_targets.h"
#include "model/safetensors.h"

namespace kvfork::fuzz {

void FuzzSafetensors(std::string_view input) {
  static const char* kFiles[] = {"model.safetensors", "model.safetensors.index.json",
                                 "model-00001-of-00002.safetensors",
                                 "model-00002-of-00002.safetensors"};
  for (const char* f : kFiles) RemoveScratchFile(f);
  std::vector<std::string> parts = SplitParts(input);
  if (parts.size() == 1) {
    WriteScratchFile("model.safetensors", parts[0]);
  } else {
    for (size_t i = 0; i < parts.size() && i < 3; ++i) WriteScratchFile(kFiles[i + 1], parts[i]);
  }
  StatusOr<std::unique_ptr<SafetensorsCheckpoint>> ckpt = SafetensorsCheckpoint::Open(ScratchDir());
  if (!ckpt.ok()) {
    KVFORK_CHECK(!ckpt.status().message().empty());
    return;
  }
  // Every accepted tensor must lie inside its mapping: read all of its bytes
  // (a bad offset faults here) and check the size against shape * dtype.
  uint64_t sum = 0, total = 0;
  for (const auto& [name, t] : (*ckpt)->tensors()) {
    KVFORK_CHECK(t.name == name);
    KVFORK_CHECK(t.num_bytes == static_cast<size_t>(*t.NumElements()) * DTypeSize(t.dtype));
    for (size_t i = 0; i < t.num_bytes; ++i) sum += t.data[i];
    total += t.num_bytes;
    KVFORK_CHECK(!t.ShapeString().empty());
  }
  KVFORK_CHECK(sum <= 255 * total);  // keeps the reads
}

}  // namespace kvfork::fuzz
