#include "tokenizer/pre_tokenizer.h"

#include <memory>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/scratch_vector.h"

namespace kvfork {
namespace {

// openai/gpt-2 encoder.py's pattern, which Hugging Face's ByteLevel
// pre-tokenizer applies when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

StatusOr<PreTokenizer::Behavior> ParseBehavior(const nlohmann::json& json) {
  if (!json.is_string())
    return InvalidArgumentError("pre_tokenizer Split: \"behavior\" must be a string");
  const std::string b = json.get<std::string>();
  if (b == "Removed") return PreTokenizer::Behavior::kRemoved;
  if (b == "Isolated") return PreTokenizer::Behavior::kIsolated;
  if (b == "MergedWithPrevious") return PreTokenizer::Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return PreTokenizer::Behavior::kMergedWithNext;
  if (b == "Contiguous") return PreTokenizer::Behavior::kContiguous;
  return InvalidArgumentError("pre_tokenizer Split: unknown behavior \"" + b + "\"");
}

}  // namespace

Status PreTokenizer::AddSteps(const nlohmann::json& json, PreTokenizer* out) {
  if (!json.is_object() || !json.contains("type") || !json["type"].is_string())
    return InvalidArgumentError("pre_tokenizer: expected an object with a string \"type\"");
  const std::string type = json["type"].get<std::string>();
  if (type == "Sequence") {
    if (!json.contains("pretokenizers") || !json["pretokenizers"].is_array())
      return InvalidArgumentError("pre_tokenizer Sequence: missing \"pretokenizers\" array");
    for (const auto& p : json["pretokenizers"]) KVFORK_RETURN_IF_ERROR(AddSteps(p, out));
    return OkStatus();
  }
  Step step;
  step.sees_byte_alphabet = out->byte_level_;
  if (type == "Split") {
    step.kind = Step::Kind::kSplit;
    if (!json.contains("pattern") || !json["pattern"].is_object())
      return InvalidArgumentError("pre_tokenizer Split: missing \"pattern\" object");
    const auto& pattern = json["pattern"];
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      KVFORK_ASSIGN_OR_RETURN(Regex re, Regex::Compile(pattern["Regex"].get<std::string>()));
      step.regex = std::make_unique<Regex>(std::move(re));
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      KVFORK_ASSIGN_OR_RETURN(Regex re,
                              Regex::CompileLiteral(pattern["String"].get<std::string>()));
      step.regex = std::make_unique<Regex>(std::move(re));
    } else {
      return InvalidArgumentError("pre_tokenizer Split: \"pattern\" needs \"Regex\" or \"String\"");
    }
    KVFORK_ASSIGN_OR_RETURN(step.behavior,
                            ParseBehavior(json.value("behavior", nlohmann::json("Isolated"))));
    if (step.behavior == Behavior::kRemoved) out->removes_text_ = true;
    step.invert = json.value("invert", false);
  } else if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
    step.add_prefix_space = json.value("add_prefix_space", true);
    if (json.value("use_regex", true)) {
      KVFORK_ASSIGN_OR_RETURN(Regex re, Regex::Compile(kGpt2Pattern));
      step.regex = std::make_unique<Regex>(std::move(re));
    }
    out->byte_level_ = true;
  } else {
    return UnimplementedError("pre_tokenizer type \"" + type + "\" is not supported");
  }
  out->steps_.push_back(std::move(step));
  return OkStatus();
}

StatusOr<PreTokenizer> PreTokenizer::FromJson(const nlohmann::json& json) {
  PreTokenizer p;
  if (json.is_null()) return p;
  KVFORK_RETURN_IF_ERROR(AddSteps(json, &p));
  return p;
}

// Hugging Face's NormalizedString::split: matches and the gaps between them,
// then combined per behavior.
void PreTokenizer::ApplySplit(const Step& step, std::string_view piece,
                              std::vector<std::string_view>* out) {
  thread_local std::vector<std::pair<size_t, size_t>> found;
  found.clear();
  step.regex->FindAll(piece, &found);
  struct Seg {
    size_t begin, end;
    bool match;
  };
  thread_local std::vector<Seg> segs;
  segs.clear();
  size_t prev = 0;
  for (const auto& [b, e] : found) {
    if (b > prev) segs.push_back({prev, b, step.invert});
    segs.push_back({b, e, !step.invert});
    prev = e;
  }
  if (prev < piece.size()) segs.push_back({prev, piece.size(), step.invert});

  const size_t first = out->size();
  auto view = [&](size_t b, size_t e) { return piece.substr(b, e - b); };
  switch (step.behavior) {
    case Behavior::kIsolated:
      for (const Seg& s : segs) out->push_back(view(s.begin, s.end));
      break;
    case Behavior::kRemoved:
      for (const Seg& s : segs)
        if (!s.match) out->push_back(view(s.begin, s.end));
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      std::vector<std::pair<size_t, size_t>> acc;
      for (const Seg& s : segs) {
        if (s.match && !previous_match && !acc.empty()) {
          acc.back().second = s.end;
        } else {
          acc.emplace_back(s.begin, s.end);
        }
        previous_match = s.match;
      }
      for (auto [b, e] : acc) out->push_back(view(b, e));
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      std::vector<std::pair<size_t, size_t>> acc;
      for (size_t i = segs.size(); i-- > 0;) {
        const Seg& s = segs[i];
        if (s.match && !previous_match && !acc.empty()) {
          acc.back().first = s.begin;
        } else {
          acc.emplace_back(s.begin, s.end);
        }
        previous_match = s.match;
      }
      for (size_t i = acc.size(); i-- > 0;) out->push_back(view(acc[i].first, acc[i].second));
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      std::vector<std::pair<size_t, size_t>> acc;
      for (const Seg& s : segs) {
        if (s.match == previous_match && !acc.empty()) {
          acc.back().second = s.end;
        } else {
          acc.emplace_back(s.begin, s.end);
        }
        previous_match = s.match;
      }
      for (auto [b, e] : acc) out->push_back(view(b, e));
      break;
    }
  }
  // Empty pieces are dropped, as Hugging Face does after every split.
  size_t w = first;
  for (size_t r = first; r < out->size(); ++r)
    if (!(*out)[r].empty()) (*out)[w++] = (*out)[r];
  out->resize(w);
  ReleaseLargeScratch(&found);
  ReleaseLargeScratch(&segs);
}

// The split of the piece's alphabet spelling, cut back into raw bytes: each
// alphabet character is one byte, so every cut falls between bytes.
void PreTokenizer::ApplySplitToAlphabet(const Step& step, std::string_view piece,
                                        std::vector<std::string_view>* out) {
  const std::string spelled = ByteLevelEncode(piece);
  std::vector<uint32_t> raw_offset(spelled.size() + 1, 0);
  for (size_t i = 0, raw = 0; i < spelled.size(); ++raw) {
    const size_t len = (static_cast<uint8_t>(spelled[i]) < 0x80) ? 1 : 2;  // U+0021..U+0143
    raw_offset[i] = static_cast<uint32_t>(raw);
    i += len;
    raw_offset[i] = static_cast<uint32_t>(raw + 1);
  }
  std::vector<std::string_view> parts;
  ApplySplit(step, spelled, &parts);
  for (std::string_view p : parts) {
    const size_t b = raw_offset[static_cast<size_t>(p.data() - spelled.data())];
    const size_t e = raw_offset[static_cast<size_t>(p.data() - spelled.data()) + p.size()];
    out->push_back(piece.substr(b, e - b));
  }
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* pieces,
                         std::deque<std::string>* arena) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : current) {
      if (step.kind == Step::Kind::kByteLevel && step.add_prefix_space && piece.front() != ' ') {
        std::string& spaced = arena->emplace_back(piece.size() + 1, ' ');
        piece.copy(spaced.data() + 1, piece.size());
        piece = spaced;
      }
      if (step.regex != nullptr && step.sees_byte_alphabet) {
        ApplySplitToAlphabet(step, piece, &next);
      } else if (step.regex != nullptr) {
        ApplySplit(step, piece, &next);
      } else {
        next.push_back(piece);
      }
    }
    current.swap(next);
  }
  pieces->insert(pieces->end(), current.begin(), current.end());
}

}  // namespace kvfork
