#!/bin/bash
# Time from an `iptables -A` to the fence opening, with a 1,000,000-entry ipset used by an
# ip6tables rule. Usage: bigset.sh LINUXFP_BIN
BIN=$1 NS=lfpbig$$
trap 'kill $PID 2>/dev/null; sleep 0.3; ip netns del $NS 2>/dev/null' EXIT
ip netns add $NS
ip -n $NS link set lo up
ip -n $NS link add lfpv0 type veth peer name lfpv1
ip -n $NS link set lfpv0 up; ip -n $NS link set lfpv1 up
python3 -c '
print("create lfpbig hash:ip family inet6 maxelem 2000000")
for i in range(1000000):
    print("add lfpbig 2001:2::%x:%x" % (i >> 16, i & 0xffff))' | ip netns exec $NS ipset restore
ip netns exec $NS ip6tables -A FORWARD -m set --match-set lfpbig dst -j DROP
ip netns exec $NS $BIN run >/dev/null 2>&1 & PID=$!
fenced() { ip netns exec $NS $BIN status -j 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d.get("fenced") or []), d.get("applies",0))' 2>/dev/null; }
for i in $(seq 1 200); do sleep 0.1; f=$(fenced); [ "${f%% *}" = 0 ] && break; done
for k in 1 2 3; do
  t0=$(date +%s%N)
  ip netns exec $NS iptables -A FORWARD -d 198.19.9.$k -j ACCEPT
  while :; do f=$(fenced); [ "${f%% *}" = 0 ] && break; sleep 0.005; done
  t1=$(date +%s%N)
  echo "iptables -A #$k: fence open after $(( (t1-t0)/1000000 )) ms"
done
