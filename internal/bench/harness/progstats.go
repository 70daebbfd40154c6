package harness

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// With --prog-stats the kernel times every BPF program run (BPF_ENABLE_STATS): that tells where
// the time per packet goes (the DUT's program on in0, the generator, the sink) without a
// profiler. The timing itself costs two clock reads per run, so these rounds are a little slower.

// ProgStat is one program's runs in a measurement window.
type ProgStat struct {
	Runs     uint64  `json:"runs"`
	NsPerRun float64 `json:"ns_per_run"`
}

type progSample map[string]ebpf.ProgramStats

// progStats samples the generator, the sink and whatever is attached to the DUT's in0 (at XDP or
// tcx ingress).
func (b *Pipeline) progStats() (progSample, error) {
	s := progSample{}
	add := func(name string, p *ebpf.Program) error {
		st, err := p.Stats()
		if err != nil {
			return fmt.Errorf("stats of %s program: %w", name, err)
		}
		s[name] = *st
		return nil
	}
	if err := add("generator", b.generator().objs.BenchGen); err != nil {
		return nil, err
	}
	if err := add("sink", b.Sink.objs.BenchSink); err != nil {
		return nil, err
	}
	id, _, err := attachedProgram(b.TB.DUT, "in0")
	if err != nil {
		return nil, fmt.Errorf("in0's program: %w", err)
	}
	if id != 0 {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			return nil, fmt.Errorf("open in0's program %d: %w", id, err)
		}
		defer p.Close()
		if err := add("dut_in0", p); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s progSample) since(o progSample) map[string]ProgStat {
	out := map[string]ProgStat{}
	for name, b := range s {
		a, ok := o[name]
		if !ok {
			continue
		}
		st := ProgStat{Runs: b.RunCount - a.RunCount}
		if st.Runs > 0 {
			st.NsPerRun = float64(b.Runtime-a.Runtime) / float64(st.Runs)
		}
		out[name] = st
	}
	return out
}
