#!/usr/bin/env python3
"""tokenizer.json files of every kind a decoder model ships, against HF `tokenizers` (#51).

Each tokenizer is built here with HF `tokenizers` (and `sentencepiece` + transformers'
conversion for the Llama 2 layout), saved as tokenizer.json alone, and read by
`tokenize_probe` (superoffload::data::load_tokenizer). Compared on hostile texts: ids
without and with the post-processor's special tokens, and the decoded text:

  - SentencePiece-style BPE with byte_fallback: the Llama 2 / Mistral layout as transformers
    converts a tokenizer.model today (Metaspace, prepend_scheme "first") and the legacy one of
    the released Llama 2 files (Prepend + Replace normalizers, no pre-tokenizer);
  - Unigram with byte_fallback (SentencePiece's pieces and scores) and a trained Unigram under
    NFKD + Lowercase with WhitespaceSplit + Metaspace(split);
  - byte-level BPE under NFKC + Strip + Replace(regex) and under NFD;
  - a character BPE with an unk token under Whitespace, Punctuation and Digits;
  - added tokens with every flag (special, single_word, lstrip, rstrip, normalized).
Then files are recognised by content: a tokenizer.json under another name, a SentencePiece
model stored as tokenizer.model.v3, and a file that is neither (refused, named).

    tokenizer_json_parity.py --probe build/bin/tokenize_probe
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

sys.path.insert(0, str(Path(__file__).parent))
import tokenizer_parity as parity  # noqa: E402
from tokenizer_parity import CORPUS, TEXTS as BASE_TEXTS, run_probe  # noqa: E402

SPECIAL = ["<s>", "</s>", "<unk>", "<|im_start|>", "[MASK]"]
TEXTS = BASE_TEXTS + [
    "<s>at the start and at the end</s>",
    "inside<s>a word</s>and<unk>again",
    "next to spaces <s> and\n</s>\nnewlines \n<|im_start|>user\nHi",
    "mask: a [MASK] b  [MASK]  c[MASK]d",
    "Hello world, Hello! sayHello Hello_there (Hello)",
    "fullwidth ＡＢＣ abc, ligature ﬁne ﬂow, circled ① ②, superscript x² and ½",
    "Greek ΣΑΣ σας ΟΔΟΣ, Turkish İstanbul ıi, German STRAẞE, Å vs A\u030a vs \u212b",
    "compose: e\u0301 vs \u00e9, Hangul \u1100\u1161 vs \uac00, ohm \u2126",
    "\u00a0non-breaking\u00a0spaces\u2003em space\u3000ideographic\t tab",
    "unknown chars for a char model: ☃ ☄ ♞ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and 😀",
    "  leading and trailing  ",
]


def add_flag_tokens(tok):
    """Added tokens with each flag HF matches by."""
    tok.add_special_tokens([AddedToken("<|im_start|>", special=True, normalized=False),
                            AddedToken("[MASK]", special=True, lstrip=True, rstrip=True, normalized=False)])
    tok.add_tokens([AddedToken("Hello", single_word=True, normalized=True),
                    AddedToken("ＡＢＣ", normalized=True),  # matched in the normalized text (NFKC: "ABC")
                    AddedToken("sigma", normalized=False)])


def sentencepiece_model(work, model_type):
    import sentencepiece as spm
    corpus = work / "corpus.txt"
    corpus.write_text(CORPUS * 3)
    directory = work / f"sp_{model_type}"
    directory.mkdir(exist_ok=True)
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(directory / "tokenizer"), vocab_size=600,
                                   model_type=model_type, character_coverage=1.0, byte_fallback=True, unk_id=0,
                                   bos_id=1, eos_id=2, pad_id=-1, hard_vocab_limit=False, minloglevel=2)
    return directory / "tokenizer.model"


def llama2_converted(work, legacy):
    """transformers' conversion of a SentencePiece BPE model (Llama 2 / Mistral layout)."""
    from transformers import LlamaTokenizer
    directory = sentencepiece_model(work, "bpe").parent
    tok = Tokenizer.from_str(LlamaTokenizer.from_pretrained(str(directory)).backend_tokenizer.to_str())
    if legacy:  # the released Llama 2 files: Prepend + Replace normalizers, no pre-tokenizer
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.pre_tokenizer = None
    return tok


def sentencepiece_unigram(work):
    """A Unigram tokenizer.json with SentencePiece's pieces and scores, byte fallback on."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(sentencepiece_model(work, "unigram")))
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    tok = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="always"),
                                     decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    return tok


def trained_unigram():
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(prepend_scheme="always", split=True)])
    tok.decoder = decoders.Metaspace(prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator([CORPUS] * 3, trainer=trainer)
    return tok


def byte_level(normalizer):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=SPECIAL[:2], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS] * 3, trainer=trainer)
    return tok


def char_bpe():
    """A BPE over characters with an unk token (no byte fallback, no decoder: HF joins by spaces)."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]", fuse_unk=True))
    tok.normalizer = normalizers.Strip()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation(),
                                                 pre_tokenizers.Digits(individual_digits=True)])
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]"], show_progress=False)
    tok.train_from_iterator([CORPUS] * 3, trainer=trainer)
    return tok


def compare(name, tok, got, texts):
    """ids, ids with special tokens and decoded text against HF's."""
    ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    return parity.compare(name, got, ids, [tok.encode(t).ids for t in texts],
                          [tok.decode(i, skip_special_tokens=False) for i in ids], texts=texts)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cases = {
            "Llama 2 layout (Metaspace first, byte fallback)": llama2_converted(work, legacy=False),
            "Llama 2 legacy layout (Prepend + Replace)": llama2_converted(work, legacy=True),
            "Unigram, SentencePiece pieces, byte fallback": sentencepiece_unigram(work),
            "Unigram, NFKD + Lowercase, WhitespaceSplit + Metaspace split": trained_unigram(),
            "byte-level BPE, NFKC + Strip + Replace(regex)": byte_level(normalizers.Sequence([
                normalizers.NFKC(), normalizers.Strip(), normalizers.Replace(Regex(r"\s+"), " ")])),
            "byte-level BPE, NFD": byte_level(normalizers.NFD()),
            "character BPE with unk, Whitespace + Punctuation + Digits": char_bpe(),
        }
        for name, tok in cases.items():
            for flags in (False, True):
                if flags:
                    tok = Tokenizer.from_str(tok.to_str())
                    add_flag_tokens(tok)
                directory = work / "case"
                shutil.rmtree(directory, ignore_errors=True)
                directory.mkdir()
                tok.save(str(directory / "tokenizer.json"))
                got = run_probe(args.probe, directory, TEXTS, work)
                failures += compare(name + (", flagged added tokens" if flags else ""), tok, got, TEXTS)

        # Recognised by content: tokenizer.json under another name, a .model.v3, something else.
        tok = cases["Llama 2 layout (Metaspace first, byte fallback)"]
        renamed = work / "renamed"
        renamed.mkdir()
        tok.save(str(renamed / "vocabulary.bin"))
        failures += compare("tokenizer.json named vocabulary.bin", tok,
                            run_probe(args.probe, renamed / "vocabulary.bin", TEXTS, work), TEXTS)
        v3 = work / "v3"
        v3.mkdir()
        shutil.copy(work / "sp_bpe" / "tokenizer.model", v3 / "tokenizer.model.v3")
        got = run_probe(args.probe, v3, TEXTS[:3], work)
        reference = run_probe(args.probe, work / "sp_bpe", TEXTS[:3], work)
        if got["ids"] != reference["ids"] or "tokenizer.model.v3" not in got["kind"]:
            failures += 1
            print(f"FAIL tokenizer.model.v3: {got['kind']} gives other ids than tokenizer.model")
        else:
            print(f"tokenizer.model.v3 in a directory: loaded ({got['kind']}), ids as tokenizer.model's")
        junk = work / "junk.model"
        junk.write_bytes(b"\x89PNG\r\n\x1a\n not a tokenizer")
        (work / "texts.json").write_text("[]")
        result = subprocess.run([args.probe, str(junk), str(work / "texts.json"), str(work / "out.json")],
                                capture_output=True, text=True)
        if result.returncode == 0 or "junk.model" not in result.stderr or "neither" not in result.stderr:
            failures += 1
            print(f"FAIL a file that is no tokenizer: exit {result.returncode}, {result.stderr.strip()!r}")
        else:
            print(f"a file that is no tokenizer: refused ({result.stderr.strip()})")
    print("tokenizer.json parity:", "ok" if failures == 0 else f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
