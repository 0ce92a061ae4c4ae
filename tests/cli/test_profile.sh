#!/usr/bin/env bash
# [profile] step on the tiny model (2 ranks, 4 steps, profile of step 3): metrics.h5 /profile
# has one row per layer with every phase timed on both ranks; the layers' model FLOPs add up to
# the step's (metrics' model TFLOPS × step time); the table is logged and written to
# output_file; the losses equal, bit for bit, those of the same run without the profile.
# With SO_PROFILE_DEVICE=cuda (the gpu test gpu_profile): one rank on the GPU, where the
# phases are timed with CUDA events; skipped where no GPU is visible.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"
on_device "${SO_PROFILE_DEVICE:-cpu}"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 30000 > /dev/null || fail "demo corpus"
train_short "$tmp/plain" > "$tmp/plain.log" 2>&1 || fail "run without the profile: $(tail -20 "$tmp/plain.log")"
train_short "$tmp/profiled" --set profile.step=3 --set profile.top_layers=3 --set profile.output_file="$tmp/profile.txt" \
  > "$tmp/profiled.log" 2>&1 || fail "profiled run: $(tail -20 "$tmp/profiled.log")"
log=$(cat "$tmp/profiled.log")
ranks_text=$( ((ranks == 1)) && echo "1 rank" || echo "$ranks ranks")
expect_contains "$log" "profile of step 3 (ms, mean over $ranks_text): the 3 slowest of 8 layers" "the logged table"
expect_contains "$log" "all layers" "the table's total"
[[ $(grep -c "^  model\.\|^  lm_head" "$tmp/profile.txt") == 3 ]] || fail "output_file: $(cat "$tmp/profile.txt")"
"$SO_PYTHON" - "$tmp/plain/metrics.h5" "$tmp/profiled/metrics.h5" "$ranks" <<'PY' || fail "the profile in metrics.h5"
import json, sys, h5py, numpy as np
plain, profiled = (h5py.File(p, "r") for p in sys.argv[1:3])
ranks = int(sys.argv[3])
assert np.array_equal(plain["train/loss"][...], profiled["train/loss"][...]), "profiling changed the losses"
p = profiled["profile"]
seconds = p["seconds"][...]
text = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # fixed-length string attributes read as bytes
layers = json.loads(text(p["seconds"].attrs["layers"]))
phases = text(p["seconds"].attrs["phases"]).split(",")
assert seconds.shape == (ranks, 8, 6) and len(layers) == 8, (seconds.shape, layers)
assert phases == ["gather", "forward", "recompute", "backward", "reduce", "optimizer"], phases
assert layers[0] == "model.embed_tokens" and layers[-1] == "lm_head", layers
assert np.all(np.isfinite(seconds)) and np.all(seconds >= 0), seconds
assert np.all(seconds[:, :, 1] > 0) and np.all(seconds[:, :-1, 3] > 0), "every layer's forward and backward is timed"
assert np.all(seconds[:, 1:-1, 2] > 0) and np.all(seconds[:, -1, 2] == 0), "blocks are recomputed, the head is not"
assert np.all(seconds[:, :, 5] > 0), "every layer's optimizer share is timed (all sub-groups on the CPU)"
# The layers' model FLOPs add up to the step's (what MFU counts): TFLOPS per device × step time.
t = profiled["train"]
row = list(t["step"][...]).index(3)
step_flops = t["model_tflops_per_device"][row] * 1e12 * t["step_time_s"][row]
total = p["model_flops"][...].sum()
assert abs(total - step_flops) <= 1e-9 * step_flops, (total, step_flops)
assert np.all(p["executed_flops"][...] >= p["model_flops"][...])
assert p["parameters"][...].sum() > 9e6 and np.all(p["achieved_tflops"][...] > 0)
print(f"profile: 8 layers x 6 phases x {ranks} rank(s); FLOPs {total:.4g} = the step's {step_flops:.4g}; losses unchanged")
PY
echo "profile: ok"
