package controller

import (
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/graph"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// refusals are the hooks at which the kernel refused to attach an interface's program, kept
// with the interface as it was then. The graph decides with them (the next hook, or none and
// the error), so a refused attach is tried once, not again on every change, until the
// interface changes.
type refusals map[int]*refusal

type refusal struct {
	link  linkKey
	hooks map[dataplane.Hook]string
}

// linkKey is what of an interface may decide whether the kernel takes a program at a hook (a
// veth's MTU and its peer's, up or down, enslaved or not, the driver's XDP features). What
// linuxfp's own attachments change (XDPProgID, TCXIngress) is left out.
type linkKey struct {
	name, kind        string
	mtu, peerMTU      int
	up                bool
	master            int
	peer, peerNetnsID int
	xdpFeatures       uint64
}

func keyOfLink(lk *observe.Link) linkKey {
	return linkKey{name: lk.Name, kind: lk.Kind, mtu: lk.MTU, peerMTU: lk.PeerMTU, up: lk.Up, master: lk.Master,
		peer: lk.Peer, peerNetnsID: lk.PeerNetnsID, xdpFeatures: lk.XDPFeatures}
}

// add records err when it is the kernel refusing an attach (a *dataplane.AttachError), and says
// whether it was. Someone else's XDP program counts too: on a device above this one it is a
// refusal like any other; on this one, the next snapshot shows it and the graph leaves the
// interface alone whatever was refused.
func (r refusals) add(lk *observe.Link, err error) bool {
	var ae *dataplane.AttachError
	if lk == nil || !errors.As(err, &ae) {
		return false
	}
	cur := r[lk.Index]
	if cur == nil || cur.link != keyOfLink(lk) {
		cur = &refusal{link: keyOfLink(lk), hooks: map[dataplane.Hook]string{}}
		r[lk.Index] = cur
	}
	cur.hooks[ae.Hook] = err.Error()
	return true
}

// forgetChanged drops the refusals of interfaces that are gone or changed, and returns the
// names of those still there: their refused hooks are tried again.
func (r refusals) forgetChanged(links map[int]*observe.Link) []string {
	var again []string
	for idx, ref := range r {
		lk := links[idx]
		if lk != nil && keyOfLink(lk) == ref.link {
			continue
		}
		delete(r, idx)
		if lk != nil {
			again = append(again, lk.Name)
		}
	}
	slices.Sort(again)
	return again
}

func (r refusals) graph() graph.Refused {
	g := graph.Refused{}
	for idx, ref := range r {
		g[idx] = ref.hooks
	}
	return g
}

// fallBack decides again, knowing what the kernel refused in this apply, for the interfaces in
// idxs, and installs what the graph says now: the next hook with --hook auto (native XDP -> tc),
// or nothing, the error in the interface's notes. The decisions replace those in plan. It
// returns the programs installed and, for interfaces left without one, the errors.
func (c *Controller) fallBack(snap *observe.Snapshot, plan *graph.Plan, idxs []int) (int, []error) {
	programs := 0
	var errs []error
	// Each round refuses another hook and the graph never picks a refused one: at most two.
	for len(idxs) > 0 {
		again := graph.Build(snap, c.cfg.Options, c.dp.Owns, c.refused.graph())
		var next []int
		for _, idx := range idxs {
			it := again.Interfaces[idx]
			plan.Interfaces[idx] = it
			refused := c.refused[idx].hooks
			if it.Spec == nil {
				for _, hook := range slices.Sorted(maps.Keys(refused)) {
					errs = append(errs, errors.New(refused[hook]))
				}
				// A program it ran before was made for a configuration Linux no longer has.
				if err := c.dp.Remove(idx); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			programs++
			inst, err := c.dp.Install(*it.Spec)
			if err != nil {
				if c.refused.add(snap.Links[idx], err) {
					next = append(next, idx)
					continue
				}
				errs = append(errs, err)
				it.Notes = append(it.Notes, "install failed: "+err.Error())
				it.Spec = nil
				if err := c.dp.Remove(idx); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			var why []string
			for hook, e := range refused {
				why = append(why, string(hook)+": "+e)
			}
			slices.Sort(why)
			c.log.Warn("installed fast path at the next hook: the kernel refused the first", "interface", it.Name,
				"refused", strings.Join(why, "; "), "hook", it.Spec.Hook, "modules", strings.Join(it.Spec.Modules(), ","),
				"families", strings.Join(families(*it.Spec), ","), "program", inst.ProgramID, "notes", strings.Join(it.Notes, "; "))
		}
		idxs = next
	}
	return programs, errs
}
