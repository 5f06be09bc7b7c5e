"""Byte-level BPE tokenizer: training, encoding, and the Hugging Face files.

The tokenizer is configured exactly as Qwen2/Qwen3's tokenizer.json (NFC normalizer,
Qwen2's Split regex, ByteLevel without its own regex, ByteLevel decoder), so kvfork's
tokenizer loads it unchanged and `export-gguf` writes it as tokenizer.ggml.pre = qwen2.
Python's `re` has no \\p{L}; the classes are spelled out from unicodedata so the regex
matches what PCRE2 (kvfork) and Oniguruma/fancy-regex (Hugging Face) match.
"""
import heapq
import json
import re
import sys
import unicodedata

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Qwen2's pre-tokenizer regex as published in its tokenizer.json.
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _class_of(prefix):
    """Character-class body of every code point whose general category starts with prefix."""
    ranges, start, prev = [], None, None
    for cp in range(sys.maxunicode + 1):
        if unicodedata.category(chr(cp)).startswith(prefix):
            if start is None:
                start = cp
            prev = cp
        elif start is not None:
            ranges.append((start, prev))
            start = None
    if start is not None:
        ranges.append((start, prev))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                   for a, b in ranges)


# PCRE2's \s with Unicode properties: Unicode White_Space (Python's str.isspace differs on
# U+001C..U+001F, which it counts as space).
_SPACE = r"\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def _python_regex():
    """QWEN2_REGEX spelled with explicit classes (L letters, N numbers, S spaces)."""
    L, N, S = _class_of("L"), _class_of("N"), _SPACE
    return re.compile(
        rf"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n{L}{N}]?[{L}]+|[{N}]|"
        rf" ?[^{S}{L}{N}]+[\r\n]*|[{S}]*[\r\n]+|[{S}]+(?![^{S}])|[{S}]+")


_PRE = None


def pre_tokenize(text):
    global _PRE
    if _PRE is None:
        _PRE = _python_regex()
    return _PRE.findall(text)


def bytes_to_unicode():
    """GPT-2's map from bytes to printable characters (the alphabet of tokenizer.json)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def split_special(text):
    """Yields (is_special, piece): special tokens are found in the raw text first."""
    pattern = "(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")"
    for i, part in enumerate(re.split(pattern, text)):
        if part:
            yield i % 2 == 1, part


def train(texts, vocab_size, log=print):
    """Trains merges on the texts (specials removed); returns (tokens as bytes, merges)."""
    counts = {}
    for text in texts:
        for special, part in split_special(text):
            if special:
                continue
            for piece in pre_tokenize(unicodedata.normalize("NFC", part)):
                counts[piece] = counts.get(piece, 0) + 1
    tokens = [bytes([b]) for b in range(256)]
    token_id = {t: i for i, t in enumerate(tokens)}
    words = [list(p.encode("utf-8")) for p in counts]
    freq = list(counts.values())
    pair_count, where = {}, {}
    for w, (syms, f) in enumerate(zip(words, freq)):
        for a, b in zip(syms, syms[1:]):
            pair_count[(a, b)] = pair_count.get((a, b), 0) + f
            where.setdefault((a, b), set()).add(w)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges, merged_pairs = [], set()
    target = vocab_size - len(SPECIAL_TOKENS)
    while len(tokens) < target and heap:
        c, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -c or c == 0:
            continue  # stale entry
        a, b = pair
        merged = tokens[a] + tokens[b]
        new = token_id.get(merged)
        if new is None:
            new = len(tokens)
            tokens.append(merged)
            token_id[merged] = new
        if pair not in merged_pairs:  # a token reached twice could meet b again
            merged_pairs.add(pair)
            merges.append((a, b))
        changed = {}
        for w in where.pop(pair, ()):
            syms, f = words[w], freq[w]
            i, out = 0, []
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            if len(out) == len(syms):
                continue
            for p in zip(syms, syms[1:]):
                pair_count[p] -= f
                changed[p] = True
            for p in zip(out, out[1:]):
                pair_count[p] = pair_count.get(p, 0) + f
                where.setdefault(p, set()).add(w)
                changed[p] = True
            words[w] = out
        pair_count.pop(pair, None)
        for p in changed:
            if p != pair and pair_count.get(p, 0) > 0:
                heapq.heappush(heap, (-pair_count[p], p))
        if len(merges) % 500 == 0:
            log(f"bpe: {len(merges)} merges, vocab {len(tokens)}")
    return tokens, merges


class Tokenizer:
    """Encodes as Hugging Face's BPE does: lowest-rank adjacent pair first, leftmost first."""

    def __init__(self, tokens, merges):
        self.tokens = tokens
        self.id_of = {t: i for i, t in enumerate(tokens)}
        self.special = {t: len(tokens) + i for i, t in enumerate(SPECIAL_TOKENS)}
        self.rank = {}
        for r, (a, b) in enumerate(merges):
            self.rank.setdefault((a, b), r)
        self.merges = merges
        self.cache = {}

    @property
    def vocab_size(self):
        return len(self.tokens) + len(SPECIAL_TOKENS)

    def _bpe(self, piece):
        ids = self.cache.get(piece)
        if ids is not None:
            return ids
        syms = list(piece.encode("utf-8"))
        while len(syms) > 1:
            best, at = None, -1
            for i in range(len(syms) - 1):
                r = self.rank.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            a, b = self.merges[best]
            merged = self.id_of[self.tokens[a] + self.tokens[b]]
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        if len(self.cache) < 200000:
            self.cache[piece] = syms
        return syms

    def encode(self, text):
        ids = []
        for special, part in split_special(text):
            if special:
                ids.append(self.special[part])
                continue
            for piece in pre_tokenize(unicodedata.normalize("NFC", part)):
                ids.extend(self._bpe(piece))
        return ids

    def decode(self, ids):
        out = b"".join(self.tokens[i] if i < len(self.tokens)
                       else SPECIAL_TOKENS[i - len(self.tokens)].encode() for i in ids)
        return out.decode("utf-8", errors="replace")

    def to_json(self):
        alphabet = bytes_to_unicode()
        def spell(t):
            return "".join(alphabet[b] for b in t)
        added = [{"id": self.special[t], "content": t, "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": True} for t in SPECIAL_TOKENS]
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                 "use_regex": False}]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                        "use_regex": False},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": "", "end_of_word_suffix": "",
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {spell(t): i for i, t in enumerate(self.tokens)},
                      "merges": [f"{spell(self.tokens[a])} {spell(self.tokens[b])}"
                                 for a, b in self.merges]},
        }

    @staticmethod
    def from_json(path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        inverse = {c: b for b, c in bytes_to_unicode().items()}
        vocab = data["model"]["vocab"]
        tokens = [None] * len(vocab)
        for s, i in vocab.items():
            tokens[i] = bytes(inverse[c] for c in s)
        id_of = {t: i for i, t in enumerate(tokens)}
        merges = []
        for m in data["model"]["merges"]:
            a, b = m.split(" ")
            merges.append((id_of[bytes(inverse[c] for c in a)], id_of[bytes(inverse[c] for c in b)]))
        return Tokenizer(tokens, merges)


# ChatML as Qwen3 writes it, without its tool and thinking branches (this model has neither).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tokenizer_config():
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 1024,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {},
    }
