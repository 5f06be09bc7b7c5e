// The fuzz targets: each takes one input (bytes from libFuzzer or a file
// checked in under tests/data/fuzz/<target>/) and drives one parser of
// untrusted input through the project's real code. A target returns normally
// whether the input was accepted or rejected with a Status; it aborts
// (KVFORK_CHECK) only when a property that must hold for every input fails,
// and the sanitizers abort on memory and UB errors.
//
// The same functions run under libFuzzer (fuzz_main.cc, one binary per
// target, `make fuzz`) and in the unit tier (fuzz_regression_test.cc replays
// every checked-in crash and seed), so a crash once found stays fixed.
//
// Inputs that hold several files (a sharded checkpoint, a tokenizer with its
// config) separate them with kFilePartSeparator.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvfork::fuzz {

inline constexpr std::string_view kFilePartSeparator = "\n#kvfork-fuzz-part#\n";

// Splits an input at every kFilePartSeparator.
std::vector<std::string> SplitParts(std::string_view input);

// A directory private to this process (under $TMPDIR or /tmp), created once,
// for targets whose code under test only reads files.
const std::string& ScratchDir();
// Writes bytes to ScratchDir()/name and returns the full path.
std::string WriteScratchFile(const std::string& name, std::string_view bytes);
// Removes ScratchDir()/name if it exists.
void RemoveScratchFile(const std::string& name);

// One part: model.safetensors. Three parts: model.safetensors.index.json and
// the two shards it may name, model-00001-of-00002.safetensors and
// model-00002-of-00002.safetensors. Opens the checkpoint and reads every
// tensor's bytes.
void FuzzSafetensors(std::string_view input);
// config.json text.
void FuzzModelConfig(std::string_view input);
// tokenizer.json [, tokenizer_config.json [, generation_config.json]]; a
// tokenizer that loads then encodes and decodes a fixed text.
void FuzzTokenizerLoad(std::string_view input);
// First byte: which real tokenizer (Qwen3 / Llama 3) and flags; the rest is
// text to encode (round trip and stream decoding checked) or, with bit 1,
// token ids to decode.
void FuzzEncodeDecode(std::string_view input);
// Template source, then the context as JSON (an object, or an array taken as
// the messages).
void FuzzChatTemplate(std::string_view input);
// An HTTP request body, parsed for both /v1/chat/completions and
// /v1/completions, prepared as the server does (template, tokenizer, context
// limits of a real engine on a tiny model) and validated as the engine does.
void FuzzRequestBody(std::string_view input);
// A GGUF file: opened, every key read by its type, every tensor read.
void FuzzGguf(std::string_view input);
// Raw bytes of an HTTP/1.1 request through the server's strict parser (head,
// framing, chunked body) under small limits; the result must not depend on
// how the bytes are split into reads, and no body passes its limit.
void FuzzHttpRequest(std::string_view input);
// Sampling parameters as raw doubles and a logits row (sampling_fuzz.cc has
// the layout): validated as the engine does, then sampled 4 times.
void FuzzSampling(std::string_view input);

}  // namespace kvfork::fuzz
