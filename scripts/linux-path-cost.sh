#!/bin/bash
# What linuxfp's netlink watcher (tp_btf/consume_skb, run for every skb the host consumes) costs
# traffic that only Linux handles: a stream between two namespaces joined by a veth, with
# linuxfp running in a third, unrelated one; the watcher's own run time from the kernel's BPF
# statistics.
# Usage: sudo scripts/linux-path-cost.sh bin/linuxfp            (TCP)
#        sudo IPERF_ARGS="-u -b 0 -l 64" scripts/linux-path-cost.sh bin/linuxfp   (small UDP)
# Needs iperf3 and bpftool. Namespaces lfplp-a/b/c, removed on exit.
set -euo pipefail
LFP=$(realpath "$1")
TMP=$(mktemp)
A=lfplp-a B=lfplp-b C=lfplp-c
PID=
cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
	sysctl -qw kernel.bpf_stats_enabled=0
	for n in $A $B $C; do ip netns del $n 2>/dev/null || true; done
	rm -f "$TMP"
}
trap cleanup EXIT
for n in $A $B $C; do ip netns add $n; ip -n $n link set lo up; done
ip -n $A link add v0 type veth peer name v1 netns $B
ip -n $A addr add 198.18.50.1/24 dev v0
ip -n $B addr add 198.18.50.2/24 dev v1
ip -n $A link set v0 up
ip -n $B link set v1 up
ip netns exec $C "$LFP" run >/dev/null 2>&1 &
PID=$!
sleep 2
sysctl -qw kernel.bpf_stats_enabled=1
ip netns exec $B iperf3 -s -1 -D >/dev/null 2>&1
sleep 0.3
ip netns exec $A iperf3 -c 198.18.50.2 -t 8 -J ${IPERF_ARGS:-} >"$TMP"
python3 - "$TMP" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["end"]
s = e.get("sum_received") or e.get("sum")
print("stream %.2f Gbit/s%s" % (s["bits_per_second"] / 1e9, ", %d packets" % s["packets"] if "packets" in s else ""))
PY
bpftool prog show -j | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("name", "").startswith(("lfp_nl_consumed", "lfp_fdb_")):
        n, t = p.get("run_cnt", 0), p.get("run_time_ns", 0)
        print("%s: %d runs, %.1f ns each (with the statistics'"'"' own cost), %.3f s of CPU over the 8 s stream" % (p["name"], n, t / max(n, 1), t / 1e9))'
