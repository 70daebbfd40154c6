package dataplane

// The FIB cache module (bpf/lib/fibcache.h explains why its answers are the kernel's): the
// router's bpf_fib_lookup() answer per destination, kept while its generation holds.

// FibCacheData is what the FIB cache module reads.
type FibCacheData struct {
	// FibCache4 / FibCache6: the cache may answer for the family (graph/fibcache.go decides).
	FibCache4, FibCache6 bool
}

type fibCacheModule struct{}

// Turning the cache on needs no care: the gate is written after lfp_config at the end of every
// Sync, and each gate write moves the cache's generation on (writeGateLocked), so no entry
// filled before this Sync answers after it.
func (fibCacheModule) sync(_ *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error) {
	var f linuxfpLfpFibFlags
	if data.FibCache4 {
		f |= linuxfpLfpFibFlagsLFP_FIB_CACHE4
	}
	if data.FibCache6 {
		f |= linuxfpLfpFibFlagsLFP_FIB_CACHE6
	}
	cfg.FibFlags = f
	return nil, nil
}
