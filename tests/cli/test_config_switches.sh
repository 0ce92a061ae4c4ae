#!/usr/bin/env bash
# Every documented switch of configs/reference.toml, flipped alone, starts (#32): each boolean
# to its other value and each key with a list of choices (the quoted values its comment names)
# to every other choice, on the tiny model and the demo corpus, one step on one rank. A copy
# of reference.toml with offload.super_offload = false used to be refused ("speculation =
# auto contradicts super_offload = false"). The flips that cannot start by nature — weights the
# tiny model has none of, a data format the file is not, NVMe without nvme_path, CUDA or NCCL
# without a GPU, resctrl "required" on a machine without resctrl — must end with a message
# (exit 1 or 2), never a signal or a hang.
# (tests/unit/test_config_reference.cpp loads every flip of every shipped config.)
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 20000 > /dev/null || fail "demo corpus"
"$SO_PYTHON" - "$SO_BIN" "$tmp" <<'PY' || fail "a switch of configs/reference.toml does not start"
import concurrent.futures, re, subprocess, sys, tomllib
binary, tmp = sys.argv[1], sys.argv[2]
text = open("configs/reference.toml").read()
reference = tomllib.loads(text)
has_gpu = subprocess.run(["sh", "-c", "command -v nvidia-smi && nvidia-smi -L"], capture_output=True).returncode == 0
flips = []
section, comment = None, ""
for line in text.splitlines():
    if m := re.match(r"^\[(\w+)\]$", line):
        section = m.group(1)
    elif line.startswith("#"):
        comment = line
    elif m := re.match(r"^(\w+) = ", line):
        key = m.group(1)
        value = reference[section][key]
        if isinstance(value, bool):
            flips.append((f"{section}.{key}", "false" if value else "true"))
        elif isinstance(value, str):
            choices = re.findall(r'"([a-z0-9_]+)"', comment)
            if len(choices) >= 2 and value in choices:
                flips += [(f"{section}.{key}", f'"{c}"') for c in dict.fromkeys(choices) if c != value]
        comment = ""
cannot_start = {  # what the message must say
    'model.init="pretrained"': "safetensors",
    'data.format="hdf5"': "corpus.jsonl",
    'data.format="alpaca"': "instruction",
    'data.format="chat"': "messages",
    'offload.device="nvme"': "nvme_path",
}
if "resctrl" not in open("/proc/self/mounts").read():
    cannot_start['runtime.resctrl="required"'] = "resctrl is not mounted"
if not has_gpu:
    cannot_start['runtime.device="cuda"'] = "GPU"
    cannot_start['runtime.comm_backend="nccl"'] = "CUDA"
base = ["train", "configs/reference.toml", "--set", "model.path=configs/models/tiny-llama",
        "--set", f"data.path={tmp}/corpus.jsonl", "--set", "data.seq_len=32", "--set", "training.max_steps=1",
        "--set", "runtime.collective_timeout_s=120"]
def run(index, flip):
    setting = f"{flip[0]}={flip[1]}"
    command = [binary] + base + ["--set", f"training.output_dir={tmp}/run{index}", "--set", setting]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return setting, "hang (300 s)"
    out = done.stdout + done.stderr
    if done.returncode < 0 or done.returncode >= 128:
        return setting, f"ended by a signal (exit {done.returncode})"
    if setting in cannot_start:
        if done.returncode not in (1, 2) or cannot_start[setting] not in out:
            return setting, f"expected a message naming {cannot_start[setting]!r}, exit {done.returncode}: {out[-400:]}"
        return setting, None
    # The step line is info: a quieter [logging] level leaves only the exit status.
    quiet = flip[0] == "logging.level" and flip[1] in ('"warning"', '"error"')
    if done.returncode != 0 or ("Step 1/1" not in out and not quiet):
        return setting, f"does not start (exit {done.returncode}): {out[-600:]}"
    return setting, None
with concurrent.futures.ThreadPoolExecutor(2) as pool:
    results = list(pool.map(lambda item: run(*item), enumerate(flips)))
problems = [f"  --set {setting}: {problem}" for setting, problem in results if problem]
print(f"{len(flips)} switches of configs/reference.toml flipped alone: {len(flips) - len(problems)} as expected "
      f"({sum(1 for s, _ in results if s in cannot_start)} refused with a message by nature)")
for problem in problems:
    print(problem)
sys.exit(1 if problems else 0)
PY
echo "config switches: every flip starts or says why it cannot"
