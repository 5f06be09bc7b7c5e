#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

namespace kvfork {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

namespace {

// Per-thread scratch: match data with room for any capture count we need
// (only group 0 is read) and a JIT stack larger than the 32 KiB default so
// long whitespace runs never exhaust it.
struct ThreadScratch {
  pcre2_match_data* match_data = pcre2_match_data_create(32, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadScratch() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~ThreadScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
};

ThreadScratch& Scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

}  // namespace

Regex::Regex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

StatusOr<Regex> Regex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error, buffer, sizeof(buffer));
    return InvalidArgumentError("invalid regex '" + std::string(pattern) + "' at offset " +
                                std::to_string(offset) + ": " +
                                reinterpret_cast<const char*>(buffer));
  }
  auto impl = std::make_unique<Impl>();
  impl->code = code;
  // JIT is an optimisation: a pattern it cannot compile still runs interpreted.
  impl->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return Regex(std::move(impl));
}

StatusOr<Regex> Regex::CompileLiteral(std::string_view literal) {
  std::string quoted = "\\Q";
  for (size_t i = 0; i < literal.size(); ++i) {
    // \E inside \Q...\E would end the quote early; split it.
    if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'E') {
      quoted += "\\E\\\\\\Q";
      continue;
    }
    quoted.push_back(literal[i]);
  }
  quoted += "\\E";
  return Compile(quoted);
}

void Regex::FindAll(std::string_view text,
                    std::vector<std::pair<size_t, size_t>>* matches) const {
  ThreadScratch& scratch = Scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0;
  while (pos <= n) {
    const int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, n, pos, 0,
                                                scratch.match_data, scratch.context)
                              : pcre2_match(impl_->code, subject, n, pos, 0, scratch.match_data,
                                            scratch.context);
    if (rc < 0 && rc != 0) break;  // PCRE2_ERROR_NOMATCH or a resource limit
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.match_data);
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      matches->emplace_back(begin, end);
      pos = end;
    } else {
      // Empty match: step over one character (or one invalid byte).
      pos = begin + 1;
      while (pos < n && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace kvfork
