#include <memory>

#include "fuzz/fuzz_targets.h"
#include "tokenizer/tokenizer.h"

namespace kvfork::fuzz {

void FuzzTokenizerLoad(std::string_view input) {
  std::vector<std::string> parts = SplitParts(input);
  parts.resize(3);  // missing configs are empty, as Tokenizer::Load passes them
  StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(parts[0], parts[1], parts[2]);
  if (!t.ok()) {
    KVFORK_CHECK(!t.status().message().empty());
    return;
  }
  // A tokenizer that loads must encode and decode anything without faulting,
  // and only produce ids it can decode.
  const Tokenizer& tok = **t;
  const int64_t vocab = tok.vocab_size();
  for (bool add_special : {false, true}) {
    std::vector<int32_t> ids =
        tok.Encode("Hello, world! 123 \xe4\xbd\xa0\xe5\xa5\xbd \xff <|im_end|> <s>", add_special);
    for (int32_t id : ids) {
      KVFORK_CHECK(id >= 0 && id < vocab);
      (void)tok.TokenBytes(id);
      (void)tok.IsSpecial(id);
    }
    for (bool skip : {false, true}) {
      std::string whole = tok.Decode(ids, skip);
      StreamDecoder stream(tok, skip);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.Push(id);
      streamed += stream.Flush();
      KVFORK_CHECK(streamed == whole);
    }
  }
  for (int32_t id : tok.eos_token_ids()) KVFORK_CHECK(id >= 0 && id < vocab);
  if (tok.bos_token_id()) KVFORK_CHECK(*tok.bos_token_id() >= 0 && *tok.bos_token_id() < vocab);
}

}  // namespace kvfork::fuzz
