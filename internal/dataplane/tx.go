package dataplane

// The transmit module (bpf/lib/tx.h): the devices a program may redirect a packet to.

// TxData is what the transmit module reads.
type TxData struct {
	// TxDevs are the ifindexes an XDP program may redirect a frame to.
	TxDevs []int
	// TCTx are the devices a TC program may redirect an skb to, and how.
	TCTx []TCTx
}

// TCTx is a device a TC program may redirect an skb to (struct lfp_tc_tx).
type TCTx struct {
	Ifindex int
	// Peer: a veth into another namespace with nothing on its own transmit path: deliver with
	// bpf_redirect_peer(); PeerMTU is the peer's MTU.
	Peer    bool
	PeerMTU int
}

// txMaps mirror what the transmit module's maps hold.
type txMaps struct {
	txDevs map[uint32]linuxfpBpfDevmapVal
	tcTx   map[uint32]linuxfpLfpTcTx
}

func newTxMaps() txMaps {
	return txMaps{txDevs: map[uint32]linuxfpBpfDevmapVal{}, tcTx: map[uint32]linuxfpLfpTcTx{}}
}

// Egress devices let the fast path forward: they go in after lfp_config.
func (t *txMaps) sync(d *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error) {
	tx := map[uint32]linuxfpBpfDevmapVal{}
	for _, idx := range data.TxDevs {
		tx[uint32(idx)] = linuxfpBpfDevmapVal{Ifindex: uint32(idx)}
	}
	tcTx := map[uint32]linuxfpLfpTcTx{}
	for _, c := range data.TCTx {
		v := linuxfpLfpTcTx{Flags: linuxfpLfpTxFlagsLFP_TX_OK}
		if c.Peer {
			v.Flags, v.PeerMtu = v.Flags|linuxfpLfpTxFlagsLFP_TX_PEER, uint32(c.PeerMTU)
		}
		tcTx[uint32(c.Ifindex)] = v
	}
	return nil, []func() error{
		func() error { return syncMap(d.maps.LfpTxDevs, t.txDevs, tx) },
		func() error { return syncSplitMap(d.maps.LfpTcTxDevs, d.maps.LfpTcTxHi, t.tcTx, tcTx) },
	}
}
