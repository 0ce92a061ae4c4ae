#!/usr/bin/env python3
"""Hostile input never crashes `superoffload train`, never hangs it, and is never accepted when
it was made invalid on purpose.

From one valid set of inputs — the run's TOML, a DeepSpeed JSON, the model's config.json,
model.safetensors and tokenizer.json, a JSONL corpus and an HDF5 token file — the generator
derives a few hundred mutated cases with a fixed seed: type swaps, extreme, negative and
non-finite numbers, missing and duplicated fields, truncations and bit flips; chat records and
chat templates too (malformed, refusing, looping or recursing templates); and resctrl trees
(tests/resctrl/fake_resctrl.py's Grace and Sapphire Rapids layouts with files missing, emptied,
filled with junk or out of range), which [runtime] resctrl = "auto" must train through. Each
case is one `superoffload train` of at most one step under a timeout, and must

  - end by exit code, never by a signal (SIGSEGV, SIGFPE, SIGABRT) or a C++ `terminate`;
  - end within the timeout;
  - fail, with a FATAL or ERROR line (file, field, value, hint), when the mutation makes the input
    invalid by construction ("invalid" cases); train (exit 0) when the input must be survived
    ("valid" cases: a broken resctrl tree leaves training unpartitioned). Mutations whose
    validity depends on chance (a bit flip in a weight, a truncation at a line end) are "any":
    only the first two rules.

    fuzz_inputs.py --bin build/bin/superoffload --corpus-tool build/bin/superoffload_demo_corpus \
        --source . [--jobs 2] [--only safetensors] [--every 4]
"""
import argparse
import concurrent.futures
import copy
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

INVALID, ANY, VALID = "invalid", "any", "valid"
TIMEOUT_S = 90
CRASH_MARKERS = ("terminate called", "Segmentation fault", "core dumped", "Aborted", "stack trace", "*** Error in")


class Case:
    def __init__(self, family, name, expect, files, args=(), env=None):
        self.family, self.name, self.expect = family, name, expect
        self.files = files  # relative path -> bytes, written into the case's directory
        self.args = list(args)  # extra `train` arguments; {case} is the case directory
        self.env = env or {}  # extra environment; {case} is the case directory


# ---- The valid inputs --------------------------------------------------------------------------

def make_base(work, bin_path, corpus_tool, source):
    """Writes the valid inputs under work/base and returns them as {relative path: bytes}."""
    base = work / "base"
    (base / "model").mkdir(parents=True)
    subprocess.run([corpus_tool, str(base / "corpus.jsonl"), "--tokens", "6000"], check=True,
                   stdout=subprocess.DEVNULL)
    # Weights: one step of the tiny model, exported (config.json and tokenizer come with them).
    run = work / "seed_run"
    log = subprocess.run([bin_path, "train", str(source / "configs/tiny.toml"), "--set",
                          f"data.path={base / 'corpus.jsonl'}", "--set", "data.seq_len=32", "--set",
                          "training.max_steps=1", "--set", f"training.output_dir={run}"],
                         capture_output=True, text=True, cwd=source)  # tiny.toml's paths are relative to the tree
    if log.returncode != 0:
        sys.exit(f"the seed run failed:\n{log.stdout}{log.stderr}")
    log = subprocess.run([bin_path, "export", str(run), "--to", str(work / "exported"), "--dtype", "fp32"],
                         capture_output=True, text=True, cwd=source)
    if log.returncode != 0:
        sys.exit(f"export failed:\n{log.stdout}{log.stderr}")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(work / "exported" / name, base / "model" / name)
    rng = np.random.default_rng(0)
    with h5py.File(base / "tokens.h5", "w") as f:
        f["tokens"] = rng.integers(0, 256, size=(16, 33), dtype=np.uint32)
    (base / "run.toml").write_text(f"""
[model]
path = "{{case}}/model"
init = "pretrained"

[data]
path = "{{case}}/corpus.jsonl"
seq_len = 32

[training]
output_dir = "{{case}}/out"
train_micro_batch_size_per_gpu = 2
gradient_accumulation_steps = 1
max_steps = 1

[optimizer]
lr = 1e-3

[zero]
sub_group_size = 1_000_000

[checkpoint]
save_on_exit = false

[precision]
bf16 = false

[runtime]
device = "cpu"
collective_timeout_s = 60
""")
    (base / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                                                   "weight_decay": 0.01}},
        "zero_optimization": {"stage": 3, "sub_group_size": 1000000,
                              "offload_optimizer": {"device": "cpu", "pin_memory": True, "ratio": 0.9}},
        "bf16": {"enabled": False}}, indent=1))
    return {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*") if p.is_file()}


# ---- Mutations ---------------------------------------------------------------------------------

def flip_bits(rng, data, count, start=0, end=None):
    data = bytearray(data)
    end = len(data) if end is None else end
    for _ in range(count):
        i = rng.randrange(start, end)
        data[i] ^= 1 << rng.randrange(8)
    return bytes(data)


def truncate(rng, data, lo=0.0, hi=0.95):
    return data[:int(len(data) * rng.uniform(lo, hi))]


def damaged_copies(rng, case, text, truncations, flips):
    """Truncations of a JSON file (always invalid) and bit flips (valid by chance)."""
    out = [case(f"truncated #{k}", INVALID, raw=text[:rng.randrange(1, len(text) - 2)]) for k in range(truncations)]
    out += [case(f"bit flips #{k}", ANY, raw=flip_bits(rng, text, rng.randrange(1, 8))) for k in range(flips)]
    return out


BAD_NUMBERS = [0, -1, -2**31, 2**40, 2**63 - 1, 1.5, "64", None, [], {}, True]


def config_json_cases(rng, base):
    """config.json, with random initialisation so that the checks of the config itself answer
    (with pretrained weights every size change is also a shape mismatch)."""
    config = json.loads(base["model/config.json"])
    random_init = ["--set", 'model.init="random"']
    def case(name, expect, edit=None, raw=None):
        text = raw if raw is not None else json.dumps(edit(copy.deepcopy(config))).encode()
        return Case("config.json", name, expect, {"model/config.json": text}, random_init)
    def setting(key, value):
        def edit(c):
            c[key] = value
            return c
        return edit
    def without(key):
        def edit(c):
            del c[key]
            return c
        return edit
    out = []
    optional = ("num_key_value_heads", "head_dim", "rms_norm_eps")  # null means "not given", as in HF
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim"):
        for value in BAD_NUMBERS:
            expect = ANY if value is None and key in optional else INVALID
            out.append(case(f"{key} = {json.dumps(value)}", expect, setting(key, value)))
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
        out.append(case(f"no {key}", INVALID, without(key)))
    out.append(case("rms_norm_eps = null (the default)", ANY, setting("rms_norm_eps", None)))
    out.append(case("hidden_size = 2^24 with check_memory = false", INVALID, setting("hidden_size", 2**24)))
    out[-1].args += ["--set", "runtime.check_memory=false"]
    for key, values in (("rms_norm_eps", [0, -1e-5, "1e-5", 1e400]), ("rope_theta", [0, -10000.0, "x", 1e400]),
                        ("max_position_embeddings", [0, -512, 2**40]), ("initializer_range", [-0.02, "x"]),
                        ("tie_word_embeddings", ["yes", 3]), ("hidden_act", ["nonsense", 7]),
                        ("architectures", [[], ["NoSuchForCausalLM"], "LlamaForCausalLM", [7]])):
        for value in values:
            out.append(case(f"{key} = {json.dumps(value)}", INVALID, setting(key, value)))
    out.append(case("num_key_value_heads = 4 (does not divide 6 heads)", INVALID, setting("num_key_value_heads", 4)))
    # RoPE scaling (#32): every field the supported types read, bad in type or range, in both
    # forms (rope_scaling beside rope_theta, and rope_parameters); unsupported types.
    rope_types = {
        "linear": {"factor": 2.0},
        "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        "yarn": {"factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32.0, "beta_slow": 1.0,
                 "mscale": 1.0, "mscale_all_dim": 1.0, "attention_factor": 1.0, "truncate": True,
                 "partial_rotary_factor": 1.0},
    }
    for form in ("rope_scaling", "rope_parameters"):
        for rope_type, fields in rope_types.items():
            valid = {"rope_type": rope_type, **fields}
            if form == "rope_parameters":
                valid["rope_theta"] = 10000.0
            out.append(case(f"{form} {rope_type} (valid)", ANY, setting(form, valid)))
            for field in fields:
                # 0 is valid for mscale (off) and for yarn's factor (derived from the context extension)
                zero_valid = field in ("mscale", "mscale_all_dim") or (rope_type == "yarn" and field == "factor")
                bad_values = [None, "x", -1, 1e400] + ([] if zero_valid else [0])
                if field == "truncate":
                    bad_values = ["yes", 1]
                if field == "partial_rotary_factor":
                    bad_values = [0, 1.5, -0.5, "x"]
                if form == "rope_parameters":
                    bad_values = bad_values[1:2]  # the same checks read both forms: one bad value each
                for value in bad_values:
                    if value is None and field not in ("factor", "low_freq_factor", "high_freq_factor",
                                                       "original_max_position_embeddings"):
                        continue  # optional fields may be absent
                    if value is None and rope_type == "yarn" and field == "factor":
                        continue  # yarn derives it from max_position_embeddings
                    out.append(case(f"{form} {rope_type} {field} = {json.dumps(value)}", INVALID,
                                    setting(form, {**valid, field: value})))
        for rope_type in ("dynamic", "longrope", 7):
            out.append(case(f"{form} rope_type = {json.dumps(rope_type)}", INVALID,
                            setting(form, {"rope_type": rope_type, "factor": 2.0, "rope_theta": 10000.0})))
    out.append(case("rope_scaling llama3 high_freq_factor = low_freq_factor", INVALID,
                    setting("rope_scaling", {**rope_types["llama3"], "rope_type": "llama3", "high_freq_factor": 1.0})))
    # head_dim: RoPE rotates channel pairs; layer_types: one valid entry per layer.
    for value in (7, 15):
        out.append(case(f"head_dim = {value} (odd)", INVALID, setting("head_dim", value)))
    layers = config["num_hidden_layers"]
    for name, value in ((f"{layers - 1} entries", ["full_attention"] * (layers - 1)),
                        (f"{layers + 1} entries", ["full_attention"] * (layers + 1)),
                        ("an unknown entry", ["full_attention"] * (layers - 1) + ["local_attention"]),
                        ("a number", [1] * layers), ("not a list", "full_attention")):
        out.append(case(f"layer_types with {name}", INVALID, setting("layer_types", value)))
    out.append(case("layer_types, one per layer (valid)", ANY, setting("layer_types", ["full_attention"] * layers)))
    # pad_token_id: the embedding row HF freezes must be a row; dropout is warned about, not refused.
    vocab = config["vocab_size"]
    for value in (vocab, -vocab - 1, 10**12, 1.5, "<pad>", [0]):
        out.append(case(f"pad_token_id = {value!r}", INVALID, setting("pad_token_id", value)))
    for value in (0, -1, None):
        out.append(case(f"pad_token_id = {value!r} (valid)", ANY, setting("pad_token_id", value)))
    for key in ("attention_dropout", "resid_pdrop", "hidden_dropout"):
        out.append(case(f"{key} = 0.1 (trained without, warned)", ANY, setting(key, 0.1)))
    out.append(case("attention_dropout = \"high\" (ignored, not a number)", ANY, setting("attention_dropout", "high")))
    out.append(case("not an object", INVALID, raw=b"[1, 2, 3]"))
    out.append(case("empty file", INVALID, raw=b""))
    out += damaged_copies(rng, case, base["model/config.json"], 4, 8)
    out.append(case("optional rope_theta removed (valid)", ANY, without("rope_theta")))
    return out


def safetensors_cases(rng, base):
    data = base["model/model.safetensors"]
    header_size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + header_size])
    body = data[8 + header_size:]
    names = sorted(k for k in header if k != "__metadata__")
    def rebuild(h, payload=body):
        text = json.dumps(h).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        return struct.pack("<Q", len(text)) + text + payload
    def case(name, expect, raw):
        return Case("safetensors", name, expect, {"model/model.safetensors": raw})
    out = []
    for dtype in ("I32", "U32", "F16", "BF16", "F64", "I64", "U8", "BOOL", "F8_E4M3", "Q4", 7):
        h = copy.deepcopy(header)
        h[rng.choice(names)]["dtype"] = dtype
        out.append(case(f"dtype {dtype}", INVALID, rebuild(h)))
    for k in range(3):
        h = copy.deepcopy(header)
        name = rng.choice(names)
        h[name]["shape"] = [d * 2 for d in h[name]["shape"]]
        out.append(case(f"shape doubled #{k}", INVALID, rebuild(h)))
    for shape in ([-1, 4], [1.5], ["3"], None, [2**62, 2**62]):
        h = copy.deepcopy(header)
        h[rng.choice(names)]["shape"] = shape
        out.append(case(f"shape {json.dumps(shape)}", INVALID, rebuild(h)))
    for offsets in ([8, 4], [0, 2**63], [-4, 4], "0,4", [0]):
        h = copy.deepcopy(header)
        h[rng.choice(names)]["data_offsets"] = offsets
        out.append(case(f"data_offsets {json.dumps(offsets)}", INVALID, rebuild(h)))
    h = copy.deepcopy(header)
    a, b = rng.sample(names, 2)
    h[a]["data_offsets"], h[b]["data_offsets"] = h[b]["data_offsets"], h[a]["data_offsets"]
    if h[a]["shape"] != h[b]["shape"]:
        out.append(case("two tensors' data swapped (sizes differ)", INVALID, rebuild(h)))
    h = copy.deepcopy(header)
    del h[rng.choice(names)]
    out.append(case("a tensor missing", INVALID, rebuild(h)))
    h = copy.deepcopy(header)
    h["model.layers.99.mlp.up_proj.weight"] = dict(h[names[0]])
    out.append(case("an unexpected tensor", INVALID, rebuild(h)))
    h = copy.deepcopy(header)
    h["__metadata__"] = {"format": 7}
    out.append(case("metadata not a string", INVALID, rebuild(h)))
    for value in (2**63, 0, 10**8 + 1, len(data)):
        out.append(case(f"header length {value}", INVALID, struct.pack("<Q", value) + data[8:]))
    out.append(case("header not JSON", INVALID, struct.pack("<Q", 16) + b"{not json at all" + body))
    out.append(case("header a list", INVALID, rebuild([1, 2])))
    for k in range(4):
        out.append(case(f"truncated in the data #{k}", INVALID, data[:rng.randrange(8 + header_size, len(data) - 1)]))
    for k in range(2):
        out.append(case(f"truncated in the header #{k}", INVALID, data[:rng.randrange(0, 8 + header_size)]))
    # A NaN or inf written into a weight.
    for value in (float("nan"), float("inf"), float("-inf")):
        name = rng.choice(names)
        start = header[name]["data_offsets"][0]
        payload = bytearray(body)
        payload[start:start + 4] = struct.pack("<f", value)
        out.append(case(f"{value} in {name}", INVALID, rebuild(header, bytes(payload))))
    for k in range(4):
        out.append(case(f"bit flips in the header #{k}", ANY, flip_bits(rng, data, rng.randrange(1, 4), 8, 8 + header_size)))
    for k in range(4):
        out.append(case(f"bit flips in the data #{k}", ANY, flip_bits(rng, data, rng.randrange(1, 64), 8 + header_size)))
    return out


def tokenizer_cases(rng, base):
    tokenizer = json.loads(base["model/tokenizer.json"])
    vocab_tokens = sorted(tokenizer["model"]["vocab"])
    def case(name, expect, edit=None, raw=None):
        text = raw if raw is not None else json.dumps(edit(copy.deepcopy(tokenizer))).encode()
        return Case("tokenizer.json", name, expect, {"model/tokenizer.json": text})
    def vocab_id(value):
        def edit(t):
            t["model"]["vocab"][rng.choice(vocab_tokens)] = value
            return t
        return edit
    def added_field(index, key, value):
        def edit(t):
            t["added_tokens"][index][key] = value
            return t
        return edit
    out = []
    for value in (-1, 2**31, 2**40, 1.5, "7", None, [1]):
        out.append(case(f"a vocabulary id {json.dumps(value)}", INVALID, vocab_id(value)))
    def duplicate(t):
        a, b = rng.sample(vocab_tokens, 2)
        t["model"]["vocab"][a] = t["model"]["vocab"][b]
        return t
    out.append(case("two tokens share an id", INVALID, duplicate))
    for value in (-1, 2**31, 97, 256, "x", None):
        out.append(case(f"added token id {json.dumps(value)}", INVALID, added_field(2, "id", value)))
    for value in ("", None, 5):
        out.append(case(f"added token content {json.dumps(value)}", INVALID, added_field(1, "content", value)))
    def merges(value):
        def edit(t):
            t["model"]["merges"] = value
            return t
        return edit
    for value in (["ab"], [["a"]], [["a", "b"]], ["a b c"], "a b", [7], None):
        out.append(case(f"merges {json.dumps(value)}", INVALID, merges(value)))
    def model_field(key, value):
        def edit(t):
            if value is None:
                del t["model"][key]
            else:
                t["model"][key] = value
            return t
        return edit
    out.append(case("model type WordPiece", INVALID, model_field("type", "WordPiece")))
    out.append(case("no vocabulary", INVALID, model_field("vocab", None)))
    out.append(case("vocabulary a list", INVALID, model_field("vocab", [1, 2])))
    out.append(case("dropout 0.1", INVALID, model_field("dropout", 0.1)))
    def top(key, value):
        def edit(t):
            t[key] = value
            return t
        return edit
    out.append(case("no model", INVALID, top("model", None)))
    out.append(case("pre-tokenizer of unknown type", INVALID, top("pre_tokenizer", {"type": "Nonsense"})))
    out.append(case("normalizer of unknown type", INVALID, top("normalizer", {"type": "Nonsense"})))
    def special_id(value):
        def edit(t):
            t["post_processor"]["special_tokens"]["<s>"]["ids"] = [value]
            return t
        return edit
    for value in (-1, 10**6, "x"):
        out.append(case(f"post-processor id {json.dumps(value)}", INVALID, special_id(value)))
    out += damaged_copies(rng, case, base["model/tokenizer.json"], 4, 6)
    return out


def jsonl_cases(rng, base):
    text = base["corpus.jsonl"]
    lines = text.splitlines(keepends=True)
    def case(name, expect, raw):
        return Case("jsonl", name, expect, {"corpus.jsonl": raw})
    def with_line(line):
        k = rng.randrange(len(lines))
        return b"".join(lines[:k] + [line] + lines[k:])
    out = []
    for line in (b"not json\n", b"[1, 2, 3]\n", b'{"text": 7}\n', b'{"text": null}\n', b'{"txet": "x"}\n',
                 b'{"text": "unterminated\n', b"\x00\x01\x02\n", b'"a string"\n', b"{\"text\": \"x\"} trailing\n"):
        out.append(case(f"a line {line[:24]!r}", INVALID, with_line(line)))
    out.append(case("empty file", INVALID, b""))
    out.append(case("blank lines only", INVALID, b"\n  \n\t\n"))
    out.append(case("nested 100,000 deep", INVALID, with_line(b'{"text": ' + b"[" * 100000 + b"]" * 100000 + b"}\n")))
    out.append(case("one 2 MB word", ANY, with_line(json.dumps({"text": "x" * 2_000_000}).encode() + b"\n")))
    out.append(case("invalid UTF-8 in a text", ANY, with_line(b'{"text": "caf\xc3 \xff\xfe ok"}\n')))
    out.append(case("byte-order mark first", ANY, b"\xef\xbb\xbf" + text))
    out.append(case("no newline at the end", ANY, text.rstrip(b"\n")))
    for k in range(3):
        out.append(case(f"truncated #{k}", ANY, truncate(rng, text, 0.3, 0.99)))
    for k in range(6):
        out.append(case(f"bit flips #{k}", ANY, flip_bits(rng, text, rng.randrange(1, 20))))
    return out


def chat_cases(rng, base):
    """Chat records and chat templates (#34): records with roles, content or structure broken,
    templates that are malformed, refuse everything, loop or recurse without end. The template
    is the case's own file ([data] chat_template); the valid records train."""
    template = (b"{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}"
                b"{{ m.content }}</s>{% endgeneration %}{% else %}{{ m.content }}</s>{% endif %}{% endfor %}")
    def record(turns):
        return json.dumps({"messages": turns}).encode() + b"\n"
    good = b"".join(record([{"role": "user", "content": f"q{k}"}, {"role": "assistant", "content": f"a {k}"}])
                    for k in range(40))  # short enough for the base run's seq_len of 32
    def case(name, expect, corpus=good, chat_template=template):
        return Case("chat", name, expect, {"corpus.jsonl": corpus, "t.jinja": chat_template},
                    ["--set", "data.chat_template={case}/t.jinja", "--set", "data.format=chat"])
    def with_line(line):
        lines = good.splitlines(keepends=True)
        k = rng.randrange(len(lines))
        return b"".join(lines[:k] + [line] + lines[k:])
    out = [case("valid records and template", ANY)]
    for name, line in (("no messages", b'{"text": "x"}\n'), ("empty messages", b'{"messages": []}\n'),
                       ("a role missing", b'{"messages": [{"content": "x"}]}\n'),
                       ("an unknown role", b'{"messages": [{"role": "wizard", "content": "x"}]}\n'),
                       ("numeric content", b'{"messages": [{"role": "user", "content": 5}]}\n'),
                       ("a turn that is a string", b'{"messages": ["hi"]}\n'),
                       ("unknown ShareGPT speaker", b'{"conversations": [{"from": "robot", "value": "x"}]}\n')):
        out.append(case(f"a record with {name}", INVALID, with_line(line)))
    out.append(case("roles out of order, refused by the template", INVALID,
                    chat_template=b"{% if messages[0].role != 'system' %}{{ raise_exception('needs a system turn') }}"
                                  b"{% endif %}" + template))
    for name, bad in (("unclosed if", b"{% if x %}" + template), ("unknown filter", b"{{ x | shout }}" + template),
                      ("a tag never closed", template + b"{{ messages"), ("endfor without for", b"{% endfor %}"),
                      ("recursion without end", b"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
                      ("a loop without end", b"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                                             b"{% endfor %}"),
                      ("undefined attribute", b"{{ nothing.at_all }}" + template),
                      ("tojson of a function", b"{{ range | tojson }}" + template),
                      ("deep nesting", b"{{ " + b"(" * 5000 + b"1" + b")" * 5000 + b" }}"),
                      ("bytes that are not UTF-8", b"{{ 'caf\xe9' }}" + template)):
        out.append(case(f"template: {name}", INVALID, chat_template=bad))
    for k in range(2):
        out.append(case(f"template bit flips #{k}", ANY, chat_template=flip_bits(rng, template, rng.randrange(1, 6))))
        out.append(case(f"records bit flips #{k}", ANY, corpus=flip_bits(rng, good, rng.randrange(1, 10))))
    return out


def token_file_cases(rng, base, work):
    """HDF5 token files, written with h5py, given as [data] path."""
    scratch = work / "h5_scratch"
    scratch.mkdir(exist_ok=True)
    counter = [0]
    def h5(build):
        counter[0] += 1
        path = scratch / f"{counter[0]}.h5"
        with h5py.File(path, "w") as f:
            build(f)
        return path.read_bytes()
    args = ["--set", 'data.path="{case}/tokens.h5"']
    def case(name, expect, raw):
        return Case("hdf5 tokens", name, expect, {"tokens.h5": raw}, args)
    ids = np.random.default_rng(1).integers(0, 256, size=(16, 33))
    out = [case("valid uint32", ANY, base["tokens.h5"]),
           case("valid int64", ANY, h5(lambda f: f.create_dataset("tokens", data=ids.astype(np.int64))))]
    for dtype in (np.float32, np.float64, np.float16):
        out.append(case(f"tokens of {np.dtype(dtype).name}", INVALID,
                        h5(lambda f, d=dtype: f.create_dataset("tokens", data=ids.astype(d)))))
    for value in (-1, -2**40, 260, 2**32, 2**40):
        def build(f, v=value):
            bad = ids.astype(np.int64)
            bad[3, 7] = v
            f["tokens"] = bad
        out.append(case(f"an id {value}", INVALID, h5(build)))
    def build_u64(f):
        bad = ids.astype(np.uint64)
        bad[0, 0] = 2**63 + 5
        f["tokens"] = bad
    out.append(case("an id 2^63 + 5 as uint64", INVALID, h5(build_u64)))
    out.append(case("3-D tokens", INVALID, h5(lambda f: f.create_dataset("tokens", data=ids.reshape(4, 4, 33)))))
    out.append(case("empty tokens", INVALID, h5(lambda f: f.create_dataset("tokens", shape=(0,), dtype=np.uint32))))
    out.append(case("rows shorter than seq_len + 1", INVALID, h5(lambda f: f.create_dataset("tokens", data=ids[:, :20]))))
    out.append(case("no tokens dataset", INVALID, h5(lambda f: f.create_dataset("ids", data=ids))))
    out.append(case("tokens a string", INVALID, h5(lambda f: f.create_dataset("tokens", data="hello"))))
    out.append(case("tokens a scalar", INVALID, h5(lambda f: f.create_dataset("tokens", data=5))))
    out.append(case("tokens a group", INVALID, h5(lambda f: f.create_group("tokens"))))
    def bad_mask(f):
        f["tokens"] = ids.astype(np.uint32)
        f["loss_mask"] = np.ones((16, 32), dtype=np.uint8)
    out.append(case("loss_mask of another shape", INVALID, h5(bad_mask)))
    def float_mask(f):
        f["tokens"] = ids.astype(np.uint32)
        f["loss_mask"] = np.full((16, 33), 0.5, dtype=np.float32)
    out.append(case("loss_mask of floats", INVALID, h5(float_mask)))
    def bad_offsets(f):
        f["tokens"] = ids.reshape(-1).astype(np.uint32)
        f["doc_offsets"] = np.array([0, 10**9, -5], dtype=np.int64)
    out.append(case("doc_offsets out of range", INVALID, h5(bad_offsets)))
    out.append(case("not HDF5", INVALID, b"this is not an HDF5 file\n" * 20))
    data = base["tokens.h5"]
    for k in range(3):
        out.append(case(f"truncated #{k}", INVALID, data[:rng.randrange(0, len(data) // 2)]))
    for k in range(6):
        out.append(case(f"bit flips #{k}", ANY, flip_bits(rng, data, rng.randrange(1, 16))))
    return out


def toml_cases(rng, base):
    text = base["run.toml"].decode()
    def case(name, expect, raw):
        return Case("toml", name, expect, {"run.toml": raw.encode() if isinstance(raw, str) else raw})
    def replace(old, new):
        assert old in text, old
        return text.replace(old, new, 1)
    out = []
    for value in ("0", "-1", '"32"', "1e30", "99999999999999999999", "nan", "[32]", "true"):
        out.append(case(f"seq_len = {value}", INVALID, replace("seq_len = 32", f"seq_len = {value}")))
    out.append(case("lr = 0 (trains nothing, but is allowed)", ANY, replace("lr = 1e-3", "lr = 0")))
    for value in ("-1e-3", "nan", "inf", '"fast"', "-inf"):
        out.append(case(f"lr = {value}", INVALID, replace("lr = 1e-3", f"lr = {value}")))
    out.append(case("micro batch = 0 (derived)", ANY,
                    replace("train_micro_batch_size_per_gpu = 2", "train_micro_batch_size_per_gpu = 0")))
    for value in ("-2", "1.5", "9223372036854775807"):
        out.append(case(f"micro batch = {value}", INVALID,
                        replace("train_micro_batch_size_per_gpu = 2", f"train_micro_batch_size_per_gpu = {value}")))
    for key, value in (("gradient_clipping", "-1.0"), ("gradient_clipping", "nan"), ("max_steps", "-5"),
                       ("train_batch_size", "3"), ("seed", "-1"), ("epochs", "-1")):
        out.append(case(f"{key} = {value}", INVALID, replace("max_steps = 1", f"max_steps = 1\n{key} = {value}")
                        if key != "max_steps" else replace("max_steps = 1", f"max_steps = {value}")))
    for section, line in (("zero", "sub_group_size = 0"), ("zero", "reduce_bucket_size = -1"),
                          ("offload", "ratio = 1.5"), ("offload", "ratio = nan"), ("offload", 'device = "tape"'),
                          ("runtime", 'device = "tpu"'), ("runtime", "collective_timeout_s = 0"),
                          ("precision", 'bf16 = "yes"'), ("lr_schedule", 'type = "exponential"'),
                          ("lr_schedule", "warmup_num_steps = -3"), ("optimizer", "betas = [0.9]"),
                          ("optimizer", "betas = [1.5, 0.999]"), ("optimizer", "eps = 0"),
                          ("optimizer", "weight_decay = -0.1"), ("data", 'format = "csv"'),
                          ("logging", "log_every_steps = 0"), ("checkpoint", "keep_last = -1"),
                          ("training", "no_such_key = 1"), ("no_such_section", "x = 1")):
        out.append(case(f"[{section}] {line}", INVALID, text + f"\n[{section}]\n{line}\n" if f"[{section}]" not in text
                        else replace(f"[{section}]\n", f"[{section}]\n{line}\n")))
    out.append(case("duplicate key", INVALID, replace("seq_len = 32", "seq_len = 32\nseq_len = 64")))
    out.append(case("duplicate section", INVALID, text + "\n[data]\nshuffle = false\n"))
    out.append(case("no [model] path", INVALID, replace('path = "{case}/model"\n', "")))
    out.append(case("model path missing on disk", INVALID, replace('path = "{case}/model"', 'path = "{case}/nowhere"')))
    out.append(case("data path missing on disk", INVALID, replace('path = "{case}/corpus.jsonl"', 'path = "{case}/no.jsonl"')))
    out.append(case("output_dir under a file", INVALID, replace('output_dir = "{case}/out"', 'output_dir = "{case}/run.toml/out"')))
    out.append(case("not TOML", INVALID, "this is = = not toml ["))
    out.append(case("binary", INVALID, bytes(range(256)) * 4))
    for k in range(4):
        out.append(case(f"truncated #{k}", ANY, text[:rng.randrange(1, len(text))]))
    for k in range(6):
        out.append(case(f"bit flips #{k}", ANY, flip_bits(rng, text.encode(), rng.randrange(1, 6))))
    return out


def deepspeed_cases(rng, base):
    config = json.loads(base["ds.json"])
    args = ["--deepspeed-config", "{case}/ds.json"]
    # The TOML file and --set override the DeepSpeed JSON: the keys it sets are left out here.
    toml = "\n".join(line for line in base["run.toml"].decode().splitlines()
                     if not line.startswith(("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "lr ",
                                             "sub_group_size")))
    def case(name, expect, edit=None, raw=None):
        text = raw if raw is not None else json.dumps(edit(copy.deepcopy(config))).encode()
        return Case("deepspeed json", name, expect, {"ds.json": text, "run.toml": toml.encode()}, args)
    def at(path, value):
        def edit(c):
            node = c
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
            return c
        return edit
    out = [case("valid", ANY, at(["gradient_clipping"], 1.0))]
    # 0 is superoffload's "derive it from the other two", as in the TOML file.
    out.append(case("train_micro_batch_size_per_gpu = 0 (derived)", ANY, at(["train_micro_batch_size_per_gpu"], 0)))
    out.append(case("gradient_accumulation_steps = 0 (derived)", ANY, at(["gradient_accumulation_steps"], 0)))
    for path, values in ((["train_micro_batch_size_per_gpu"], [-1, "x", 1.5, None]),
                         (["gradient_accumulation_steps"], [-4, [1]]),
                         (["train_batch_size"], [3, -1, "big"]),
                         (["gradient_clipping"], [-1, "1.0", None]),
                         (["zero_optimization", "stage"], [0, 1, 2, 4, "3"]),
                         (["optimizer", "type"], ["Lamb", "", 7]),
                         (["optimizer", "params", "lr"], [-1, "fast", None]),
                         (["optimizer", "params", "betas"], [[0.9], [2, 0.999], "0.9"]),
                         (["zero_optimization", "offload_optimizer", "device"], ["tape", 7]),
                         (["zero_optimization", "offload_optimizer", "ratio"], [1.5, -0.1, "half"]),
                         (["zero_optimization", "sub_group_size"], [0, -1, "1e9"]),
                         (["fp16", "enabled"], [True]),
                         (["zero_optimization"], ["stage3", []]),
                         (["scheduler"], [{"type": "NoSuchLR"}, {"type": "WarmupLR", "params": {"warmup_num_steps": -5}}])):
        for value in values:
            out.append(case(f"{'.'.join(path)} = {json.dumps(value)}", INVALID, at(path, value)))
    out.append(case("not an object", INVALID, raw=b"[]"))
    out.append(case("not JSON", INVALID, raw=b"{'single': 'quotes'}"))
    out += damaged_copies(rng, case, base["ds.json"], 3, 5)
    return out


def resctrl_cases(rng, base):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "resctrl"))
    import fake_resctrl
    env = {"SUPEROFFLOAD_RESCTRL_MOUNTS": "{case}/mounts"}
    def case(name, expect, tree, mode="auto"):
        files = {f"resctrl/{path}": text.encode() if isinstance(text, str) else text for path, text in tree.items()}
        files["mounts"] = b"resctrl {case}/resctrl resctrl rw 0 0\n"
        files["run.toml"] = base["run.toml"].replace(b"[runtime]", f'[runtime]\nresctrl = "{mode}"'.encode())
        return Case("resctrl tree", name, expect, files, env=env)
    out = []
    for layout, tree in fake_resctrl.LAYOUTS.items():
        tree = {path: text + "\n" for path, text in tree.items()}
        out.append(case(f"{layout}: as made", VALID, tree))
        out.append(case(f"{layout}: as made, required", VALID, tree, "required"))
        for path in tree:
            missing = {p: t for p, t in tree.items() if p != path}
            out.append(case(f"{layout}: {path} missing", VALID, missing))
            junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
            label, value = rng.choice((("junk", junk), ("empty", b""), ("huge", b"99999999999999999999\n"),
                                       ("negative", b"-1\n"), ("zero", b"0\n")))
            out.append(case(f"{layout}: {path} {label}", VALID, {**tree, path: value}))
        out.append(case(f"{layout}: schemata of another resource only", VALID, {**tree, "schemata": "L2:0=ff\n"}))
        out.append(case(f"{layout}: info/L3 a file", VALID,
                        {**{p: t for p, t in tree.items() if not p.startswith("info/L3/")}, "info/L3": "x\n"}))
        # With nothing usable, "required" must refuse to start.
        out.append(case(f"{layout}: no info/, required", INVALID,
                        {p: t for p, t in tree.items() if not p.startswith("info/")}, "required"))
    return out


# ---- Running -----------------------------------------------------------------------------------

def run_case(index, case, base, work, bin_path):
    directory = work / f"case_{index:04d}"
    directory.mkdir()
    for relative, content in base.items():
        if relative.startswith("model/") or relative in ("corpus.jsonl", "tokens.h5", "ds.json"):
            target = directory / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if relative not in case.files:
                os.symlink(work / "base" / relative, target)
    for relative, content in case.files.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_bytes(content.replace(b"{case}", str(directory).encode()) if relative in ("run.toml", "mounts")
                           else content)
    config = directory / "run.toml"
    if "run.toml" not in case.files:
        config.write_text(base["run.toml"].decode().replace("{case}", str(directory)))
    args = [a.replace("{case}", str(directory)) for a in case.args]
    command = [bin_path, "train", str(config), *args]
    start = time.monotonic()
    # Its own session, so that a hang is ended with everything it started.
    env = {**os.environ, **{k: v.replace("{case}", str(directory)) for k, v in case.env.items()}}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                               env=env)
    try:
        stdout, _ = process.communicate(timeout=TIMEOUT_S)
        rc = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, _ = process.communicate()
        rc = "timeout"
    output = stdout.decode(errors="replace")
    seconds = time.monotonic() - start
    problem = None
    if rc == "timeout":
        problem = f"no exit within {TIMEOUT_S} s (a hang)"
    elif rc < 0 or rc >= 128:
        number = -rc if rc < 0 else rc - 128
        problem = f"ended by signal {number} ({signal.Signals(number).name})"
    elif any(marker in output for marker in CRASH_MARKERS):
        problem = "a crash report in the output"
    elif case.expect == INVALID and rc == 0:
        problem = "accepted (exit 0) although the input was made invalid"
    elif case.expect == VALID and rc != 0:
        problem = f"exit {rc} although this input must be trained through"
    elif rc != 0 and " FATAL " not in output and " ERROR " not in output:
        problem = f"exit {rc} without an error message"
    first_error = next((line for line in output.splitlines() if " FATAL " in line or " ERROR " in line), "")
    if "invalid configuration" in first_error:  # the problems follow on their own lines
        lines = output.splitlines()
        first_error += " " + lines[min(lines.index(first_error) + 1, len(lines) - 1)].strip()
    if problem is None:
        shutil.rmtree(directory, ignore_errors=True)
    return case, rc, seconds, problem, first_error.split("FATAL", 1)[-1].strip(), output


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, type=Path)
    parser.add_argument("--corpus-tool", required=True, type=Path)
    parser.add_argument("--source", required=True, type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--only", help="run one family (config.json, safetensors, tokenizer.json, jsonl, chat, "
                                       "hdf5 tokens, toml, deepspeed json, resctrl tree)")
    parser.add_argument("--every", type=int, default=1,
                        help="run every Nth case of the fixed list (each family keeps its share): the default "
                             "test run takes a fourth, within CI's time; all of them with 1")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--verbose", action="store_true", help="print every case and its first error line")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="so_fuzz_"))
    try:
        base = make_base(work, str(args.bin), str(args.corpus_tool), args.source.resolve())
        rng = random.Random(args.seed)
        cases = (config_json_cases(rng, base) + safetensors_cases(rng, base) + tokenizer_cases(rng, base) +
                 jsonl_cases(rng, base) + chat_cases(rng, base) + token_file_cases(rng, base, work) +
                 toml_cases(rng, base) + deepspeed_cases(rng, base) + resctrl_cases(rng, base))
        if args.only:
            cases = [c for c in cases if c.family == args.only]
        if args.every > 1:
            cases = cases[::args.every]
        print(f"{len(cases)} cases, seed {args.seed}, {args.jobs} at a time, timeout {TIMEOUT_S} s each", flush=True)
        start = time.monotonic()
        failures, tally = [], {}
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(run_case, i, c, base, work, str(args.bin)) for i, c in enumerate(cases)]
            for future in futures:
                case, rc, seconds, problem, first_error, output = future.result()
                counts = tally.setdefault(case.family, {"cases": 0, "refused": 0, "accepted": 0, "problems": 0})
                counts["cases"] += 1
                counts["refused" if rc != 0 else "accepted"] += 1
                if problem:
                    counts["problems"] += 1
                    failures.append(case)
                    tail = "\n    ".join(output.strip().splitlines()[-6:])
                    print(f"FAIL [{case.family}] {case.name}: {problem}\n    {tail}", flush=True)
                elif args.verbose:
                    print(f"ok   [{case.family}] {case.name} ({case.expect}): exit {rc}, {seconds:.1f} s: {first_error[:160]}")
        for family, counts in tally.items():
            print(f"{family:16s} {counts['cases']:4d} cases: {counts['refused']:4d} refused, "
                  f"{counts['accepted']:3d} accepted, {counts['problems']} problems")
        print(f"fuzz: {len(cases)} cases in {time.monotonic() - start:.0f} s: "
              f"{'no signal, no hang, no invalid input accepted' if not failures else f'{len(failures)} problems'}")
        return 1 if failures else 0
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
