#!/usr/bin/env bash
# DeepSpeed's monitors on the tiny model (2 ranks, 6 steps): [metrics] tensorboard writes
# events.out.tfevents.* that TensorBoard's own reader (the `tensorboard` package) reads back,
# every scalar equal to metrics.h5's under DeepSpeed's tags against samples seen; [metrics] csv
# writes one CSV per series as DeepSpeed's csv_monitor does. Both import from DeepSpeed JSON.
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 30000 > /dev/null || fail "demo corpus"
cat > "$tmp/ds.json" <<'JSON'
{"train_batch_size": 4, "bf16": {"enabled": false}, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3, "warmup_type": "linear"}},
 "zero_optimization": {"stage": 3, "sub_group_size": 1e6, "offload_optimizer": {"device": "cpu"}},
 "tensorboard": {"enabled": true, "output_path": "OUT/monitors", "job_name": "tiny_job"},
 "csv_monitor": {"enabled": true, "output_path": "OUT/monitors", "job_name": "tiny_job"}}
JSON
sed -i "s|OUT|$tmp|g" "$tmp/ds.json"
"$MPIEXEC" -np 2 --oversubscribe "$SO_BIN" train --deepspeed-config "$tmp/ds.json" \
  --set model.path=configs/models/tiny-llama --set model.init=random --set data.path="$tmp/corpus.jsonl" \
  --set data.seq_len=32 --set training.max_steps=6 --set runtime.device=cpu \
  --set training.output_dir="$tmp/run" --set checkpoint.save_on_exit=false > "$tmp/train.log" 2>&1 ||
  fail "train: $(tail -20 "$tmp/train.log")"
ls "$tmp/monitors/tiny_job"/events.out.tfevents.* > /dev/null 2>&1 || fail "no event file in $tmp/monitors/tiny_job"
"$SO_PYTHON" - "$tmp/run/metrics.h5" "$tmp/monitors/tiny_job" <<'PY' || fail "the monitors disagree with metrics.h5"
import csv, glob, os, sys
import h5py, numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

train = h5py.File(sys.argv[1], "r")["train"]
job = sys.argv[2]
samples = train["step"][...] * 4  # DeepSpeed's x axis: samples seen (train_batch_size 4)
expected = {"Train/Samples/train_loss": train["loss"][...], "Train/Samples/lr": train["lr"][...],
            "Train/Samples/grad_norm": train["grad_norm"][...],
            "Train/Samples/elapsed_time_ms_step": 1000 * train["step_time_s"][...],
            "Train/Samples/tokens_per_s": train["tokens_per_s"][...]}
events = EventAccumulator(job)  # TensorBoard's reader checks the record framing and CRCs
events.Reload()
assert sorted(events.Tags()["scalars"]) == sorted(expected), events.Tags()["scalars"]
for tag, values in expected.items():
    got = events.Scalars(tag)
    assert [e.step for e in got] == list(samples), (tag, [e.step for e in got])
    # TensorBoard scalars are float32.
    assert np.array_equal(np.array([e.value for e in got], np.float32), values.astype(np.float32)), tag
    path = os.path.join(job, tag.replace("/", "_") + ".csv")
    with open(path) as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["step", tag.split("/")[-1]], rows[0]
    assert [int(r[0]) for r in rows[1:]] == list(samples), path
    assert np.array_equal(np.array([float(r[1]) for r in rows[1:]]), values), path  # CSV keeps full precision
# The record framing, checked independently of TensorBoard: length, masked CRC32C of the
# length, data, masked CRC32C of the data (TFRecord's format).
import crc32c, struct
def masked(data):
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
(path,) = glob.glob(job + "/events.out.tfevents.*")
raw, at, records = open(path, "rb").read(), 0, 0
while at < len(raw):
    (length,), (length_crc,) = struct.unpack_from("<Q", raw, at), struct.unpack_from("<I", raw, at + 8)
    assert length_crc == masked(raw[at:at + 8]), f"record {records}: length CRC"
    data = raw[at + 12:at + 12 + length]
    assert struct.unpack_from("<I", raw, at + 12 + length)[0] == masked(data), f"record {records}: data CRC"
    at, records = at + 16 + length, records + 1
assert records == 1 + 5 * 6, records  # the file version, then 5 scalars per step
print("TensorBoard and CSV: 5 series x 6 steps equal to metrics.h5;", len(glob.glob(job + "/*.csv")), "CSV files;",
      records, "records with valid CRCs")
PY
expect_contains "$(cat "$tmp/train.log")" "[metrics] tensorboard = true" "the import of tensorboard is noted"
echo "monitors: ok"
