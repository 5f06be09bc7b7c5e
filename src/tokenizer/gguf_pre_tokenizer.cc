#include "tokenizer/gguf_pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kvfork {
namespace {

using nlohmann::json;

json SplitRegex(std::string_view regex, std::string_view behavior = "Isolated") {
  return {{"type", "Split"},
          {"pattern", {{"Regex", std::string(regex)}}},
          {"behavior", std::string(behavior)},
          {"invert", false}};
}
// use_regex: GPT-2's pattern, which ByteLevel carries itself.
json ByteLevel(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", use_regex}};
}
json Sequence(std::vector<json> steps) { return {{"type", "Sequence"}, {"pretokenizers", steps}}; }
// Hugging Face's Digits: Rust's char::is_numeric is \p{N}; individual_digits
// isolates each digit, otherwise each run.
json Digits(bool individual) { return SplitRegex(individual ? "\\p{N}" : "\\p{N}+"); }

// The Split regexes of the models' tokenizer.json files, as published.
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek LLM and Coder (their tokenizer.json Split sequence), with the
// code points written as \x{...}: as literal text, editors and tools that
// normalize to NFC turn some range ends (U+1F7D) into other code points.
constexpr std::string_view kDeepseekLlmLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})"
    R"(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})"
    R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
    R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr std::string_view kDeepseekLlmPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr std::string_view kDeepseekCjk =
    R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

struct Family {
  std::vector<std::string_view> names;
  json pre_tokenizer;
  json normalizer;
  bool ignore_merges;
  bool add_bos;
};

const std::vector<Family>& Families() {
  static const std::vector<Family> families = [] {
    const json nfc = {{"type", "NFC"}};
    // Only families whose output is checked against reference ids
    // (tests/tokenizer/gguf_vocab_test.cc; smollm has no vector file but
    // shares StarCoder's configuration).
    std::vector<Family> f;
    f.push_back({{"llama3", "llama-v3", "llama-bpe"},
                 Sequence({SplitRegex(kLlama3Regex), ByteLevel(false)}),
                 nullptr,
                 /*ignore_merges=*/true,
                 /*add_bos=*/true});
    f.push_back(
        {{"qwen2"}, Sequence({SplitRegex(kQwen2Regex), ByteLevel(false)}), nfc, false, false});
    // Qwen3.5 dropped the NFC normalizer.
    f.push_back({{"qwen35"},
                 Sequence({SplitRegex(kQwen35Regex), ByteLevel(false)}),
                 nullptr,
                 false,
                 false});
    f.push_back({{"gpt-2"}, ByteLevel(true), nullptr, false, false});
    // GPT-NeoX's tokenizer (MPT): GPT-2's pattern after NFC.
    f.push_back({{"mpt"}, ByteLevel(true), nfc, false, false});
    f.push_back({{"starcoder", "refact", "smollm"},
                 Sequence({Digits(true), ByteLevel(true)}),
                 nullptr,
                 false,
                 false});
    f.push_back({{"command-r"}, Sequence({Digits(true), ByteLevel(true)}), nfc, false, false});
    // Falcon: Punctuation (ASCII and \p{P}, contiguous runs), ByteLevel,
    // Digits, then three-digit groups.
    f.push_back({{"falcon"},
                 Sequence({SplitRegex(R"([\p{P}!-/:-@\[-`{-~]+)"), ByteLevel(true), Digits(false),
                           SplitRegex("[0-9][0-9][0-9]")}),
                 nullptr,
                 false,
                 false});
    f.push_back({{"deepseek-llm"},
                 Sequence({SplitRegex("[\r\n]"), SplitRegex(kDeepseekLlmLetters),
                           SplitRegex(kDeepseekLlmPunct), SplitRegex("\\s+$"),
                           SplitRegex(kDeepseekCjk), Digits(false), ByteLevel(false)}),
                 nullptr,
                 false,
                 false});
    f.push_back(
        {{"deepseek-coder"},
         Sequence({SplitRegex("[\r\n]"), SplitRegex("\\s?\\p{L}+"), SplitRegex("\\s?\\p{P}+"),
                   SplitRegex(kDeepseekCjk), Digits(true), ByteLevel(false)}),
         nullptr,
         false,
         false});
    return f;
  }();
  return families;
}

}  // namespace

std::vector<std::string> SupportedGgufPreTokenizers() {
  std::vector<std::string> names;
  for (const Family& f : Families())
    for (std::string_view n : f.names) names.emplace_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<GgufPreTokenizer> FindGgufPreTokenizer(std::string_view pre) {
  for (const Family& f : Families()) {
    if (std::find(f.names.begin(), f.names.end(), pre) == f.names.end()) continue;
    return GgufPreTokenizer{f.pre_tokenizer.dump(), f.normalizer.dump(), f.ignore_merges,
                            f.add_bos};
  }
  std::string supported;
  for (const std::string& n : SupportedGgufPreTokenizers())
    supported += (supported.empty() ? "" : ", ") + n;
  return UnimplementedError("tokenizer.ggml.pre \"" + std::string(pre) +
                            "\" is not a supported pre-tokenizer (supported: " + supported + ")");
}

}  // namespace kvfork
