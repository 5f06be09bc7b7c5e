#!/bin/sh
# The `kvfork quantize` binary end to end: flag errors name the flag or the
# path and exit 1; a tiny model directory becomes a GGUF file; that file,
# already quantized, is refused. (The bytes themselves are checked against
# llama-quantize in tests/model/llamacpp/quantize_llamacpp_test.cc.)
set -u
KVFORK=${KVFORK_BIN:?}
DIR=${KVFORK_BUILD_DIR:?}/test-data/quantize_cli
TOKENIZER=${KVFORK_CACHE_DIR:?}/npm/tokenizer-qwen3/package/models
rm -rf "$DIR" && mkdir -p "$DIR"
fail() { echo "FAIL: $*"; exit 1; }

"$KVFORK" quantize --help >"$DIR/help.txt" || fail "--help exited $?"
grep -q "q4_k_m" "$DIR/help.txt" || fail "--help does not list q4_k_m"

"$KVFORK" quantize --model "$DIR" --type q3_k_m --out "$DIR/x.gguf" 2>"$DIR/err.txt" && fail "bad --type accepted"
grep -q -- "--type must be one of" "$DIR/err.txt" || fail "bad --type: $(cat "$DIR/err.txt")"

"$KVFORK" quantize --model "$DIR/absent" --type q8_0 --out "$DIR/x.gguf" 2>"$DIR/err.txt" && fail "missing model accepted"
grep -q "$DIR/absent" "$DIR/err.txt" || fail "missing model not named: $(cat "$DIR/err.txt")"

"$KVFORK" make-model --out "$DIR/model" --dtype f32 --tokenizer "$TOKENIZER" >/dev/null 2>&1 || fail "make-model"
"$KVFORK" quantize --model "$DIR/model" --type Q8_0 --out "$DIR/q8_0.gguf" 2>"$DIR/out.txt" || fail "quantize: $(cat "$DIR/out.txt")"
grep -q "wrote $DIR/q8_0.gguf (q8_0" "$DIR/out.txt" || fail "no summary: $(cat "$DIR/out.txt")"
[ -s "$DIR/q8_0.gguf" ] || fail "no output file"

"$KVFORK" quantize --model "$DIR/q8_0.gguf" --type q4_0 --out "$DIR/twice.gguf" 2>"$DIR/err.txt" && fail "requantizing accepted"
grep -q "is stored as q8_0" "$DIR/err.txt" || fail "requantize error: $(cat "$DIR/err.txt")"
echo "quantize_cli_test: ok"
