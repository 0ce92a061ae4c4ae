#!/usr/bin/env bash
# Checkpoints end to end on the tiny model (2 ranks, fp32, SuperOffload optimizer):
#  1. a run killed with SIGKILL between checkpoints and resumed has the loss of every step
#     equal, bit for bit, to an uninterrupted run's (which saved in the background), read from
#     metrics.h5 (which h5py follows while it is being written), and the same speculation
#     decisions (the history speculation "auto" predicts from is in the checkpoint);
#  2. a checkpoint written by 2 ranks resumes with 1 and with 4, and the state those runs
#     save equals the original (fp32 master, exp_avg, exp_avg_sq, element for element);
#  3. a flipped byte, a truncated rank file, a missing DONE and a deleted rank file are each
#     refused with their reason, and the run falls back to the previous checkpoint;
#  4. a checkpoint of format 1 (chunked datasets with Fletcher32, zlib CRC32s in DONE; made
#     here from a format-2 one with h5py) still resumes, with the same losses as format 2;
#  5. a background save holds what a synchronous save holds where the optimizer's export is a
#     copy already (bf16 moments: saved as that copy, not cloned again), and where it is the
#     state itself (fp32, cloned before the next step changes it).
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 60000 > /dev/null || fail "demo corpus"
train() {  # train RANKS OUTPUT_DIR [args...]
  local ranks=$1 output=$2
  shift 2
  "$MPIEXEC" -np "$ranks" --oversubscribe "$SO_BIN" train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" \
    --set data.seq_len=32 --set training.train_batch_size=4 --set training.train_micro_batch_size_per_gpu=0 \
    --set training.max_steps=16 --set checkpoint.every_steps=4 --set checkpoint.keep_last=3 \
    --set metrics.flush_every_steps=1 --set training.output_dir="$output" "$@"
}

# ---- 1. SIGKILL and resume: bit-identical losses -----------------------------------------------
# The uninterrupted run writes its checkpoints in the background (async_save): the sections
# below resume from, reshard and corrupt those; the killed run writes synchronously.
train 2 "$tmp/full" --set checkpoint.async_save=true > "$tmp/full.log" 2>&1 \
  || fail "uninterrupted run: $(tail -20 "$tmp/full.log")"
expect_contains "$(cat "$tmp/full.log")" "written in the background, training paused" "background saves"

train 2 "$tmp/killed" > "$tmp/killed.log" 2>&1 &
launcher=$!
# Follow metrics.h5 live, as an analysis script would, while the run goes on.
"$SO_PYTHON" - "$tmp/killed/metrics.h5" > "$tmp/live.log" 2>&1 <<'PY' &
import os, sys, time, h5py
path, seen = sys.argv[1], set()
deadline = time.time() + 60
while time.time() < deadline and len(seen) < 3:
    if os.path.exists(path):
        try:
            with h5py.File(path, "r", swmr=True) as f:
                steps = f["train/step"]
                for _ in range(50):
                    steps.refresh()
                    seen.add(steps.shape[0])
                    if len(seen) >= 3:
                        break
                    time.sleep(0.1)
        except OSError:
            pass  # created but not yet in SWMR mode
    time.sleep(0.1)
print("live row counts seen:", sorted(seen))
sys.exit(0 if len([n for n in seen if n > 0]) >= 2 else 1)
PY
reader=$!
for _ in $(seq 600); do
  [[ -f $tmp/killed/checkpoints/step_00000008/DONE ]] && break
  sleep 0.05
done
[[ -f $tmp/killed/checkpoints/step_00000008/DONE ]] || fail "no checkpoint at step 8: $(tail -20 "$tmp/killed.log")"
# The whole job dies at once, as on a lost allocation: every rank gets SIGKILL.
pkill -KILL -f -- "training.output_dir=$tmp/killed" || true
wait "$launcher" 2>/dev/null
[[ ! -f $tmp/killed/checkpoints/step_00000016/DONE ]] || fail "the run finished before it was killed; nothing was tested"
wait "$reader" || fail "h5py could not follow metrics.h5 during the run: $(cat "$tmp/live.log")"
train 2 "$tmp/killed" > "$tmp/resumed.log" 2>&1 || fail "resumed run: $(tail -20 "$tmp/resumed.log")"
expect_contains "$(cat "$tmp/resumed.log")" "resumed from $tmp/killed/checkpoints/step_" "auto-resume from latest"
# The checkpoint fills the model: no random initialisation first (#52), and none in the timeline.
expect_contains "$(cat "$tmp/full.log")" "parameters initialised randomly" "a fresh run's random initialisation"
if grep -q "parameters initialised randomly\|random initialisation " "$tmp/resumed.log"; then
  fail "the resumed run initialised the model randomly before reading the checkpoint: $(grep -m2 "random" "$tmp/resumed.log")"
fi
"$SO_PYTHON" - "$tmp/full/metrics.h5" "$tmp/killed/metrics.h5" <<'PY' || fail "the resumed trajectory differs"
import sys, h5py, numpy as np
full, resumed = (h5py.File(p, "r") for p in sys.argv[1:3])
a, b = full["train/loss"][...], resumed["train/loss"][...]
assert list(resumed["train/step"][...]) == list(range(1, 17)), resumed["train/step"][...]
assert np.array_equal(a, b), f"losses differ:\n{a}\n{b}"
assert np.array_equal(full["train/grad_norm"][...], resumed["train/grad_norm"][...])
assert full["ranks/step_time_s"].shape == (16, 2)
# Speculation "auto" predicts from its history of recent steps, which the checkpoint keeps per
# rank: the resumed run makes the same decisions (and so the same round-off).
for series in ("predicted_stops", "speculated", "replayed", "stepped_late"):
    assert np.array_equal(full["train/" + series][...], resumed["train/" + series][...]), series
assert full["train/predicted_stops"][...].sum() > 0, "the tiny run never stopped speculating on a prediction"
print("16 losses bit-identical after SIGKILL and resume; last", b[-1])
PY

# ---- 2. Resume at another world size: identical state ------------------------------------------
for ranks in 1 4; do
  train "$ranks" "$tmp/reshard$ranks" --set training.max_steps=8 --resume "$tmp/full/checkpoints/step_00000008" \
    > "$tmp/reshard$ranks.log" 2>&1 || fail "resume with $ranks ranks: $(tail -20 "$tmp/reshard$ranks.log")"
  expect_contains "$(cat "$tmp/reshard$ranks.log")" "written by 2 rank(s) (resharded)" "resharded resume at $ranks"
done
"$SO_PYTHON" - "$tmp/full/checkpoints/step_00000008" "$tmp/reshard1/checkpoints/step_00000008" \
  "$tmp/reshard4/checkpoints/step_00000008" <<'PY' || fail "resharded state differs"
import json, sys, h5py, numpy as np
def state(directory):
    manifest = json.load(open(f"{directory}/manifest.json"))
    files = [h5py.File(f"{directory}/rank_{k:05d}.h5", "r") for k in range(manifest["world_size"])]
    out = {}
    for l, layer in enumerate(manifest["layers"]):
        for field in ("master", "exp_avg", "exp_avg_sq"):
            flat = np.concatenate([f[f"layers/{l:05d}/{field}"][...] for f in files])
            out[(l, field)] = flat[: layer["numel"]]
        out[(l, "steps")] = files[0][f"layers/{l:05d}/steps"][0]
    return manifest["world_size"], out
_, original = state(sys.argv[1])
for directory in sys.argv[2:]:
    world, other = state(directory)
    for key, values in original.items():
        assert np.array_equal(values, other[key]), f"{key} differs at world size {world}"
    print(f"world size {world}: {len(original)} arrays equal to the 2-rank checkpoint")
PY

# ---- 3. Corrupted checkpoints are refused, with fallback ---------------------------------------
corrupt_case() {  # corrupt_case NAME EXPECTED_MESSAGE COMMAND...
  local name=$1 expected=$2
  shift 2
  local dir=$tmp/corrupt-$name
  mkdir -p "$dir"
  cp -r "$tmp/full/checkpoints" "$dir/"
  (cd "$dir/checkpoints/step_00000016" && "$@") || fail "$name: could not corrupt"
  out=$(train 2 "$dir" 2>&1) || fail "$name: the run failed instead of falling back: $out"
  expect_contains "$out" "$expected" "$name: reason"
  expect_contains "$out" "falling back to $dir/checkpoints/step_00000012" "$name: fallback"
  expect_contains "$out" "resumed from $dir/checkpoints/step_00000012: step 12" "$name: resumed from the previous"
}
flip_byte() {  # flip_byte AT: a byte of rank_00001.h5, "middle" or a dataset's first byte
  "$SO_PYTHON" -c "
import os, sys, h5py
at = sys.argv[1]
if at == 'middle':
    offset = os.path.getsize('rank_00001.h5') // 2
else:
    with h5py.File('rank_00001.h5', 'r') as f:
        offset = f[at].id.get_offset()
with open('rank_00001.h5', 'r+b') as f:
    f.seek(offset); b = f.read(1); f.seek(offset); f.write(bytes([b[0] ^ 0x40]))" "$1"
}
# A resume reads every byte it uses against its block's CRC32C: the load fails and falls back.
corrupt_case flipped_data "rank_00001.h5: dataset \"layers/00001/exp_avg\" fails its CRC32C check in bytes [0," \
  flip_byte layers/00001/exp_avg
# inspect reads every file whole against DONE's CRC32C, wherever the byte lies.
mkdir -p "$tmp/corrupt-middle" && cp -r "$tmp/full/checkpoints" "$tmp/corrupt-middle/"
(cd "$tmp/corrupt-middle/checkpoints/step_00000016" && flip_byte middle) || fail "could not corrupt"
out=$("$SO_BIN" inspect "$tmp/corrupt-middle/checkpoints/step_00000016" 2>&1) && fail "inspect passed a flipped byte"
expect_contains "$out" "rank_00001.h5 fails its CRC32C check (recorded in DONE)" "inspect names the file"
corrupt_case truncated "rank_00000.h5 has" truncate -s -4096 rank_00000.h5
corrupt_case no_done "has no DONE marker" rm DONE
corrupt_case deleted "rank_00001.h5 is missing" rm rank_00001.h5
# An explicit path is not replaced by another: it is refused.
out=$(train 2 "$tmp/corrupt-deleted" --resume "$tmp/corrupt-deleted/checkpoints/step_00000016" 2>&1) \
  && fail "a broken explicit checkpoint was accepted"
expect_contains "$out" "cannot resume from $tmp/corrupt-deleted/checkpoints/step_00000016" "explicit path refused"
# A checkpoint of another model is refused naming the difference.
cp -r configs/models/tiny-llama "$tmp/other-model"
sed -i 's/"intermediate_size": 1024/"intermediate_size": 512/' "$tmp/other-model/config.json"
out=$(train 2 "$tmp/full" --set model.path="$tmp/other-model" 2>&1) && fail "another model's checkpoint was accepted"
expect_contains "$out" "was written for another model: parameter" "model mismatch named"
echo "checkpoints: kill+resume bit-identical, reshard 2->1/4 identical, 4 corruptions refused with fallback"

# ---- 4. Format 1 still resumes -----------------------------------------------------------------
mkdir -p "$tmp/format1/checkpoints"
cp -r "$tmp/full/checkpoints/step_00000012" "$tmp/format1/checkpoints/"
"$SO_PYTHON" - "$tmp/format1/checkpoints/step_00000012" <<'PY' || fail "making a format-1 checkpoint"
import json, os, sys, zlib, h5py
directory = sys.argv[1]
manifest = json.load(open(f"{directory}/manifest.json"))
manifest["format_version"] = 1
text = json.dumps(manifest, indent=1)
open(f"{directory}/manifest.json", "w").write(text)
done = {"manifest_crc32": zlib.crc32(text.encode()), "files": {}}
for k in range(manifest["world_size"]):
    name = f"rank_{k:05d}.h5"
    with h5py.File(f"{directory}/{name}", "r") as new, h5py.File(f"{directory}/{name}.old", "w") as old:
        def copy(path, item):
            if isinstance(item, h5py.Dataset):  # format 1: chunked, Fletcher32, no CRC32C attributes
                old.create_dataset(path, data=item[...], chunks=True, fletcher32=True)
        new.visititems(copy)
    os.replace(f"{directory}/{name}.old", f"{directory}/{name}")
    data = open(f"{directory}/{name}", "rb").read()
    done["files"][name] = {"bytes": len(data), "crc32": zlib.crc32(data)}
open(f"{directory}/DONE", "w").write(json.dumps(done))
PY
out=$("$SO_BIN" inspect "$tmp/format1/checkpoints/step_00000012" 2>&1) || fail "inspect of format 1: $out"
expect_contains "$out" "format 1" "format 1 inspected"
expect_contains "$out" "match their recorded sizes and CRC32" "format 1 verified"
train 2 "$tmp/format1" > "$tmp/format1.log" 2>&1 || fail "resume from format 1: $(tail -20 "$tmp/format1.log")"
expect_contains "$(cat "$tmp/format1.log")" "resumed from $tmp/format1/checkpoints/step_00000012: step 12" "format 1 resumed"
"$SO_PYTHON" - "$tmp/full/metrics.h5" "$tmp/format1/metrics.h5" <<'PY' || fail "format 1 resumed differently"
import sys, h5py, numpy as np
full, resumed = (h5py.File(p, "r") for p in sys.argv[1:3])
assert list(resumed["train/step"][...]) == [13, 14, 15, 16], resumed["train/step"][...]
assert np.array_equal(full["train/loss"][12:], resumed["train/loss"][...]), (full["train/loss"][12:], resumed["train/loss"][...])
print("format 1: steps 13-16 bit-identical to the format-2 run")
PY
echo "format 1 checkpoints still resume, bit-identical"

# ---- 5. Background saves hold what synchronous ones hold ----------------------------------------
# 2 ranks, SuperOffload off (its speculated replays make two runs equal only to round-off): the
# runs differ in async_save alone, so their step-4 checkpoints must be equal element for element
# (step 5 trains while the background save of step 4 waits: its write starts 3 s late). At
# 2 ranks most layers' shards are one sub-group, whose export is the state itself (cloned).
# (At 1 rank with 2 threads, this comparison failed once on a CI machine, layer 0's exp_avg
# differing, and never in 58 pairs here; 2 ranks of 1 thread are what section 1 already shows
# reproducible there. The failure report below says whether the runs had diverged before the save.)
for dtype in fp32 bf16; do
  for mode in sync async; do
    SUPEROFFLOAD_TEST_BACKGROUND_SAVE_DELAY_MS=3000 train 2 "$tmp/$mode-$dtype" --set training.max_steps=5 \
      --set checkpoint.save_on_exit=false --set offload.super_offload=false --set offload.optimizer_state_dtype="\"$dtype\"" \
      --set checkpoint.async_save=$([[ $mode == async ]] && echo true || echo false) \
      > "$tmp/$mode-$dtype.log" 2>&1 || fail "$mode save, $dtype moments: $(tail -20 "$tmp/$mode-$dtype.log")"
  done
  expect_contains "$(cat "$tmp/async-$dtype.log")" "written in the background" "background save, $dtype moments"
  "$SO_PYTHON" - "$tmp/sync-$dtype/checkpoints/step_00000004" "$tmp/async-$dtype/checkpoints/step_00000004" <<'PY' \
    || fail "the background save with $dtype moments differs from the synchronous one"
import sys, h5py, numpy as np
differ, count = [], 0
for rank in (0, 1):
    a, b = (h5py.File(f"{d}/rank_{rank:05d}.h5", "r") for d in sys.argv[1:3])
    names = []
    a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) and n.startswith("layers/") else None)
    assert names, f"no layer datasets in rank {rank}'s file"
    count += len(names)
    for n in names:
        x, y = a[n][...], b[n][...]
        if not np.array_equal(x, y):
            differ.append(f"rank {rank} {n}: {int(np.sum(x != y))} of {x.size} elements, "
                          f"largest difference {float(np.max(np.abs(x - y)))}")
if differ:
    # Which it is: the runs trained differently before the save (their losses or gradient norms
    # differ by step 4), or the background save holds other values than the state it copied.
    runs = [h5py.File(f"{d}/../../metrics.h5", "r") for d in sys.argv[1:3]]
    for key in ("train/loss", "train/grad_norm"):
        if key in runs[0] and key in runs[1]:
            print(key, "sync:", runs[0][key][:5].tolist(), "async:", runs[1][key][:5].tolist())
    sys.exit("\n".join(differ))
print(f"{count} datasets of 2 ranks equal")
PY
done
echo "background saves equal synchronous ones (fp32 and bf16 moments)"
