"""Builds the training corpus from openly licensed English text in Debian packages.

Sources (CORPUS.md lists packages and licences):
  - King James Bible (bible-kjv-text), read through the `bible` program of bible-kjv.
  - World English Bible (sword-text-web), read straight from its SWORD zText files
    (zlib blocks + two little-endian index files), OSIS markup stripped.
  - fortunes / fortunes-min (the UTF-8 `.u8` cookie files), ascii-art files left out.

Each document is one Bible chapter or one fortune. A document goes to the held-out set
when a hash of its source and name falls in 1 of 20 buckets (5%), so the split is stable
whatever else changes. Writes train.txt, heldout.txt (documents separated by a line
holding only DOC_SEPARATOR) and chat.jsonl (question -> verse pairs from training chapters).
"""
import argparse
import glob
import hashlib
import html
import json
import os
import random
import re
import struct
import subprocess
import zlib

DOC_SEPARATOR = "<|endoftext|>"
HELDOUT_BUCKETS = 20  # 1 of 20 = 5%

KJV_BOOKS = [
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
    "1 Samuel", "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra",
    "Nehemiah", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
    "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
    "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah",
    "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
    "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians",
    "1 Thessalonians", "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon",
    "Hebrews", "James", "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude",
    "Revelation",
]
# The `bible` program prints "Psalms 23" as "Psalm 23" and wants single-word book names.
KJV_QUERY = {"Song of Solomon": "song", "Psalms": "psalms"}

SWORD_WEB = "/usr/share/sword/modules/texts/ztext/engWEB2015eb"
FORTUNE_DIR = "/usr/share/games/fortunes"
FORTUNE_SKIP = {"art", "ascii-art"}  # pictures drawn in characters, not prose


class Chapter:
    def __init__(self, source, book, number):
        self.source, self.book, self.number = source, book, number
        self.verses = []  # (verse number, text)

    def name(self):
        return f"{self.book} {self.number}"

    def text(self):
        lines = [self.name(), ""] + [f"{n} {t}" for n, t in self.verses]
        return "\n".join(lines)


def clean(text):
    """One line of plain text: whitespace runs become a space."""
    return re.sub(r"\s+", " ", text).strip()


def kjv_chapters():
    """Reads the whole KJV through `bible`, one call per book (-l0: no line wrapping)."""
    chapters = []
    for book in KJV_BOOKS:
        query = KJV_QUERY.get(book, book.replace(" ", "").lower())
        out = subprocess.run(["bible", "-l0", f"{query}1:1-999:999"], check=True,
                             capture_output=True, text=True).stdout
        current = None
        for line in out.splitlines():
            header = re.fullmatch(r"(.+?) (\d+)", line.strip())
            verse = re.match(r"\s+(\d+) (.*)", line)
            if verse and current is not None:
                current.verses.append((int(verse.group(1)), clean(verse.group(2))))
            elif header and not line.startswith(" "):
                current = Chapter("kjv", book, int(header.group(2)))
                chapters.append(current)
            elif line.strip() and current is not None and current.verses:
                n, t = current.verses[-1]  # a wrapped continuation line
                current.verses[-1] = (n, clean(t + " " + line))
    return chapters


def sword_entries(testament):
    """Yields every verse-index entry of a SWORD zText testament as raw OSIS text."""
    def read(ext):
        with open(os.path.join(SWORD_WEB, f"{testament}.{ext}"), "rb") as f:
            return f.read()
    bzs, bzv, bzz = read("bzs"), read("bzv"), read("bzz")
    blocks = {}
    for i in range(len(bzv) // 10):
        block, offset, size = struct.unpack_from("<IIH", bzv, i * 10)
        if size == 0:
            yield ""
            continue
        if block not in blocks:
            start, csize, _ = struct.unpack_from("<III", bzs, block * 12)
            blocks[block] = zlib.decompress(bzz[start:start + csize])
        yield blocks[block][offset:offset + size].decode("utf-8")


def osis_to_text(osis):
    """Verse text of an OSIS fragment: notes and titles dropped, other tags removed."""
    osis = re.sub(r"<note\b.*?</note>", "", osis, flags=re.S)
    osis = re.sub(r"<title\b.*?</title>", "", osis, flags=re.S)
    osis = re.sub(r"<[^>]*>", "", osis)
    return clean(html.unescape(osis))


def web_chapters():
    chapters = []
    for testament in ("ot", "nt"):
        book, current = None, None
        for entry in sword_entries(testament):
            name = re.search(r'<milestone n="([^"]+)" type="x-usfm-h"/>', entry)
            if name:
                book = name.group(1)
            chapter = re.search(r'<chapter n="(\d+)"', entry)
            if chapter and book:
                current = Chapter("web", book, int(chapter.group(1)))
                chapters.append(current)
                continue
            if current is None or chapter:
                continue
            text = osis_to_text(entry)
            if text:
                current.verses.append((len(current.verses) + 1, text))
    return [c for c in chapters if c.verses]


def fortunes():
    docs = []
    for path in sorted(glob.glob(os.path.join(FORTUNE_DIR, "*.u8"))):
        name = os.path.basename(path)[:-3]
        if name in FORTUNE_SKIP:
            continue
        with open(path, encoding="utf-8", errors="strict") as f:
            parts = f.read().split("\n%\n")
        for i, part in enumerate(parts):
            text = part.strip("\n%").rstrip()
            if text.strip():
                docs.append((f"fortune/{name}/{i}", text.expandtabs(8)))
    return docs


def is_heldout(key):
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % HELDOUT_BUCKETS == 0


QUESTIONS = [
    "What does {ref} say?",
    "Quote {ref}.",
    "Can you tell me {ref}?",
    "Read me {ref}, please.",
    "What is written in {ref}?",
]
FORTUNE_QUESTIONS = [
    "Tell me a fortune.",
    "Give me a quote.",
    "Say something wise.",
    "Do you have a saying for me?",
    "Share a fortune cookie.",
]


def chat_pairs(chapters, fortune_docs, seed):
    """Question -> reply pairs from training documents only (held-out text stays unseen)."""
    rng = random.Random(seed)
    pairs = []
    for c in chapters:
        for n, t in c.verses:
            q = rng.choice(QUESTIONS).format(ref=f"{c.book} {c.number}:{n}")
            pairs.append({"user": q, "assistant": t})
    for _, text in fortune_docs:
        if len(text) < 400:
            pairs.append({"user": rng.choice(FORTUNE_QUESTIONS), "assistant": text})
    rng.shuffle(pairs)
    return pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    docs = []  # (key, text)
    chapters = kjv_chapters() + web_chapters()
    docs += [(f"{c.source}/{c.name()}", c.text()) for c in chapters]
    fortune_docs = fortunes()
    docs += fortune_docs
    train = [d for d in docs if not is_heldout(d[0])]
    heldout = [d for d in docs if is_heldout(d[0])]
    # Training order is shuffled (seeded) so no source comes in one long run.
    random.Random(args.seed).shuffle(train)

    sep = f"\n{DOC_SEPARATOR}\n"
    for name, part in (("train.txt", train), ("heldout.txt", heldout)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            f.write(sep.join(text for _, text in part) + "\n")
    train_chapters = [c for c in chapters if not is_heldout(f"{c.source}/{c.name()}")]
    train_fortunes = [d for d in fortune_docs if not is_heldout(d[0])]
    with open(os.path.join(args.out, "chat.jsonl"), "w", encoding="utf-8") as f:
        for p in chat_pairs(train_chapters, train_fortunes, args.seed):
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    stats = {
        "kjv_chapters": sum(c.source == "kjv" for c in chapters),
        "web_chapters": sum(c.source == "web" for c in chapters),
        "fortunes": len(fortune_docs),
        "train_docs": len(train), "heldout_docs": len(heldout),
        "train_chars": sum(len(t) for _, t in train),
        "heldout_chars": sum(len(t) for _, t in heldout),
    }
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
