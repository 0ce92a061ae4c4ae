#!/usr/bin/env python3
"""A resctrl tree in a plain directory, and a stand-in for the kernel's side of it, for the
tests of a machine without resctrl (the kernel's checks are not exercised).

    fake_resctrl.py make LAYOUT DIR      writes the tree of LAYOUT (grace, sapphire-rapids) at
                                         DIR, and DIR.mounts: a mount table naming it
    fake_resctrl.py kernel DIR LOG       until DIR/.stop exists: gives every group made under
                                         DIR the counters the kernel would (mon_data/mon_L3_NN/
                                         mbm_total_bytes growing by 1 GB/s per task in the
                                         group, llc_occupancy) and appends to LOG, as JSON lines,
                                         each group's schemata and its tasks with their thread
                                         names and process ids, whenever they change

The layouts are those of tests/unit/resctrl_fake_trees.hpp, which names the sources of their values.
"""
import json
import os
import sys
import time
from pathlib import Path

LAYOUTS = {
    "grace": {
        "info/L3/cbm_mask": "fff", "info/L3/min_cbm_bits": "1", "info/L3/num_closids": "32",
        "info/MB/bandwidth_gran": "1", "info/MB/delay_linear": "1", "info/MB/min_bandwidth": "1",
        "info/MB/num_closids": "32",
        "info/L3_MON/num_rmids": "32", "info/L3_MON/mon_features": "llc_occupancy\nmbm_total_bytes",
        "info/last_cmd_status": "ok", "schemata": "L3:1=fff\nMB:1=100", "tasks": "1",
    },
    "sapphire-rapids": {
        "info/L3/cbm_mask": "7fff", "info/L3/min_cbm_bits": "1", "info/L3/num_closids": "15",
        "info/L3/shareable_bits": "0",
        "info/MB/bandwidth_gran": "10", "info/MB/delay_linear": "1", "info/MB/min_bandwidth": "10",
        "info/MB/num_closids": "8",
        "info/L3_MON/num_rmids": "224",
        "info/L3_MON/mon_features": "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes",
        "info/last_cmd_status": "ok", "schemata": "    L3:0=7fff;1=7fff\n    MB:0=100;1=100", "tasks": "1",
    },
}
GB = 1_000_000_000


def make(layout, root):
    root = Path(root)
    for relative, text in LAYOUTS[layout].items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    (root / "mon_groups").mkdir(exist_ok=True)
    Path(str(root) + ".mounts").write_text(f"resctrl {root} resctrl rw,relatime 0 0\n")


def groups(root):
    for base in (root, root / "mon_groups"):
        for path in sorted(base.iterdir()) if base.is_dir() else []:
            if path.is_dir() and path.name not in ("info", "mon_groups", "mon_data"):
                yield path


def thread(tid):
    """(name, process id) of a thread, or None when it has ended."""
    try:
        name = Path(f"/proc/{tid}/comm").read_text().strip()
        tgid = next(int(line.split()[1]) for line in Path(f"/proc/{tid}/status").read_text().splitlines()
                    if line.startswith("Tgid:"))
        return name, tgid
    except (OSError, StopIteration):
        return None


def last_seen(log):
    """{group: its last logged state while its threads ran} from a kernel LOG. Two later states
    do not count: after a run the threads are gone (the kernel logs the group once more with
    their names unknown), and while the program removes a group, file by file, the kernel may
    poll between the removal of `tasks` and the rmdir and log the group with no tasks."""
    def running(state):  # (some thread of it alive, all of them alive)
        alive = [info is not None for info in state["tasks"].values()]
        return any(alive), bool(alive) and all(alive)

    last = {}
    for line in open(log):
        state = json.loads(line)
        some, every = running(state)
        # a state where every listed thread runs is preferred; one where only some do (a
        # short-lived thread of the rank ended in it) is kept only until such a state comes
        if state["group"] not in last or every or (some and not running(last[state["group"]])[1]):
            last[state["group"]] = state
    return last


def write_atomically(path, text):
    """A reader sees the old value or the new one, as with the kernel's counters."""
    temporary = path.with_name(path.name + ".new")
    temporary.write_text(text)
    os.replace(temporary, path)


def kernel(root, log):
    root = Path(root)
    domains = sorted({int(entry.split("=")[0]) for line in (root / "schemata").read_text().splitlines()
                      if line.strip().startswith("L3:") for entry in line.split(":", 1)[1].split(";")})
    seen, last = {}, time.monotonic()
    with open(log, "a") as out:
        while not (root / ".stop").exists():
            time.sleep(0.05)
            now = time.monotonic()
            for group in groups(root):
                try:
                    tasks = [int(t) for t in (group / "tasks").read_text().split()] if (group / "tasks").exists() else []
                    schemata = (group / "schemata").read_text() if (group / "schemata").exists() else None
                    for domain in domains:
                        counters = group / "mon_data" / f"mon_L3_{domain:02d}"
                        counters.parent.mkdir(exist_ok=True)  # never remakes a group removed meanwhile
                        counters.mkdir(exist_ok=True)
                        total = counters / "mbm_total_bytes"
                        bytes_now = int(total.read_text()) if total.exists() else 0
                        write_atomically(total, f"{bytes_now + int(GB * len(tasks) * (now - last))}\n")
                        write_atomically(counters / "llc_occupancy", f"{1_048_576 * len(tasks)}\n")
                except (OSError, ValueError):
                    continue  # removed meanwhile
                state = {"group": str(group.relative_to(root)), "schemata": schemata,
                         "tasks": {str(t): thread(t) for t in tasks}}
                if seen.get(state["group"]) != state:
                    seen[state["group"]] = state
                    out.write(json.dumps(state) + "\n")
                    out.flush()
            last = now


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "kernel":
        kernel(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
