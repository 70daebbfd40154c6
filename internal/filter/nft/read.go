// Package nft reads the live netfilter ruleset that forwarded packets traverse (iptables-nft's
// tables and native nftables tables alike) and the ipset sets its rules use, and translates it
// into the filter module's model (package model): one model.Ruleset per address family.
//
// Chains are listed with google/nftables; tables and rules are dumped here (see dump.go for
// why) and translated expression by expression (translate.go, xt.go). A whole snapshot is read
// between two reads of the nf_tables generation and read again if a change was committed in
// between, so rules, chains and policies always belong to one ruleset.
//
// What the snapshot does not cover, and whoever uses it must hand to Linux: legacy (x_tables)
// iptables tables, which nf_tables cannot see; netdev and bridge family chains and inet ingress
// chains (listed in Snapshot.Elsewhere); and fragments, which the model describes whole.
package nft

import (
	"errors"
	"fmt"
	"github.com/linuxfp/linuxfp/internal/filter/nlsock"
	"slices"
	"sort"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/filter/ipset"
	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// Options say where to read.
type Options struct {
	// NetNS is a network namespace file descriptor; 0 reads the caller's namespace.
	NetNS int
	// Sets, when not nil, are the ipsets as the caller knows them, used instead of reading
	// every set again (a caller that sees each ipset command knows when they have not changed).
	Sets map[string]*model.IPSet
}

// Snapshot is the forward path's ruleset at one nf_tables generation.
type Snapshot struct {
	// Generation is the nf_tables ruleset generation read.
	Generation uint32
	IPv4, IPv6 *model.Ruleset
	// Sets are every ipset set, by name, and the nf_tables address sets the rules look up
	// (model.IPSet.Nft, named by SetName). ipset has no generation: they are read within the same
	// window as the rules, but a set changed meanwhile is not detected.
	Sets map[string]*model.IPSet
	// Native lists base chains of native nftables tables (not iptables-nft's) on the hooks
	// forwarded packets traverse; they are part of the models.
	Native []string
	// Elsewhere lists base chains forwarded packets may meet that the models do not cover:
	// netdev ingress/egress, inet ingress, bridge family.
	Elsewhere []string
	// Chains and RuleCounts: every chain of every table (all families) and how many rules each
	// holds, from the same read, so that nobody needs another dump (of 10,000 rules, say) to learn
	// which hooks hold something.
	Chains     []*nftables.Chain
	RuleCounts map[ChainRef]int
	// Written: the sets packets change (SET targets), already marked Unsupported in Sets; a
	// later read of the sets alone must mark them again (WrittenSets.Mark).
	Written WrittenSets
	// MissingSet: a rule tests a set Sets does not hold (Options.Sets older than the rules).
	MissingSet bool
}

// ChainRef names a chain: its table's family (NFPROTO_*), table and name.
type ChainRef struct {
	Family       uint8
	Table, Chain string
}

// Ruleset returns the model of family f.
func (s *Snapshot) Ruleset(f model.Family) *model.Ruleset {
	if f == model.IPv6 {
		return s.IPv6
	}
	return s.IPv4
}

// iptablesTables are the tables iptables-nft manages (in families ip and ip6).
var iptablesTables = map[string]bool{"filter": true, "nat": true, "mangle": true, "raw": true, "security": true}

// Generation reads the nf_tables ruleset generation alone: a reader holding a snapshot of the
// same generation need not read (and compile) the ruleset again.
func Generation(o Options) (uint32, error) {
	c, err := dial(o.NetNS)
	if err != nil {
		return 0, err
	}
	defer nlsock.CloseLater(c)
	return generation(c)
}

// Read reads the ruleset.
func Read(o Options) (*Snapshot, error) {
	c, err := dial(o.NetNS)
	if err != nil {
		return nil, err
	}
	defer nlsock.CloseLater(c)
	// One socket for the chains too (google/nftables otherwise opens and closes one per call).
	opts := []nftables.ConnOption{nftables.AsLasting()}
	if o.NetNS != 0 {
		opts = append(opts, nftables.WithNetNSFd(o.NetNS))
	}
	nc, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	defer nlsock.CloseLater(closerFunc(nc.CloseLasting))
	const tries = 10
	for try := 1; ; try++ {
		gen, err := generation(c)
		if err != nil {
			return nil, err
		}
		tables, err := dumpTables(c)
		if errors.Is(err, errInterrupted) && try < tries {
			continue
		}
		if err != nil {
			return nil, err
		}
		chains, err := nc.ListChains()
		if err != nil {
			return nil, fmt.Errorf("list nftables chains: %w", err)
		}
		rules, err := dumpRules(c)
		if errors.Is(err, errInterrupted) && try < tries {
			continue
		}
		if err != nil {
			return nil, err
		}
		objs, err := dumpObjects(c)
		if errors.Is(err, errInterrupted) && try < tries {
			continue
		}
		if err != nil {
			return nil, err
		}
		nftSets, err := readSets(c, rules)
		if errors.Is(err, errInterrupted) && try < tries {
			continue
		}
		if err != nil {
			return nil, err
		}
		var sets map[string]*model.IPSet
		if o.Sets != nil {
			// The caller's ipsets; its nf_tables sets are those of an older read.
			sets = IPSets(o.Sets)
		} else {
			sets, err = ipset.List(ipset.Options{NetNS: o.NetNS})
			if errors.Is(err, ipset.ErrNoIPSet) {
				sets, err = map[string]*model.IPSet{}, nil
			}
			if err != nil {
				return nil, err
			}
		}
		again, err := generation(c)
		if err != nil {
			return nil, err
		}
		if again != gen {
			if try < tries {
				continue
			}
			return nil, fmt.Errorf("nftables ruleset changed during each of %d reads", tries)
		}
		written := writtenSets(rules)
		written.Mark(sets)
		s := build(tables, chains, rules, sets, nftSets)
		s.Written = written
		s.Chains = chains
		s.RuleCounts = map[ChainRef]int{}
		for _, r := range rules {
			s.RuleCounts[ChainRef{r.Family, r.Table, r.Chain}]++
		}
		users := conntrackUsers(chains, rules, objs)
		s.IPv4.Conntrack, s.IPv6.Conntrack = users[0], users[1]
		s.Generation = gen
		return s, nil
	}
}

// build assembles a snapshot from what was read.
// sets are the ipsets (build adds the nf_tables address sets the rules look up).
func build(tables []rawTable, chains []*nftables.Chain, rules []rawRule, sets map[string]*model.IPSet, nftSets map[setRef]*nftSet) *Snapshot {
	s := &Snapshot{IPv4: model.NewRuleset(model.IPv4), IPv6: model.NewRuleset(model.IPv6), Sets: sets}
	byIndex := map[uint16]*model.IPSet{}
	for _, set := range sets {
		if !set.Nft {
			byIndex[set.Index] = set
		}
	}
	dormant := map[[2]string]bool{}
	for _, t := range tables {
		if t.Flags&unix.NFT_TABLE_F_DORMANT != 0 {
			dormant[[2]string{FamilyName(nftables.TableFamily(t.Family)), t.Name}] = true
		}
	}
	type key struct {
		fam          uint8
		table, chain string
	}
	chainRules := map[key][]rawRule{}
	names := map[key]bool{} // the chains of each table, by name (key.chain)
	for _, ch := range chains {
		names[key{uint8(ch.Table.Family), ch.Table.Name, ch.Name}] = true
	}
	for _, r := range rules {
		k := key{r.Family, r.Table, r.Chain}
		chainRules[k] = append(chainRules[k], r)
	}
	for _, ch := range chains {
		fam := ch.Table.Family
		famName := FamilyName(fam)
		if dormant[[2]string{famName, ch.Table.Name}] {
			continue // a dormant table's chains are not registered
		}
		var targets []*model.Ruleset
		switch fam {
		case nftables.TableFamilyIPv4:
			targets = []*model.Ruleset{s.IPv4}
		case nftables.TableFamilyIPv6:
			targets = []*model.Ruleset{s.IPv6}
		case nftables.TableFamilyINet:
			targets = []*model.Ruleset{s.IPv4, s.IPv6}
		}
		var base *model.BaseChain
		if ch.Hooknum != nil {
			desc := fmt.Sprintf("%s %s %s (hook %s", famName, ch.Table.Name, ch.Name, HookName(fam, *ch.Hooknum))
			if ch.Device != "" {
				desc += " device " + ch.Device
			}
			if ch.Priority != nil {
				desc += fmt.Sprintf(" priority %d", *ch.Priority)
			}
			desc += ")"
			h, forwardPath := modelHook(*ch.Hooknum)
			switch {
			case fam == nftables.TableFamilyNetdev, fam == nftables.TableFamilyBridge,
				fam == nftables.TableFamilyINet && *ch.Hooknum == inetIngress:
				s.Elsewhere = append(s.Elsewhere, desc)
				continue
			case targets == nil, !forwardPath:
				continue // arp; input, output: not on the forward path (and no jump reaches a base chain)
			}
			base = &model.BaseChain{Hook: h, Type: model.ChainType(ch.Type), Policy: model.PolicyAccept}
			if ch.Priority != nil {
				base.Priority = int32(*ch.Priority)
			}
			if ch.Policy != nil && *ch.Policy == nftables.ChainPolicyDrop {
				base.Policy = model.PolicyDrop
			}
			ipt := iptablesTables[ch.Table.Name] && fam != nftables.TableFamilyINet
			if !ipt {
				s.Native = append(s.Native, desc)
			}
		}
		if targets == nil {
			continue
		}
		rs := chainRules[key{uint8(fam), ch.Table.Name, ch.Name}]
		for _, target := range targets {
			ck := model.ChainKey{TableFamily: famName, Table: ch.Table.Name, Chain: ch.Name}
			c := &model.Chain{
				Key:      ck,
				Base:     base,
				IPTables: iptablesTables[ch.Table.Name] && fam != nftables.TableFamilyINet,
			}
			t := &translator{family: target.Family, setsByIndex: byIndex, missingSet: &s.MissingSet,
				tableFamily: uint8(fam), table: ch.Table.Name, nftSets: nftSets, sets: sets}
			for i, r := range rs {
				res := t.translate(r.Exprs)
				if res.never {
					continue
				}
				rules := []ruleResult{res}
				if res.expand != nil {
					rules = res.expand // a verdict map or a set lookup: one rule per element, of the same ID
				}
				id := model.RuleID{Chain: ck, Handle: r.Handle, Position: i}
				if res.sub != nil {
					// A chain made for the rule (a negated lookup), under a name no chain of the
					// table has.
					name := fmt.Sprintf("%s handle %d %s", ch.Name, r.Handle, res.subName)
					for names[key{uint8(fam), ch.Table.Name, name}] {
						name += "'"
					}
					sub := &model.Chain{Key: model.ChainKey{TableFamily: famName, Table: ch.Table.Name, Chain: name}}
					for _, x := range res.sub {
						sub.Rules = append(sub.Rules, &model.Rule{ID: id, Matches: x.matches, Verdict: x.verdict})
					}
					target.AddChain(sub)
					rules[0].verdict.Chain = name
				}
				for _, x := range rules {
					c.Rules = append(c.Rules, &model.Rule{ID: id, Matches: x.matches, Verdict: x.verdict})
				}
			}
			target.AddChain(c)
		}
	}
	s.IPv4.Sort()
	s.IPv6.Sort()
	sort.Strings(s.Native)
	sort.Strings(s.Elsewhere)
	s.Native = slices.Compact(s.Native)
	return s
}

const inetIngress = 5 // NF_INET_INGRESS (inet family, per device)

// modelHook maps an ip/ip6/inet hook number to the model's hooks; forwardPath false for hooks
// forwarded packets do not pass.
func modelHook(h nftables.ChainHook) (model.Hook, bool) {
	switch h {
	case unix.NF_INET_PRE_ROUTING:
		return model.Prerouting, true
	case unix.NF_INET_FORWARD:
		return model.Forward, true
	case unix.NF_INET_POST_ROUTING:
		return model.Postrouting, true
	}
	return 0, false
}

// FamilyName is the nft name of a table family (ip, ip6, inet, netdev, bridge, arp).
func FamilyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyNetdev:
		return "netdev"
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyARP:
		return "arp"
	}
	return fmt.Sprint(uint8(f))
}

// HookName is the nft name of hook h in a table of family f.
func HookName(f nftables.TableFamily, h nftables.ChainHook) string {
	if f == nftables.TableFamilyNetdev {
		return map[nftables.ChainHook]string{0: "ingress", 1: "egress"}[h]
	}
	if n, ok := map[nftables.ChainHook]string{0: "prerouting", 1: "input", 2: "forward", 3: "output", 4: "postrouting", 5: "ingress"}[h]; ok {
		return n
	}
	return fmt.Sprint(uint32(h))
}

// IPSets returns the ipsets of sets (a copy of the map without its nf_tables sets).
func IPSets(sets map[string]*model.IPSet) map[string]*model.IPSet {
	out := make(map[string]*model.IPSet, len(sets))
	for n, s := range sets {
		if !s.Nft {
			out[n] = s
		}
	}
	return out
}

// closerFunc makes a close function an io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }
