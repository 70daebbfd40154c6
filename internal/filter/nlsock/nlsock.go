// Package nlsock holds what the netfilter readers (nft, ipset) share about their netlink sockets.
package nlsock

import "io"

// CloseLater closes a NETLINK_NETFILTER socket without waiting for it. Closing one runs
// nf_tables' socket-release handler (nft_rcv_nl_event), which takes the commit mutex and first
// waits for the destruction of what the last commit deleted, an RCU grace period: 10-15 ms on
// the AMD VM after an `iptables -D`. linuxfp reads the ruleset right after such a commit (the
// fence woke it), and its family's packets go to Linux until the read is applied; a close that
// waited would add that grace period to every rule deletion. Nothing needs the close to have
// happened: the socket is not used again.
func CloseLater(c io.Closer) {
	go c.Close()
}
