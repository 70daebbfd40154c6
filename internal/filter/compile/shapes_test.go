package compile_test

// The rulesets of package eval's shape tests (Docker, the CNI plugins, Flannel, kube-proxy, as
// iptables-save files) are loaded into a throwaway namespace, read back as the controller reads
// them, compiled, and compared with the evaluator on random packets.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/compile/compiletest"
	"github.com/linuxfp/linuxfp/internal/filter/eval"
	"github.com/linuxfp/linuxfp/internal/filter/filtertest"
	"github.com/linuxfp/linuxfp/internal/filter/model"
)

func TestShapes(t *testing.T) {
	filtertest.Require(t, "iptables-restore", "ip6tables-restore")
	shapes := []struct {
		name   string
		devs   []string
		nfacct []string
	}{
		{"docker", []string{"eth0", "docker0", "ens5", "br-5f3a9e1c2b7d"}, nil},
		{"cni", []string{"eth0", "cni0", "eth1", "mynet2"}, nil},
		{"flannel", []string{"eth0", "cni0", "eth1", "flannel.1"}, nil},
		{"kube-proxy", []string{"eth0", "cni0", "eth1", "flannel.1"}, []string{"ct_state_invalid_dropped_pkts", "localhost_nps_accepted_pkts"}},
		{"ufw", []string{"eth0", "wlan0", "eth1", "lxdbr0"}, nil},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			ns := filtertest.NewNS(t, "lfp-comp")
			if err := filtertest.NFAcct(ns, sh.nfacct...); err != nil {
				t.Fatal(err)
			}
			for _, v6 := range []bool{false, true} {
				path := "../eval/testdata/" + sh.name + map[bool]string{false: ".v4", true: ".v6"}[v6]
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := filtertest.IPTablesRestore(ns, v6, string(b)); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
			}
			snap, err := filtertest.Read(ns)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(len(sh.name)), 11))
			for _, fam := range []model.Family{model.IPv4, model.IPv6} {
				rs := snap.Ruleset(fam)
				prog, err := compile.Compile(rs, snap.Sets)
				if err != nil {
					t.Fatalf("%s: %v", fam, err)
				}
				checkProgram(t, prog)
				g := &compiletest.Gen{R: r, Family: fam}
				var pkts []eval.Packet
				for range 3000 {
					p := g.Packet()
					p.Mark = 0
					p.In, p.Out = sh.devs[r.IntN(len(sh.devs))], sh.devs[r.IntN(len(sh.devs))]
					if model.HasPorts(p.Proto) && r.IntN(2) == 0 {
						p.DstPort = []uint16{53, 80, 443, 6443, 8080, 30080, 30256}[r.IntN(7)]
					}
					pkts = append(pkts, p)
				}
				st := newStats()
				compare(t, st, rs, snap.Sets, prog, pkts, func() string { return fmt.Sprintf("%s %s:\n%s", sh.name, fam, prog) })
				ls := leaves(prog)
				st.log(t, fmt.Sprintf("%s %s (%d flat rules, cut %s, longest leaf %d)", sh.name, fam, len(prog.Rules), prog.Cut, ls.max))
				decided := st.eval[eval.Accept] + st.eval[eval.Drop]
				// Not counted: packets whose address a local route covers, which the data plane
				// hands Linux before any rule when a rule tests the address type (Docker's, the
				// CNI portmap's and kube-proxy's `-m addrtype --dst-type LOCAL`, here in nat
				// chains). The generator makes a tenth of its addresses such; a routed packet to
				// one is Linux's at the router already.
				if gap := st.gap - st.gapWhy["fib type local: the address may be local"]; gap*50 > decided {
					t.Errorf("%s %s: Classify gives Linux %d of the %d packets the evaluator decides", sh.name, fam, gap, decided)
				}
			}
		})
	}
}
