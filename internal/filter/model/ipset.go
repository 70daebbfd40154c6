package model

import (
	"fmt"
	"net/netip"
)

// IPSet is an ipset set as the kernel holds it (read by package ipset). `-m set` matches refer to
// sets by name; the evaluator tests membership the way the kernel's set types do.
type IPSet struct {
	Name string
	// Type is the ipset type name: hash:ip, hash:net, hash:ip,port, hash:net,port are modelled.
	Type string
	// Family of the set's addresses (a set matches only packets of its family).
	Family Family
	// Index is the kernel's index of the set: xt_set matches refer to sets by it.
	Index uint16
	// Netmask (hash:ip `netmask N`): addresses are stored and looked up masked to N bits; 0
	// when the set has none.
	Netmask int
	// Timeout: entries expire (`timeout N`). ipset sends no event when one does.
	Timeout bool
	// Unsupported says why membership in this set is not modelled (an unmodelled type, an
	// option that changes lookups); empty when it is.
	Unsupported string
	Entries     []SetEntry
	// Nft: an nf_tables set of addresses (`ip daddr @blocklist`), read with the rules and
	// modelled as a hash:net covering its members (package nft); Name is nft.SetName's, which no
	// ipset can have. Index is not the kernel's.
	Nft bool
}

// SetEntry is one member. Prefix is the address (a host prefix for hash:ip and hash:ip,port).
// Proto and Port are the port dimension of hash:ip,port and hash:net,port: the port of TCP, UDP,
// SCTP and UDPlite; type<<8|code for ICMP and ICMPv6; 0 for other protocols.
type SetEntry struct {
	Prefix  netip.Prefix
	Proto   uint8
	Port    uint16
	NoMatch bool // hash:net(,port) `nomatch`: addresses in it do not match
}

func (e SetEntry) String() string {
	s := e.Prefix.String()
	if e.Proto != 0 || e.Port != 0 {
		s += fmt.Sprintf(",%s:%d", ProtoName(e.Proto), e.Port)
	}
	if e.NoMatch {
		s += " nomatch"
	}
	return s
}

// Dimensions is the number of dimensions of a set type (hash:ip,port has 2); 0 when the type is
// not modelled.
func Dimensions(typ string) int {
	switch typ {
	case "hash:ip", "hash:net":
		return 1
	case "hash:ip,port", "hash:net,port":
		return 2
	}
	return 0
}
