package observe

import (
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf/link"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// The conntrack cache reads a kept entry's address only while no object at it was freed
// (bpf/lib/ct.h): the watcher's tp_btf program on kmem_cache_free must count every free of a
// conntrack entry (bpf/include/ct_frees_map.h). Entries deleted through ctnetlink are freed
// before the request returns: each moves a count.
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
	l, err := link.AttachTracing(link.TracingOptions{Program: objs.LfpCtFreed})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
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
	if got := sum() - before; got < entries {
		t.Fatalf("%d frees counted after %d conntrack entries were deleted", got, entries)
	}
}
