// The Tokenizer of a GGUF file whose tokenizer.ggml.model is "llama"
// (SentencePiece: Llama 2, Gemma 3, Phi-3, Mistral v1), giving llama.cpp's
// ids (llama_vocab::impl::tokenize, LLAMA_VOCAB_TYPE_SPM):
//
//   1. Control, unknown and user-defined tokens are found in the raw text
//      (AddedTokenMatcher, leftmost-longest); control and unknown ones are
//      special (Encode's `plain` ranges refuse them, Decode can skip them).
//   2. Each stretch of text between them gets a space in front when
//      add_space_prefix is on and it starts the text or follows a token of
//      step 1, has its spaces written "▁", and goes through SpmModel.
//   3. With add_special: bos in front (add_bos_token, default true), eos at
//      the end (add_eos_token, default false).
//
// Decode concatenates each token's text ("▁" as a space, <0xXX> as its
// byte, control and user-defined tokens as written, unused tokens as
// nothing) and, when add_space_prefix is on, drops one space at the start of
// the first token's text: llama.cpp's detokenize, so Decode(Encode(x)) == x
// for a text that does not start with a special token. StreamDecoder decodes
// a continuation and keeps that space, as llama-server streams it.
//
// From llama.cpp's loader: bos/eos/unknown default to ids 1/2/0; tokens
// spelled as an end of generation (<end_of_turn>, <|end|>, </s>, ...) become
// control tokens and join eos_token_ids(); for a file whose general.name
// names Phi-3, special tokens other than <unk>, <s> and <|endoftext|> (and
// the user-defined </s>) swallow the ASCII whitespace after them (rstrip,
// C's isspace as in llama.cpp).
// tokenizer.ggml.remove_extra_whitespaces is read and, as in llama.cpp's
// SPM tokenizer, not applied.
//
// Thread safety: immutable after creation (SpmModel's cache is locked).
#pragma once

#include <memory>

#include "core/status.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace kvfork {

// Errors name the key at fault (the caller adds the file).
StatusOr<std::unique_ptr<Tokenizer>> SpmTokenizerFromGguf(const GgufVocab& vocab);

}  // namespace kvfork
