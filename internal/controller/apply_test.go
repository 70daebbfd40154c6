package controller

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/graph"
	"github.com/linuxfp/linuxfp/internal/observe"
)

func spec(idx int, name string, hook dataplane.Hook) *dataplane.Spec {
	return &dataplane.Spec{Ifindex: idx, Name: name, MAC: dataplane.MAC{2, 0, 0, 0, 0, byte(idx)}, Hook: hook, Router4: true}
}

// stepsTo decides, from what is installed and the plan, which programs are forgotten (their
// device is gone or its ifindex is another device's), removed (the plan wants none), installed
// (new) or replaced (changed); an equal spec is left alone.
func TestStepsTo(t *testing.T) {
	installed := map[int]dataplane.Installed{}
	for idx, name := range map[int]string{2: "gone", 3: "renamed", 4: "off", 5: "same", 6: "changed"} {
		installed[idx] = dataplane.Installed{Spec: *spec(idx, name, dataplane.HookXDP)}
	}
	changed := spec(6, "changed", dataplane.HookTC)
	plan := &graph.Plan{Interfaces: map[int]*graph.Interface{
		3: {Name: "other", Spec: spec(3, "other", dataplane.HookXDP)},
		4: {Name: "off"},
		5: {Name: "same", Spec: spec(5, "same", dataplane.HookXDP)},
		6: {Name: "changed", Spec: changed},
		7: {Name: "new", Spec: spec(7, "new", dataplane.HookTC)},
		8: {Name: "none"},
	}}
	got := stepsTo(installed, plan)
	want := steps{forget: []int{2, 3}, remove: []int{4},
		install: []installStep{{idx: 3, had: true}, {idx: 6, had: true}, {idx: 7}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("steps %+v, want %+v", got, want)
	}
	// Nothing to do when the plan is what is installed.
	for idx, in := range installed {
		s := in.Spec
		plan.Interfaces[idx] = &graph.Interface{Name: s.Name, Spec: &s}
	}
	for _, idx := range []int{7, 8} {
		delete(plan.Interfaces, idx)
	}
	if got := stepsTo(installed, plan); !reflect.DeepEqual(got, steps{}) {
		t.Fatalf("steps %+v for the installed plan, want none", got)
	}
}

func link(idx int, name string, mtu int) *observe.Link {
	return &observe.Link{Index: idx, Name: name, MTU: mtu, Up: true}
}

// A hook the kernel refused is kept with the interface as it was, handed to the graph, and
// forgotten when the interface changes (or goes); errors that are no refusal are not kept.
func TestRefusals(t *testing.T) {
	r := refusals{}
	eth, veth := link(2, "eth0", 1500), link(3, "veth0", 1500)
	if r.add(eth, errors.New("no memory")) {
		t.Fatal("an error that is no attach refusal was kept")
	}
	refusal := &dataplane.AttachError{Hook: dataplane.HookXDP, Name: "eth0", Err: errors.New("EOPNOTSUPP")}
	if !r.add(eth, fmt.Errorf("install: %w", refusal)) || !r.add(veth, refusal) {
		t.Fatal("an attach refusal was not kept")
	}
	if g := r.graph(); len(g) != 2 || g[2][dataplane.HookXDP] == "" {
		t.Fatalf("graph refusals %v, want eth0's and veth0's XDP", g)
	}
	// Unchanged links keep their refusals; eth0's MTU changed: tried again; veth0 is gone.
	links := map[int]*observe.Link{2: link(2, "eth0", 1500), 3: link(3, "veth0", 1500)}
	if again := r.forgetChanged(links); len(again) != 0 || len(r) != 2 {
		t.Fatalf("unchanged links: tried again %v, %d kept", again, len(r))
	}
	links = map[int]*observe.Link{2: link(2, "eth0", 9000)}
	if again := r.forgetChanged(links); !reflect.DeepEqual(again, []string{"eth0"}) || len(r) != 0 {
		t.Fatalf("eth0 changed, veth0 gone: tried again %v, %d kept; want eth0 and none", again, len(r))
	}
}
