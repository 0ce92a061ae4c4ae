#!/usr/bin/env python3
"""Tokenizer throughput (#51's speed bar): the native tokenizers against HF `tokenizers` on one
thread, and optionally against another build's tokenize_probe (the revision before a change).

Builds the tokenizers the tests build (a Qwen-2-style byte-level BPE of 8,000 tokens, the
Llama 2 layout as tokenizer.json, a Unigram with byte fallback), writes TEXT_MB of mixed-language
text, and times whole processes: `tokenize_probe` (load + encode + decode of every text) and
HF `tokenizers` encoding the same texts with one thread (RAYON_NUM_THREADS=1, after its load).
Prints the CPU model and SIMD extensions, MB/s of each, and the ratios:
  ours/HF  (>1: ours faster)      and with --baseline-probe  new/old (the bar: >= 0.9 for byte-level BPE)

    bench/tokenizer_speed.py --probe build/bin/tokenize_probe [--baseline-probe OLD] [--text-mb 64] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "data"))
os.environ.setdefault("RAYON_NUM_THREADS", "1")
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402
from tokenizer_parity import CORPUS, QWEN2_PATTERN  # noqa: E402
import tokenizer_json_parity as kinds  # noqa: E402


def qwen_style():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=8000, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS] * 50, trainer=trainer)
    return tok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--baseline-probe", help="tokenize_probe of the revision to compare with")
    parser.add_argument("--text-mb", type=float, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "")
    simd = " ".join(f for f in ("avx512f", "avx2", "sve2", "sve", "asimd") if f" {f}" in flags)
    print(f"cpu: {cpu} ({os.cpu_count()} cores); simd: {simd}; HF tokenizers on 1 thread")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # Texts of about 4 KB each (a document), TEXT_MB in all.
        lines = (CORPUS * 4).splitlines(keepends=True)
        texts, size, i = [], 0, 0
        while size < args.text_mb * 1e6:
            text = "".join(lines[(i + k) % len(lines)] for k in range(6)) * 3
            texts.append(text)
            size += len(text.encode())
            i += 7
        (work / "texts.json").write_text(json.dumps(texts))
        cases = {"byte-level BPE (Qwen 2 style, 8k)": qwen_style(),
                 "SentencePiece-style BPE (Llama 2 layout)": kinds.llama2_converted(work, legacy=False),
                 "Unigram with byte fallback": kinds.sentencepiece_unigram(work)}
        for name, tok in cases.items():
            directory = work / "tok"
            directory.mkdir(exist_ok=True)
            tok.save(str(directory / "tokenizer.json"))
            timings = {"ours": [], "old": [], "hf": []}
            for _ in range(args.rounds):
                for label, probe in (("ours", args.probe), ("old", args.baseline_probe)):
                    if probe is None:
                        continue
                    start = time.monotonic()
                    result = subprocess.run([probe, str(directory), str(work / "texts.json"), str(work / "out.json")],
                                            capture_output=True, text=True)
                    if result.returncode != 0:
                        print(f"{name}: {label} probe failed: {result.stderr.strip()}")
                        break
                    timings[label].append(time.monotonic() - start)
                start = time.monotonic()
                for text in texts:
                    tok.encode(text, add_special_tokens=False)
                timings["hf"].append(time.monotonic() - start)
            mb = size / 1e6
            line = f"{name}: {mb:.0f} MB; HF {mb / statistics.median(timings['hf']):.2f} MB/s"
            if timings["ours"]:
                ours = mb / statistics.median(timings["ours"])
                line += f", ours {ours:.2f} MB/s (ours/HF {ours / (mb / statistics.median(timings['hf'])):.2f}x)"
                if timings["old"]:
                    old = mb / statistics.median(timings["old"])
                    line += f", old build {old:.2f} MB/s (new/old {ours / old:.3f})"
            print(line, flush=True)


if __name__ == "__main__":
    main()
