#!/usr/bin/env python3
"""Nebula's tokenizers against the `tokenizers` library and `transformers`' fast tokenizers.

    tokenizer_ref.py check NEBULA_TEST_BIN NEBULA_TRAIN_BIN WORKDIR
    tokenizer_ref.py bench NEBULA_TEST_BIN WORKDIR       (encoding speed, side by side)

check: byte-level BPE trained by `tokenizers` on Debian's licence texts (all but the
held-out ones) and saved as vocab.json + merges.txt and as tokenizer.json; Nebula's ids
for every line of the held-out corpus (two licences plus lines of Unicode, white space
runs and special tokens) must equal the library's and GPT2TokenizerFast's, and every
line must decode back to itself. Then the same for a vocabulary Nebula trains
(`nebula-train prepare --tokenizer bpe`), loaded by `tokenizers`; then WordPiece:
BertWordPieceTokenizer's vocab.txt against BertTokenizerFast (uncased, and cased via
tokenizer_config.json) and its tokenizer.json.
"""
import json
import os
import subprocess
import sys

LICENSES = "/usr/share/common-licenses"
HELD_OUT = ["GPL-3", "LGPL-2.1"]

# Lines that exercise the pre-tokenisation: Unicode letters and numbers, white space
# runs (the \s+(?!\S) rule), contractions, tabs, CJK, emoji, combining marks, the white
# space characters outside ASCII, U+180E (not White_Space), specials inside words.
TRICKY = [
    "Hello, world! It's a test: we'll see, they've done, I'm here, you'd go, she's ok.",
    "   leading spaces and trailing   ",
    "tabs\tand\t\tmore\t tabs and  double  spaces   triple",
    "numbers 123 4567 3.14159 1,000,000 and ²³ ½ Ⅻ ٣",
    "Ünïcödé façade naïve coöperate résumé Ångström",
    "日本語のテキストと中文文本 한국어 текст на русском ελληνικά",
    "emoji 😀🎉👍🏽 and symbols ™ © ® € £ ¥ § ¶ †",
    "combining e\u0301 a\u0308 o\u0302 and NBSP\u00a0here, ideographic\u3000space, en\u2002space",
    "mongolian\u180evowel separator, line\u2028separator, NEL\u0085there",
    "special <|endoftext|> token and<|endoftext|>glued<|endoftext|>",
    "apostrophes 'quoted' ''double'' it's IT'S don't DON'T",
    "",
    "         ",
    "a\u200bzero width\u200cjoiner\u200dend \ufeffbom",
    "mixed العربية עברית हिन्दी ไทย",
    "[CLS] fill [MASK] here [SEP] and [UNK] [PAD]",
    "URL https://example.com/path?q=1&r=2#frag and e-mail someone@example.org",
    "code: int main(void) { return x->y[0] * 2 + z; } // comment",
    "MiXeD CaSe WoRdS and UPPER lower Title",
    "İstanbul straße ǅ ﬁ ligature",
    "-" * 3000 + " " + "ab" * 1500 + " " + "1234567890" * 300,  # pre-tokens of thousands of bytes
]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def nebula_encode(test_bin, path, corpus):
    out = run([test_bin, "encode", path, corpus]).stdout.split("\n")
    return [[int(x) for x in line.split()] for line in out[:-1]]


def held_out_corpus(workdir):
    lines = []
    for name in HELD_OUT:
        with open(os.path.join(LICENSES, name), encoding="utf-8") as f:
            lines += f.read().split("\n")
    lines += TRICKY
    path = os.path.join(workdir, "held-out.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return path, lines


def train_files():
    return sorted(os.path.join(LICENSES, n) for n in os.listdir(LICENSES)
                  if n not in HELD_OUT and not os.path.islink(os.path.join(LICENSES, n)))


def compare(what, got, want, lines):
    bad = [i for i in range(len(lines)) if got[i] != want[i]]
    if len(got) != len(want) or bad:
        i = bad[0] if bad else 0
        print(f"FAIL {what}: {len(bad)} of {len(lines)} lines differ; first: line {i} {lines[i]!r}\n"
              f"     nebula {got[i] if i < len(got) else None}\n     ref    {want[i]}")
        return 1
    print(f"ok   {what}: all {len(lines)} lines equal ({sum(len(x) for x in want)} tokens)")
    return 0


def check(test_bin, train_bin, workdir):
    from tokenizers import ByteLevelBPETokenizer, BertWordPieceTokenizer, Tokenizer
    from transformers import GPT2TokenizerFast, BertTokenizerFast

    corpus, lines = held_out_corpus(workdir)
    fails = 0

    # 1. byte-level BPE trained by the tokenizers library
    lib = os.path.join(workdir, "bpe-lib")
    os.makedirs(lib, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train(train_files(), vocab_size=2000, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(lib)
    bpe.save(os.path.join(lib, "tokenizer.json"))
    ref_json = Tokenizer.from_file(os.path.join(lib, "tokenizer.json"))
    want = [ref_json.encode(line).ids for line in lines]
    fails += compare("BPE tokenizer.json vs tokenizers", nebula_encode(test_bin, os.path.join(lib, "tokenizer.json"), corpus),
                     want, lines)
    fast = GPT2TokenizerFast(vocab_file=os.path.join(lib, "vocab.json"), merges_file=os.path.join(lib, "merges.txt"))
    want_fast = [fast.encode(line) for line in lines]
    fails += compare("BPE vocab.json + merges.txt vs GPT2TokenizerFast",
                     nebula_encode(test_bin, os.path.join(lib, "merges.txt"), corpus), want_fast, lines)

    # 2. a vocabulary Nebula trains, read by the tokenizers library
    neb = os.path.join(workdir, "bpe-nebula")
    run([train_bin, "prepare", neb, *train_files(), "--tokenizer", "bpe", "--vocab-size", "2000"])
    ref = ByteLevelBPETokenizer(os.path.join(neb, "vocab.json"), os.path.join(neb, "merges.txt"))
    ref.add_special_tokens(["<|endoftext|>"])
    with open(os.path.join(neb, "vocab.json"), encoding="utf-8") as f:
        size = len(json.load(f))
    if size != 2000:
        print(f"FAIL Nebula's trained vocabulary has {size} tokens, not 2000")
        fails += 1
    fails += compare("BPE trained by Nebula vs tokenizers", nebula_encode(test_bin, neb, corpus),
                     [ref.encode(line).ids for line in lines], lines)

    # 2b. added tokens with the library's options (lstrip, rstrip, single_word, normalized
    # matched after the others), a prefix space, and ignore_merges with a long entry
    from tokenizers import AddedToken
    opt = os.path.join(workdir, "bpe-options")
    os.makedirs(opt, exist_ok=True)
    o = ByteLevelBPETokenizer(add_prefix_space=True)
    o.train(train_files(), vocab_size=800, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False)
    o.add_special_tokens([AddedToken("<mask>", lstrip=True), AddedToken("</s>", rstrip=True),
                          AddedToken("[SW]", single_word=True)])
    o.add_tokens([AddedToken("ab", normalized=True), AddedToken("bc", normalized=False)])
    o.save(os.path.join(opt, "tokenizer.json"))
    with open(os.path.join(opt, "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    j["model"]["ignore_merges"] = True
    nv = len(j["model"]["vocab"])  # the long entry takes the next model id; added tokens above it move up one
    for t in j["added_tokens"]:
        t["id"] += t["id"] >= nv
    j["model"]["vocab"]["\u0120" + "a" * 100] = nv
    with open(os.path.join(opt, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    ref_opt = Tokenizer.from_file(os.path.join(opt, "tokenizer.json"))
    extra = ["a <mask> b  <mask>c", "x</s>   \t y </s>z", "a[SW]b [SW] c [SW]", "abc xabcx bc ab", "a" * 100,
             "b" + "a" * 100, "<mask></s>[SW]"]
    opt_corpus = os.path.join(workdir, "options.txt")
    with open(opt_corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(lines + extra))
    fails += compare("BPE with added-token options, a prefix space, ignore_merges vs tokenizers",
                     nebula_encode(test_bin, os.path.join(opt, "tokenizer.json"), opt_corpus),
                     [ref_opt.encode(line).ids for line in lines + extra], lines + extra)

    # 3. WordPiece: uncased and cased vocab.txt, and tokenizer.json
    for cased in (False, True):
        wp = os.path.join(workdir, "wp-cased" if cased else "wp-uncased")
        os.makedirs(wp, exist_ok=True)
        wpt = BertWordPieceTokenizer(lowercase=not cased)
        wpt.train(train_files(), vocab_size=3000, min_frequency=2, show_progress=False)
        wpt.save_model(wp)
        wpt.save(os.path.join(wp, "tokenizer.json"))
        with open(os.path.join(wp, "tokenizer_config.json"), "w") as f:
            json.dump({"do_lower_case": not cased}, f)
        fastwp = BertTokenizerFast(vocab_file=os.path.join(wp, "vocab.txt"), do_lower_case=not cased)
        label = "cased" if cased else "uncased"
        fails += compare(f"WordPiece vocab.txt ({label}) vs BertTokenizerFast",
                         nebula_encode(test_bin, os.path.join(wp, "vocab.txt"), corpus),
                         [fastwp.encode(line, add_special_tokens=False) for line in lines], lines)
        tj = Tokenizer.from_file(os.path.join(wp, "tokenizer.json"))
        tj.post_processor = None
        fails += compare(f"WordPiece tokenizer.json ({label}) vs tokenizers",
                         nebula_encode(test_bin, os.path.join(wp, "tokenizer.json"), corpus),
                         [tj.encode(line, add_special_tokens=False).ids for line in lines], lines)
    return fails


def bench_text(limit=8 << 20):
    """Debian's copyright files (distinct text, unlike the licences repeated), valid UTF-8, up to limit bytes."""
    import glob
    parts, n = [], 0
    for name in sorted(glob.glob("/usr/share/doc/*/copyright")):
        try:
            with open(name, encoding="utf-8") as f:
                t = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(t)
        n += len(t.encode())
        if n >= limit:
            break
    return "".join(parts)


def bench(test_bin, workdir):
    """Encoding speed of one thread, Nebula and the tokenizers library on the same text and
    vocabulary (8000 tokens trained on the licences): the text as one string, and as
    lines through encode_batch (how the library is fed in practice). Medians of 3."""
    import time
    from tokenizers import ByteLevelBPETokenizer, Tokenizer
    lib = os.path.join(workdir, "bpe-bench")
    os.makedirs(lib, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train(train_files(), vocab_size=8000, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save(os.path.join(lib, "tokenizer.json"))
    text = bench_text()
    path = os.path.join(workdir, "bench.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    nb = len(text.encode())
    lines = text.split("\n")

    def median(fn):
        times = []
        for _ in range(3):
            tok = Tokenizer.from_file(os.path.join(lib, "tokenizer.json"))
            t0 = time.perf_counter()
            out = fn(tok)
            times.append(time.perf_counter() - t0)
        return sorted(times)[1], out

    t_whole, ids = median(lambda tok: tok.encode(text).ids)
    t_lines, _ = median(lambda tok: tok.encode_batch(lines))
    neb = json.loads(run([test_bin, "bench", os.path.join(lib, "tokenizer.json"), path]).stdout)
    same = neb["tokens"] == len(ids)
    print(json.dumps({"bytes": nb, "tokens": len(ids), "nebula_mb_s": round(neb["mb_per_s"], 2),
                      "tokenizers_whole_mb_s": round(nb / t_whole / 1e6, 2),
                      "tokenizers_batch_mb_s": round(nb / t_lines / 1e6, 2),
                      "ratio_vs_batch": round(neb["mb_per_s"] / (nb / t_lines / 1e6), 2), "same_token_count": same}))
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "check":
        n = check(sys.argv[2], sys.argv[3], sys.argv[4])
        print("PASS" if n == 0 else f"FAIL: {n} comparison(s)")
        sys.exit(1 if n else 0)
    if len(sys.argv) == 4 and sys.argv[1] == "bench":
        os.environ["RAYON_NUM_THREADS"] = "1"  # one thread, before the library starts its pool
        sys.exit(bench(sys.argv[2], sys.argv[3]))
    print(__doc__)
    sys.exit(2)
