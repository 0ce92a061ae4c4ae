#!/usr/bin/env python3
"""Token ids of superoffload's native tokenizers against the reference implementations.

Builds tokenizers the way the model families do — byte-level BPE in the styles of GPT-2,
Llama 3 (regex split, ignore_merges, BOS template), Qwen 2 (NFC, its regex, chat tokens), a
digit-splitting variant, the demo's byte tokenizer, and SentencePiece BPE and unigram models
(Llama 2 / Mistral style, byte fallback) — trains them on a small multilingual corpus, then
compares the ids of `tokenize_probe` (superoffload::data::load_tokenizer) with HF
`tokenizers` and `sentencepiece` on varied text: whitespace runs, digits, emoji, CJK,
Arabic, Devanagari, Cyrillic, combining accents, code and special tokens written in text.

    tokenizer_parity.py --probe build/bin/tokenize_probe --demo-model configs/models/tiny-llama
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = """The quick brown fox jumps over the lazy dog. It's 2024; we've seen 3.14159 and 1,000,000 users!
Don't stop — they'll say "I'd rather not", she'd said. Well… OK?!   Multiple   spaces\tand\ttabs.
Der Bär aß 12 Äpfel; façade, naïve, coöperate, déjà vu. Ångström über alles.
Москва — столица России. Привет, мир! Съешь же ещё этих мягких французских булок.
北京是中国的首都。我们在2023年学习了机器学习和深度学习。東京の天気は晴れです。
مرحبا بالعالم! هذه جملة عربية للاختبار، والأرقام ١٢٣ و456.
नमस्ते दुनिया! यह हिंदी का एक वाक्य है। 한국어 문장도 있습니다.
Emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 🇩🇪 ❤️ — and math: ∑_{i=1}^{n} x_i² ≤ ∞.
def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)  # recursion
for (int i = 0; i < 10; ++i) { sum += a[i] * 0x1F; }   // C++
    indented line\n\n\nthree newlines\r\nwindows line end
"""

TEXTS = [
    "Hello world",
    " leading space and trailing space ",
    "Numbers: 0 7 42 123 1234 12345 3.14159 -17 1e-8 2024-11-22 ١٢٣٤",
    "Whitespace   runs\t\ttabs\n\nnewlines   \n  mixed \r\n end  ",
    "Unseen words: antidisestablishmentarianism, Pneumonoultramicroscopic, xyzzy",
    "Emoji 🤖🦾 and flags 🇯🇵🇧🇷, skin tones 👋🏿, ZWJ 👩‍💻",
    "中文：机器学习模型的训练需要大量数据。日本語：ひらがなとカタカナと漢字。",
    "العربية: النص من اليمين إلى اليسار. עברית גם כן.",
    "हिन्दी और বাংলা और தமிழ் — Devanagari, Bengali, Tamil.",
    "Decomposed accents: e\u0301te\u0301, n\u0303, A\u030a (NFC turns these into single code points)",
    "Contractions: I'm, you're, it's, we'll, they'd, IT'S, YOU'VE",
    "code: if (x != nullptr && y->z[3] >= 0) { return std::max(a, b); }",
    "<|endoftext|>special tokens<|im_start|>user\nHi<|im_end|>\n<mask> masked <mask>  x",
    "<s>inline BOS and EOS</s> in text",
    "an <unk> written in a text, and <unk><unk> twice",
    "",
    "   ",
    CORPUS,
]


def byte_level_bpe(style, vocab_size=700):
    """A byte-level BPE tokenizer in the style of a model family, trained on CORPUS."""
    special = {"gpt2": ["<|endoftext|>"], "gpt2_prefix": ["<|endoftext|>"], "digits": ["<|endoftext|>"],
               "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
               "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]}[style]
    model = models.BPE(ignore_merges=(style == "llama3"))
    tok = Tokenizer(model)
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    elif style == "gpt2_prefix":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    elif style == "digits":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    else:
        pattern = LLAMA3_PATTERN if style == "llama3" else QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if style == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS] * 3, trainer=trainer)
    if style == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    if style == "gpt2":  # RoBERTa-style mask token that swallows the space before it
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    config = {"gpt2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
              "gpt2_prefix": {"eos_token": "<|endoftext|>"},
              "digits": {"eos_token": "<|endoftext|>"},
              "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
              "qwen2": {"bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}}[style]
    return tok, config


def run_probe(probe, path, texts, work):
    texts_file, out_file = work / "texts.json", work / "out.json"
    texts_file.write_text(json.dumps(texts))
    result = subprocess.run([probe, str(path), str(texts_file), str(out_file)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"tokenize_probe failed on {path}: {result.stderr}")
    return json.loads(out_file.read_text())


def compare(name, got, expected_ids, expected_special, expected_text=None, texts=None):
    texts = TEXTS if texts is None else texts
    failures = 0
    for i, text in enumerate(texts):
        for label, mine, theirs in (("ids", got["ids"][i], expected_ids[i]),
                                    ("ids with special tokens", got["ids_special"][i], expected_special[i])):
            if mine != theirs:
                failures += 1
                first = next((k for k, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
                print(f"FAIL {name}: {label} of text {i} ({text[:40]!r}) differ at {first}: "
                      f"ours {mine[max(0, first - 3):first + 5]} reference {theirs[max(0, first - 3):first + 5]} "
                      f"(lengths {len(mine)} / {len(theirs)})")
        if expected_text is not None and got["decoded"][i] != expected_text[i]:
            failures += 1
            print(f"FAIL {name}: decode of text {i} gives {got['decoded'][i][:60]!r}, expected {expected_text[i][:60]!r}")
    tokens = sum(len(ids) for ids in expected_ids)
    print(f"{name}: {'identical' if failures == 0 else f'{failures} mismatches'} over {len(texts)} texts, "
          f"{tokens} tokens ({got['kind']})")
    return failures


def long_words(probe, name, tok, directory, work):
    """A 1,000,000-character word (and a base64-like blob) must tokenize in seconds, as HF's.

    Long runs without spaces (minified code, base64, URLs) are single pre-tokenizer pieces;
    a merge loop that rescans the piece per merge is quadratic in their length."""
    import random
    import time
    rng = random.Random(20)
    letters = "".join(rng.choice("etaoinshrdlucmfwypvbgkqjxz") for _ in range(1_000_000))
    blob = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(200_000))
    texts = [letters, blob]
    start = time.monotonic()
    got = run_probe(probe, directory, texts, work)
    seconds = time.monotonic() - start
    failures = 0
    for text, mine in zip(texts, got["ids"]):
        theirs = tok.encode(text, add_special_tokens=False).ids
        if mine != theirs:
            failures += 1
            first = next((k for k, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            print(f"FAIL {name}: a {len(text)}-character word differs at token {first} "
                  f"(lengths {len(mine)} / {len(theirs)})")
    if seconds > 20:
        failures += 1
        print(f"FAIL {name}: long words took {seconds:.1f} s to tokenize (quadratic merging?)")
    print(f"{name}: long words (1,000,000 letters; 200,000 base64 characters) "
          f"{'identical' if failures == 0 else 'differ'}, {seconds:.2f} s including start-up")
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--demo-model", required=True)
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for style in ("gpt2", "gpt2_prefix", "llama3", "qwen2", "digits"):
            tok, config = byte_level_bpe(style)
            directory = work / style
            directory.mkdir()
            tok.save(str(directory / "tokenizer.json"))
            (directory / "tokenizer_config.json").write_text(json.dumps(config))
            got = run_probe(args.probe, directory, TEXTS, work)
            ids = [tok.encode(t, add_special_tokens=False).ids for t in TEXTS]
            special = [tok.encode(t).ids for t in TEXTS]
            expected_text = [tok.decode(i, skip_special_tokens=False) for i in ids]
            failures += compare(f"byte-level BPE, {style} style", got, ids, special, expected_text)
            if style in ("gpt2", "llama3"):
                failures += long_words(args.probe, f"byte-level BPE, {style} style", tok, directory, work)
            eos = tok.token_to_id(config["eos_token"])
            if got["eos"] != eos:
                failures += 1
                print(f"FAIL {style}: eos {got['eos']} expected {eos}")

        # The demo model's byte tokenizer, as shipped in configs/.
        tok = Tokenizer.from_file(str(Path(args.demo_model) / "tokenizer.json"))
        got = run_probe(args.probe, args.demo_model, TEXTS, work)
        failures += compare("demo byte tokenizer", got, [tok.encode(t, add_special_tokens=False).ids for t in TEXTS],
                            [tok.encode(t).ids for t in TEXTS])
        if (got["bos"], got["eos"], got["pad"]) != (256, 257, 258):
            failures += 1
            print(f"FAIL demo: special ids {got['bos']}, {got['eos']}, {got['pad']} expected 256, 257, 258")

        # SentencePiece models (Llama 2 / Mistral style), run by the sentencepiece package.
        import sentencepiece as spm
        (work / "corpus.txt").write_text(CORPUS * 3)
        for model_type in ("bpe", "unigram"):
            directory = work / f"sp_{model_type}"
            directory.mkdir()
            spm.SentencePieceTrainer.train(input=str(work / "corpus.txt"), model_prefix=str(directory / "tokenizer"),
                                           vocab_size=600, model_type=model_type, character_coverage=1.0,
                                           byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                           hard_vocab_limit=False, minloglevel=2)
            (directory / "tokenizer_config.json").write_text(json.dumps(
                {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "add_eos_token": False}))
            sp = spm.SentencePieceProcessor(model_file=str(directory / "tokenizer.model"))
            # Special tokens written in the text are split out first (as HF's converted
            # tokenizer does: <unk> too); the rest goes to SentencePiece.
            def encode(text):
                ids, rest = [], text
                while rest:
                    cut = min([(rest.find(s), s) for s in ("<s>", "</s>", "<unk>") if s in rest], default=None)
                    if cut is None:
                        ids += sp.encode(rest)
                        break
                    ids += sp.encode(rest[:cut[0]]) + [sp.piece_to_id(cut[1])]
                    rest = rest[cut[0] + len(cut[1]):]
                return ids
            ids = [encode(t) for t in TEXTS]
            got = run_probe(args.probe, directory, TEXTS, work)
            failures += compare(f"SentencePiece {model_type}", got, ids, [[1] + i for i in ids])
    print("tokenizer parity:", "ok" if failures == 0 else f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
