#include "model/gguf_quantize.h"

#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "kernels/quantize_row.h"
#include "model/gguf_reader.h"
#include "model/arch.h"
#include "model/model_config.h"

namespace kvfork {
namespace {

constexpr uint32_t kQuantizationVersion = 2;  // GGML_QNT_VERSION

// Keys a quantized single file must not carry over from its source.
bool DroppedKey(const std::string& key) {
  // Split keys describe the source's files; general.alignment is dropped
  // because GgufWriter aligns to the default 32.
  return key == "split.no" || key == "split.count" || key == "split.tensors.count" ||
         key == "general.alignment";
}

std::vector<std::pair<std::string, GgufValue>> QuantizedFileKeys(QuantizeMix mix) {
  // In llama-quantize's order: quantization_version, then file_type.
  return {{"general.quantization_version", GgufValue::U32(kQuantizationVersion)},
          {"general.file_type", GgufValue::U32(static_cast<uint32_t>(mix))}};
}

// The recipe as GgufExportOptions::tensor_type.
auto RecipeTypeFn(std::shared_ptr<QuantizeRecipe> recipe) {
  return [recipe](const std::string& name, const std::vector<int64_t>& ne, GgmlType current) {
    return recipe->TypeFor(name, ne, current);
  };
}

Status QuantizeDirectory(const std::string& dir, const std::string& out_path,
                         const QuantizeOptions& options) {
  KVFORK_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(dir + "/config.json"));
  QuantizeModelInfo info;
  info.arch = ArchFor(c.arch).gguf_name;  // ExportGguf's names
  info.num_layers = c.num_layers;
  info.num_heads = c.num_heads;
  info.num_kv_heads = c.num_kv_heads;
  info.num_experts = c.num_experts;
  info.has_output = !c.tie_word_embeddings;
  auto recipe = std::make_shared<QuantizeRecipe>(options.mix, info);
  GgufExportOptions export_options = options.export_options;
  export_options.dtype = GgmlType::kF32;  // what a tensor the recipe keeps is written as
  export_options.tensor_type = RecipeTypeFn(recipe);
  export_options.extra_metadata = QuantizedFileKeys(options.mix);
  return ExportGguf(dir, out_path, export_options);
}

float ElementToF32(GgmlType t, const uint8_t* p, int64_t i) {
  if (t == GgmlType::kF32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return t == GgmlType::kBf16 ? Bf16ToF32(h) : F16ToF32(h);
}

Status QuantizeGgufFile(const std::string& path, const std::string& out_path,
                        const QuantizeOptions& options) {
  KVFORK_ASSIGN_OR_RETURN(GgufReader reader, GgufReader::Open(path));
  auto r = std::make_shared<GgufReader>(std::move(reader));
  if (const GgufValue* split = r->Find("split.count"); split != nullptr) {
    auto n = r->GetU32("split.count");
    if (!n.ok() || *n > 1)
      return UnimplementedError(path +
                                ": is one part of a split GGUF (split.count); merge it first "
                                "(llama-gguf-split --merge) or quantize the model directory");
  }
  KVFORK_ASSIGN_OR_RETURN(std::string arch, r->GetString("general.architecture"));
  QuantizeModelInfo info;
  info.arch = arch;
  KVFORK_ASSIGN_OR_RETURN(uint32_t layers, r->GetU32(arch + ".block_count"));
  info.num_layers = layers;
  if (auto v = r->GetU32(arch + ".attention.head_count"); v.ok()) info.num_heads = *v;
  if (auto v = r->GetU32(arch + ".attention.head_count_kv"); v.ok()) info.num_kv_heads = *v;
  if (auto v = r->GetU32(arch + ".expert_count"); v.ok()) info.num_experts = *v;
  info.has_output = r->FindTensor("output.weight") != nullptr;
  auto recipe = std::make_shared<QuantizeRecipe>(options.mix, info);
  auto type_for = RecipeTypeFn(recipe);

  GgufWriter w;
  for (const auto& [key, value] : r->metadata())
    if (!DroppedKey(key)) w.Set(key, value);
  for (const auto& [key, value] : QuantizedFileKeys(options.mix)) w.Set(key, value);

  for (const GgufTensorInfo& t : r->tensors()) {
    const GgmlType current = static_cast<GgmlType>(t.ggml_type);
    if (current != GgmlType::kF32 && current != GgmlType::kF16 && current != GgmlType::kBf16) {
      const DTypeTraits* traits = TraitsForGgmlType(t.ggml_type);
      return InvalidArgumentError(
          path + ": tensor " + t.name + " is stored as " +
          (traits != nullptr ? traits->name : "ggml type " + std::to_string(t.ggml_type)) +
          "; kvfork quantize reads f32, f16 or bf16 weights (requantizing loses accuracy)");
    }
    if (t.ne.empty() || t.ne[0] <= 0)
      return InvalidArgumentError(path + ": tensor " + t.name + " has an empty shape");
    const GgmlType type = type_for(t.name, t.ne, current);
    const std::string name = t.name;
    const int64_t cols = t.ne[0];
    ThreadPool* pool = options.export_options.pool;
    KVFORK_RETURN_IF_ERROR(w.AddTensor(
        t.name, type, t.ne, [r, name, current, type, cols, pool](uint8_t* dst) -> Status {
          KVFORK_ASSIGN_OR_RETURN(std::vector<uint8_t> src, r->ReadTensor(name));
          if (type == current) {
            std::memcpy(dst, src.data(), src.size());
            return OkStatus();
          }
          const size_t in_row_bytes = static_cast<size_t>(cols) * GgmlTypeSize(current);
          const int64_t rows = static_cast<int64_t>(src.size() / in_row_bytes);
          const int64_t bad = QuantizeRows(
              DTypeOfGgml(type), rows, cols,
              [&](int64_t i, float* row) {
                const uint8_t* s = src.data() + static_cast<size_t>(i) * in_row_bytes;
                for (int64_t c = 0; c < cols; ++c) row[c] = ElementToF32(current, s, c);
              },
              dst, pool);
          if (bad >= 0)
            return InvalidArgumentError(
                "row " + std::to_string(bad) +
                " holds a NaN or infinite weight, which cannot be quantized");
          return OkStatus();
        }));
  }
  return w.Write(out_path, options.export_options.progress_label)
      .WithContext("writing " + out_path);
}

}  // namespace

StatusOr<QuantizeSummary> QuantizeModel(const std::string& model, const std::string& out_path,
                                        const QuantizeOptions& options) {
  QuantizeSummary summary;
  std::error_code ec;
  if (!std::filesystem::exists(model, ec))
    return NotFoundError("--model " + model + ": no such directory or GGUF file");
  if (std::filesystem::is_directory(model, ec)) {
    KVFORK_RETURN_IF_ERROR(QuantizeDirectory(model, out_path, options));
  } else {
    KVFORK_RETURN_IF_ERROR(QuantizeGgufFile(model, out_path, options));
  }
  // Counted from the file written, so every tensor is in it.
  KVFORK_ASSIGN_OR_RETURN(GgufReader written, GgufReader::Open(out_path));
  for (const GgufTensorInfo& t : written.tensors())
    ++summary.tensors_by_type[GgmlTypeName(static_cast<GgmlType>(t.ggml_type))];
  summary.file_bytes = std::filesystem::file_size(out_path, ec);
  return summary;
}

}  // namespace kvfork
