#!/usr/bin/env bash
# [profile] trace_steps on the tiny model (2 ranks, 4 steps, steps 2-3 traced): each rank writes
# a Chrome trace that Kineto made (JSON, both steps' annotations, our per-layer spans, aten
# operators) and its summary beside it; the summary's busy fraction and gaps equal what an
# independent reading of the trace file in Python finds; metrics.h5 /profile/trace holds both
# ranks' figures and summaries; the log and `inspect` print the summary; the losses equal, bit
# for bit, those of the same run without the trace; a malformed range is refused naming the key.
# With SO_TRACE_DEVICE=cuda (the gpu test gpu_trace): one rank on the GPU, whose summary has
# kernels, copies and the allocator's counts; skipped where no GPU is visible.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"
on_device "${SO_TRACE_DEVICE:-cpu}"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 30000 > /dev/null || fail "demo corpus"

# A range that is not one is refused before anything runs, naming the key and the value.
for bad in "3-2" "x"; do
  out=$(train_short "$tmp/bad" --set profile.trace_steps="$bad" 2>&1) && fail "trace_steps = \"$bad\" was accepted: $out"
  expect_contains "$out" "[profile] trace_steps = \"$bad\"" "the refusal of trace_steps = \"$bad\""
done

# One step may be written as a TOML integer; 0 is no step.
expect_contains "$("$SO_BIN" config configs/tiny.toml --set profile.trace_steps=3 2>&1)" 'trace_steps = "3"' \
  "trace_steps = 3 as an integer"
out=$("$SO_BIN" config configs/tiny.toml --set profile.trace_steps=0 2>&1) && fail "trace_steps = 0 was accepted: $out"

train_short "$tmp/plain" > "$tmp/plain.log" 2>&1 || fail "run without the trace: $(tail -20 "$tmp/plain.log")"
train_short "$tmp/traced" --set profile.trace_steps=2-3 > "$tmp/traced.log" 2>&1 ||
  fail "traced run: $(tail -20 "$tmp/traced.log")"
log=$(cat "$tmp/traced.log")
expect_contains "$log" "trace of rank 0 in $tmp/traced/traces/rank_0.steps_2-3.pt.trace.json" "the logged summary"
expect_contains "$log" "synchronising calls" "the logged summary's synchronisations"
expect_contains "$log" "  by class: " "the logged kernel (operator) time by class"
if [[ $device == cpu ]]; then
  expect_contains "$log" "top CPU operators, self time" "the logged operators"
  expect_contains "$log" "per rank:" "the logged per-rank lines"
  [[ $log != *"gpuGetDeviceCount"* ]] || fail "Kineto's GPU probe error reached a CPU run's log"
else
  expect_contains "$log" "top GPU kernels, total time" "the logged kernels"
fi
inspected=$("$SO_BIN" inspect "$tmp/traced" 2>&1) || fail "inspect: $inspected"
expect_contains "$inspected" "trace       rank 0: $tmp/traced/traces/rank_0.steps_2-3.pt.trace.json" "inspect's trace"
expect_contains "$inspected" "idle gaps over 0.5 ms" "inspect's gaps"

"$SO_PYTHON" - "$tmp/plain/metrics.h5" "$tmp/traced" "$ranks" "$device" <<'PY' || fail "the trace and its summary"
import json, sys, h5py, numpy as np
plain, run, ranks, device = h5py.File(sys.argv[1], "r"), sys.argv[2], int(sys.argv[3]), sys.argv[4]
traced = h5py.File(f"{run}/metrics.h5", "r")
assert np.array_equal(plain["train/loss"][...], traced["train/loss"][...]), "tracing changed the losses"
text = lambda v: v.decode() if isinstance(v, bytes) else str(v)

def independent_busy(trace):
    """Busy time and gaps over 0.5 ms per step, read from the trace file without the program."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    # The host's annotations: on a GPU Kineto mirrors each onto the device's timeline as a
    # gpu_user_annotation of the same name, spanning that step's kernels instead.
    steps = sorted((e for e in events if e["name"].startswith("superoffload/step ") and e.get("cat") == "user_annotation"),
                   key=lambda e: e["ts"])
    main = (steps[0]["pid"], steps[0]["tid"])
    if device == "cuda":
        work = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    else:
        ops = sorted((e for e in events if e.get("cat") == "cpu_op" and (e["pid"], e["tid"]) == main),
                     key=lambda e: (e["ts"], -e["dur"]))
        work, end = [], -1.0
        for e in ops:  # the outermost operators: those that start after every earlier one ended
            if e["ts"] >= end - 0.002:
                work.append(e)
            end = max(end, e["ts"] + e["dur"]) if e["ts"] >= end - 0.002 else end
    intervals = sorted((e["ts"], e["ts"] + e["dur"]) for e in work)
    merged = []
    for a, b in intervals:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        busy, cursor, gaps = 0.0, lo, 0
        for a, b in merged:
            a, b = max(a, lo), min(b, hi)
            if b <= a:
                continue
            if a - cursor >= 500:
                gaps += 1
            busy += b - a
            cursor = max(cursor, b)
        if hi - cursor >= 500:
            gaps += 1
        out.append((int(s["name"].split()[-1]), busy / (hi - lo), gaps))
    return out

summaries = json.loads(bytes(traced["profile/trace/summaries"][...]).decode())
assert len(summaries) == ranks, len(summaries)
figures = text(traced["profile/trace/ranks"].attrs["figures"]).split(",")
table = traced["profile/trace/ranks"][...]
assert table.shape == (ranks, len(figures)), (table.shape, figures)
for rank in range(ranks):
    path = f"{run}/traces/rank_{rank}.steps_2-3.pt.trace.json"
    trace = json.load(open(path))
    names = {e.get("name") for e in trace["traceEvents"]}
    for name in ("superoffload/step 2", "superoffload/step 3", "superoffload/forward#1", "superoffload/backward#1",
                 "superoffload/recompute#1", "superoffload/gather#1", "superoffload/optimizer step", "aten::mm"):
        assert name in names, f"{path} lacks {name}"
    assert "superoffload/step 1" not in names and "superoffload/step 4" not in names, "only steps 2-3 are traced"
    summary = json.load(open(f"{run}/traces/rank_{rank}.steps_2-3.summary.json"))
    assert summary == summaries[rank], "the summary file and metrics.h5 differ"
    assert "error" not in summary, summary["error"]
    assert summary["device"] == ("gpu" if device == "cuda" else "cpu"), summary["device"]
    assert [s["step"] for s in summary["steps"]] == [2, 3], summary["steps"]
    for (step, busy, gaps), row in zip(independent_busy(trace), summary["steps"]):
        assert step == row["step"] and abs(busy - row["busy_fraction"]) < 1e-9 and gaps == row["gaps"], \
            (step, busy, gaps, row)
    assert 0 < summary["busy_fraction"] <= 1, summary["busy_fraction"]
    top = summary["kernels"]["top"]
    assert top and sum(k["share"] for k in top) <= 1 + 1e-9, top
    assert all(k["seconds"] > 0 and k["calls"] > 0 for k in top), top
    # Every step reads the loss and counts its tokens on the host: at least those two.
    syncs = summary["syncs"]
    assert syncs["per_step"] >= 2, syncs
    where = {s["where"] for s in syncs["sources"]}
    # The read itself: .item() on the CPU; on a GPU the loss is copied to the host (aten::to).
    assert f"superoffload/loss read > {'aten::to' if device == 'cuda' else 'aten::item'}" in where, where
    assert sum(s["syncs"] for s in summary["steps"]) == syncs["count"], syncs
    gaps = summary["gaps"]
    assert gaps["count"] == sum(s["gaps"] for s in summary["steps"]) >= len(gaps["listed"]), gaps
    assert all(g["ms"] >= 0.5 for g in gaps["listed"]), gaps["listed"]
    row = dict(zip(figures, table[rank]))
    assert abs(row["busy_fraction"] - summary["busy_fraction"]) < 1e-12 and row["steps"] == 2, row
    if device == "cuda":
        assert summary["copies"], "a GPU step copies gradients to the host and weights back"
        assert {"retries", "device_allocs", "device_frees"} <= set(summary["allocator"]), summary.get("allocator")
        assert np.isfinite(row["htod_bytes"]) and np.isfinite(row["allocator_retries"]), row
    else:
        assert not summary["copies"] and "allocator" not in summary, summary
        assert np.isnan(row["htod_bytes"]) and np.isnan(row["allocator_retries"]), row
print(f"trace: {ranks} rank(s), steps 2-3; busy {summaries[0]['busy_fraction']:.3f}, "
      f"{summaries[0]['gaps']['count']} gaps, {summaries[0]['syncs']['per_step']:.1f} syncs per step; losses unchanged")
PY
echo "trace: ok"
