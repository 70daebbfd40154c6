package dataplane

// Reason is enum lfp_reason of bpf/include/linuxfp_types.h: why a packet went to Linux, or
// Forwarded. TestReasonsMatchHeader keeps the two lists in the same order.
type Reason uint32

const (
	Forwarded Reason = iota
	PassNotIP
	PassNotForUs
	PassFamilyOff
	PassMalformed
	PassIPOptions
	PassFragment
	PassBadChecksum
	PassTTL
	PassMartianSrc
	PassMartianDst
	PassLocalSrc
	PassV6HopByHop
	PassICMPError
	PassFIBNotForwarded
	PassFIBBlackhole
	PassFIBUnreachable
	PassFIBProhibit
	PassFIBForwardingDisabled
	PassFIBLwtunnel
	PassFIBNoNeighbour
	PassFIBFragNeeded
	PassFIBOther
	PassRouteMTU
	PassHairpin
	PassEgressNotReady
	PassNeighbourStale
	PassSCTPOffload
	Bridged
	PassBridgePortState
	PassBridgeConfig
	PassBridgeFlood
	PassBridgeSrcUnknown
	PassBridgeDstUnknown
	PassBridgeLocal
	PassBridgeEgress
	PassBridgeNetfilter
	FilterDropped
	PassFilter
	PassFilterHeaders
	PassGSO
	PassCTNew
	PassCTNAT
	PassCTState
	PassCTLiberal
	PassCTProto
	Encapsulated
	PassEncap
	Decapsulated
	PassVXLAN
	PassCTInvalid
	PassCTChecksum
	ToTC
	PassReloading
	PassApplyFailed
	PassFenced
	PassMultiBuffer
	PassBridgeRefresh
	PassNeighLost
	PassCTAcct
	PassCTTimeout
	numReasons
)

// reasonNames are the names shown by `linuxfp status`, in enum order.
var reasonNames = [numReasons]string{
	"forwarded",
	"not_ip",
	"not_for_us",
	"family_off",
	"malformed",
	"ip_options",
	"fragment",
	"bad_checksum",
	"ttl_exceeded",
	"martian_source",
	"martian_destination",
	"local_source",
	"ipv6_hop_by_hop",
	"icmp_error",
	"fib_not_forwarded",
	"fib_blackhole",
	"fib_unreachable",
	"fib_prohibit",
	"fib_forwarding_disabled",
	"fib_lwtunnel",
	"fib_no_neighbour",
	"fib_frag_needed",
	"fib_other",
	"route_mtu",
	"hairpin",
	"egress_not_ready",
	"neighbour_stale",
	"sctp_checksum_offload",
	"bridged",
	"bridge_port_state",
	"bridge_config",
	"bridge_flood",
	"bridge_source_unknown",
	"bridge_destination_unknown",
	"bridge_local",
	"bridge_egress",
	"bridge_netfilter",
	"filter_dropped",
	"filter",
	"filter_headers",
	"gso",
	"ct_new",
	"ct_nat",
	"ct_state",
	"ct_not_liberal",
	"ct_protocol",
	"encapsulated",
	"encap_failed",
	"decapsulated",
	"vxlan_rx",
	"ct_invalid",
	"ct_checksum",
	"to_tc",
	"reloading",
	"apply_failed",
	"fenced",
	"multi_buffer",
	"bridge_refresh",
	"neighbour_mirror_lost",
	"ct_accounting",
	"ct_timeout_policy",
}

// ReasonByName is the reason `linuxfp status` shows as name.
func ReasonByName(name string) (Reason, bool) {
	for r, n := range reasonNames {
		if n == name {
			return Reason(r), true
		}
	}
	return 0, false
}

// FastPathed: the reason says the fast path took the packet (routed or bridged).
func (r Reason) FastPathed() bool {
	return r == Forwarded || r == Bridged || r == FilterDropped || r == Encapsulated || r == Decapsulated
}

// NumReasons is LFP_REASON_MAX.
const NumReasons = int(numReasons)

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}
