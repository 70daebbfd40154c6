package observe

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// readPacketTaps lists the devices a packet socket taps (tcpdump, or any AF_PACKET socket of
// protocol ETH_P_ALL): the kernel hands such a socket every frame a device receives before its
// tc ingress hook runs (ptype_all). Key 0: a socket of every device in the namespace. Sockets
// of one protocol (ptype_base) see a frame only after tc has let it through, and are not
// listed. /proc/net/packet shows this namespace's packet sockets; nothing announces a new one
// (no netlink event, no tracepoint), so the watcher polls it (pollLegacy). A list that cannot be
// read counts as a socket on every device: the frames keep the device's receive path.
func readPacketTaps() map[int]bool {
	unknown := map[int]bool{0: true}
	f, err := os.Open("/proc/net/packet")
	if err != nil {
		return unknown
	}
	defer f.Close()
	var taps map[int]bool
	sc := bufio.NewScanner(f)
	sc.Scan() // sk RefCnt Type Proto Iface R Rmem User Inode
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		proto, err1 := strconv.ParseUint(fields[3], 16, 16)
		iface, err2 := strconv.Atoi(fields[4])
		if err1 != nil || err2 != nil || proto != 0x0003 || fields[5] != "1" { // ETH_P_ALL, running
			continue
		}
		if taps == nil {
			taps = map[int]bool{}
		}
		taps[iface] = true
	}
	if sc.Err() != nil {
		return unknown
	}
	return taps
}
