package nft_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/filter/filtertest"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/filter/nft"
)

// TestScale reads a ruleset of 10,000 rules in 1,000 chains (the target size) and checks
// every rule arrives in the model.
func TestScale(t *testing.T) {
	filtertest.Require(t, "iptables-restore")
	var b strings.Builder
	b.WriteString("*filter\n:FORWARD ACCEPT [0:0]\n")
	const chains, per = 1000, 10
	for c := range chains {
		fmt.Fprintf(&b, ":C%d - [0:0]\n", c)
	}
	for c := range chains {
		fmt.Fprintf(&b, "-A FORWARD -d 198.19.%d.%d/32 -j C%d\n", c/250, c%250, c)
		for r := range per - 1 {
			fmt.Fprintf(&b, "-A C%d -s 198.18.%d.%d/32 -p tcp -m tcp --dport %d -m comment --comment \"svc %d\" -j ACCEPT\n", c, r, c%250, 1000+c, c)
		}
	}
	b.WriteString("COMMIT\n")
	ns := filtertest.NewNS(t, "lfp-filt")
	start := time.Now()
	if err := filtertest.IPTablesRestore(ns, false, b.String()); err != nil {
		t.Fatal(err)
	}
	loaded := time.Since(start)
	start = time.Now()
	s, err := filtertest.Read(ns)
	if err != nil {
		t.Fatal(err)
	}
	read := time.Since(start)
	st := s.IPv4.Stats()
	if st.Rules != chains*per || st.UnknownRules != 0 {
		t.Errorf("model has %d rules (%d unknown), want %d, none unknown", st.Rules, st.UnknownRules, chains*per)
	}
	if c := s.IPv4.Chains[model.ChainKey{TableFamily: "ip", Table: "filter", Chain: "C999"}]; c == nil || len(c.Rules) != per-1 {
		t.Errorf("chain C999: %v", c)
	}
	// The counts other readers use instead of dumping the rules again (observe's hook summary).
	for ref, want := range map[nft.ChainRef]int{{Family: unix.NFPROTO_IPV4, Table: "filter", Chain: "FORWARD"}: chains,
		{Family: unix.NFPROTO_IPV4, Table: "filter", Chain: "C7"}: per - 1, {Family: unix.NFPROTO_IPV4, Table: "filter", Chain: "INPUT"}: 0} {
		if got := s.RuleCounts[ref]; got != want {
			t.Errorf("RuleCounts[%+v] = %d, want %d", ref, got, want)
		}
	}
	t.Logf("%d rules: iptables-restore %v, read and translate %v", st.Rules, loaded.Round(time.Millisecond), read.Round(time.Millisecond))
}
