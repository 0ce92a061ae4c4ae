#!/usr/bin/env bash
# Two "nodes" without a cluster: two network namespaces joined by a veth pair, each with its
# own address; mpirun runs in the first and starts its daemon in the second through a launcher
# agent that enters the namespace (tests/multinode/netns_agent.sh, in place of ssh); Open MPI
# talks TCP over the veth. Checks the node-local ranks and communicators superoffload derives
# (node 0 and 1, local ranks 0-1 on each) and that training on 2 x 2 ranks gives the losses of
# the same 4 ranks on one node.
source "$(dirname "$0")/../cli/lib.sh"
cd "$SO_SOURCE_DIR"
if ! ip netns add "so-probe-$$" 2>/dev/null; then
  echo "SKIPPED: cannot create network namespaces here (needs root / CAP_SYS_ADMIN)"
  exit 0
fi
ip netns del "so-probe-$$"

a=so-a-$$ b=so-b-$$
cleanup() {
  ip netns pids "$a" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
  ip netns pids "$b" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
# A private /24 that exists only between the two namespaces this test owns.
net=10.213.$((RANDOM % 200 + 20))
ip netns add "$a" && ip netns add "$b" || fail "ip netns add"
ip link add "va$$" type veth peer name "vb$$" || fail "veth pair"
ip link set "va$$" netns "$a" && ip link set "vb$$" netns "$b" || fail "moving the veth ends"
ip -n "$a" addr add "$net.1/24" dev "va$$" && ip -n "$b" addr add "$net.2/24" dev "vb$$" || fail "addresses"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "va$$" up && ip -n "$b" link set "vb$$" up || fail "links up"

export SO_NETNS_MAP="$net.1=$a $net.2=$b"
# mpirun runs on the first "node" (its namespaces, its hostname); Open MPI's node map then
# holds two distinct nodes.
cluster_mpirun() {
  ip netns exec "$a" unshare --uts /bin/sh -c 'hostname "$0"; exec "$@"' "$a" \
    "$MPIEXEC" --mca plm_rsh_agent "$SO_SOURCE_DIR/tests/multinode/netns_agent.sh" \
    --mca oob_tcp_if_include "$net.0/24" --mca btl_tcp_if_include "$net.0/24" \
    -H "$net.1:2,$net.2:2" -np 4 --oversubscribe "$@"
}

out=$(cluster_mpirun "$SO_BIN" version 2>&1) || fail "version across the namespaces: $out"
table=$(grep -E "^[0-3] +so-" <<<"$out")
# rank host node local ...: ranks 0,1 on node 0 and 2,3 on node 1, local ranks 0 and 1.
while read -r rank host node local _; do
  [[ $node == $((rank / 2)) && $local == $((rank % 2)) ]] || fail "rank $rank: node $node local $local: $out"
done <<<"$table"
[[ $(wc -l <<<"$table") == 4 ]] || fail "expected 4 ranks in the table: $out"
expect_contains "$out" "2 node(s)" "two nodes"
[[ $(grep -cE "^node [01] \(so-.*\): resctrl" <<<"$out") == 2 ]] || fail "expected one resctrl line per node: $out"

"$SO_DEMO_CORPUS" "$tmp/corpus.jsonl" --tokens 40000 > /dev/null || fail "demo corpus"
train_args=(train configs/tiny.toml --set data.path="$tmp/corpus.jsonl" --set data.seq_len=32
            --set training.train_micro_batch_size_per_gpu=1 --set training.max_steps=6 --set checkpoint.save_on_exit=false)
cluster_mpirun "$SO_BIN" "${train_args[@]}" --set training.output_dir="$tmp/two-nodes" > "$tmp/two.log" 2>&1 \
  || fail "training across the namespaces: $(tail -20 "$tmp/two.log")"
expect_contains "$(cat "$tmp/two.log")" "4 rank(s) on 2 node(s)" "two-node training"
"$MPIEXEC" -np 4 --oversubscribe "$SO_BIN" "${train_args[@]}" --set training.output_dir="$tmp/one-node" > "$tmp/one.log" 2>&1 \
  || fail "training on one node: $(tail -20 "$tmp/one.log")"
"$SO_PYTHON" - "$tmp/one-node/metrics.h5" "$tmp/two-nodes/metrics.h5" <<'PY' || fail "losses differ between one and two nodes"
import sys, h5py, numpy as np
one, two = (h5py.File(p, "r")["train/loss"][...] for p in sys.argv[1:3])
assert one.shape == two.shape == (6,)
difference = float(np.max(np.abs(one - two) / np.abs(one)))
assert difference <= 1e-6, f"relative difference {difference}:\n{one}\n{two}"
print(f"6 losses on 2 namespace nodes equal the single-node run's (max relative difference {difference:.1e})")
PY
echo "multinode: 2 namespaces x 2 ranks over TCP; node-local ranks right; losses match one node"
