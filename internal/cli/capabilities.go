package cli

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Capability is one Linux capability `linuxfp run` checks for, and what it is used for. Found
// by running linuxfp with each one dropped in turn (setpriv --bounding-set), on Linux 6.18:
//
//   - without CAP_BPF no map can be created; without CAP_PERFMON the verifier treats linuxfp
//     as unprivileged and rejects the data plane (pointer arithmetic on packet and map values),
//     and the tp_btf netlink watcher cannot load; without CAP_NET_ADMIN neither XDP, tcx nor the
//     cgroup/sysctl program attaches, nor can nf_tables and conntrack be read; without
//     CAP_NET_BROADCAST the link events of veth peers' namespaces cannot be subscribed to
//     (NETLINK_LISTEN_ALL_NSID).
//   - CAP_SYS_ADMIN is not needed to attach the cgroup/sysctl or the tp_btf program. It is
//     needed to enter a veth peer's namespace (setns), which is how linuxfp reads a container
//     veth's peer (checksum offload, MTU, XDP), and to mount cgroup2 where none is mounted (as
//     under `ip netns exec`). Without it those peers are "not inspected" (tc, no delivery into
//     the container with bpf_redirect_peer) and sysctls are polled: slower, still exact.
//   - CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH find a peer's namespace held only by another
//     user's process (/proc/PID/ns/net; namespaces under /run/netns need neither).
type Capability struct {
	Name string // as in capabilities(7): CAP_NET_ADMIN
	Bit  int
	// Required: `linuxfp run` refuses to start without it. The others it uses where they are
	// held, and says once what is lost without them.
	Required bool
	Why      string
}

// RunCapabilities are the capabilities `linuxfp run` checks for: the one list the files under
// deploy/ are tested against (the systemd units grant all of them, the Kubernetes DaemonSet the
// required ones: its manifest says why).
var RunCapabilities = []Capability{
	{Name: "CAP_BPF", Bit: unix.CAP_BPF, Required: true, Why: "create maps, load programs"},
	{Name: "CAP_PERFMON", Bit: unix.CAP_PERFMON, Required: true, Why: "load the data plane as a privileged program, load the tp_btf watcher"},
	{Name: "CAP_NET_ADMIN", Bit: unix.CAP_NET_ADMIN, Required: true, Why: "attach XDP, tcx and cgroup/sysctl programs, read nf_tables and conntrack"},
	{Name: "CAP_NET_BROADCAST", Bit: unix.CAP_NET_BROADCAST, Required: true, Why: "follow link events in veth peers' namespaces"},
	{Name: "CAP_SYS_ADMIN", Bit: unix.CAP_SYS_ADMIN, Why: "enter veth peers' namespaces (containers: tc>peer delivery), mount cgroup2 where none is mounted"},
	{Name: "CAP_SYS_PTRACE", Bit: unix.CAP_SYS_PTRACE, Why: "find veth peers' namespaces held by other users' processes"},
	{Name: "CAP_DAC_READ_SEARCH", Bit: unix.CAP_DAC_READ_SEARCH, Why: "list other users' processes' namespaces"},
}

// effectiveCaps reads this process's effective capability set.
func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("capget: %w", err)
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective), nil
}

// missingCaps splits the capabilities not in eff into required and optional ones.
func missingCaps(eff uint64) (required, optional []Capability) {
	for _, c := range RunCapabilities {
		if eff&(1<<c.Bit) != 0 {
			continue
		}
		if c.Required {
			required = append(required, c)
		} else {
			optional = append(optional, c)
		}
	}
	return required, optional
}

func capNames(cs []Capability) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Name)
	}
	return strings.Join(s, ", ")
}
