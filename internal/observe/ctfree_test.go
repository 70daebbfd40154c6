package observe

import (
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// The conntrack cache reads a kept entry's address only while no object at it was freed
// (bpf/lib/ct.h): the watcher's tp_btf programs on kmem_cache_free must count every free of a
// conntrack entry (bpf/include/ct_frees_map.h). Entries deleted through ctnetlink are freed
// before the request returns: each moves a count. Each of the two programs counts on its own
// (either is what counts a free nested in the other's run, netlink_watch.c), and attached
// together (attachCtFrees) both run for every free.
func TestCtFreeWatch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ns, err := nsutil.New("lfp-ctfree")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	spec, err := loadNetlinkwatch()
	if err != nil {
		t.Fatal(err)
	}
	var objs netlinkwatchObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	sum := func() (n uint64) {
		var k uint32
		var v uint64
		it := objs.LfpCtFrees.Iterate()
		for it.Next(&k, &v) {
			n += v
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const entries = 64
	// frees deletes that many entries with the programs attached and returns the counts added.
	frees := func(attach func() (func(), error)) uint64 {
		t.Helper()
		detach, err := attach()
		if err != nil {
			t.Fatal(err)
		}
		defer detach()
		before := sum()
		err = ns.Do(func() error {
			c, err := conntrack.Dial(nil)
			if err != nil {
				return err
			}
			defer c.Close()
			for i := range entries {
				f := conntrack.NewFlow(unix.IPPROTO_UDP, 0, netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.19.0.9"),
					uint16(4000+i), 53, 60, 0)
				if err := c.Create(f); err != nil {
					return err
				}
			}
			return c.Flush()
		})
		if err != nil {
			t.Fatal(err)
		}
		return sum() - before
	}
	one := func(p *ebpf.Program) func() (func(), error) {
		return func() (func(), error) {
			l, err := link.AttachTracing(link.TracingOptions{Program: p})
			if err != nil {
				return nil, err
			}
			return func() { l.Close() }, nil
		}
	}
	for name, p := range map[string]*ebpf.Program{"lfp_ct_freed": objs.LfpCtFreed, "lfp_ct_freed_twin": objs.LfpCtFreedTwin} {
		if got := frees(one(p)); got < entries {
			t.Fatalf("%s: %d frees counted after %d conntrack entries were deleted", name, got, entries)
		}
	}
	both := func() (func(), error) {
		ls, err := attachCtFrees(&objs)
		if err != nil {
			return nil, err
		}
		// Two programs: the kernel's count of a program's runs on a CPU is the program's.
		ids := map[ebpf.ProgramID]bool{}
		for _, l := range ls {
			info, err := l.Info()
			if err != nil {
				closeLinks(ls)
				return nil, err
			}
			ids[info.Program] = true
		}
		if len(ids) != 2 {
			closeLinks(ls)
			t.Fatalf("attachCtFrees attached %d links of %d programs, want two programs", len(ls), len(ids))
		}
		return func() { closeLinks(ls) }, nil
	}
	if got := frees(both); got < 2*entries {
		t.Fatalf("both programs: %d counts after %d conntrack entries were deleted, want two each", got, entries)
	}
}
