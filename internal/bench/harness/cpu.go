package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuTimes is the aggregate "cpu" line of /proc/stat, in USER_HZ ticks.
type cpuTimes struct {
	user, nice, system, idle, iowait, irq, softirq, steal uint64
}

// UserHZ is the unit of /proc/stat: fixed at 100 for user space whatever the kernel's HZ.
const UserHZ = 100

func readCPUTimes() (cpuTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return cpuTimes{}, fmt.Errorf("read /proc/stat: %w", sc.Err())
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", sc.Text())
	}
	var v [8]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(fields[i+1], 10, 64); err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	return cpuTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}, nil
}

// cpuUse is CPU time spent, summed over all CPUs, in milliseconds.
type cpuUse struct {
	User    float64 `json:"user_ms"`
	System  float64 `json:"system_ms"`
	Softirq float64 `json:"softirq_ms"`
	Irq     float64 `json:"irq_ms"`
	Steal   float64 `json:"steal_ms"`
}

func (t cpuTimes) since(o cpuTimes) *cpuUse {
	ms := func(a, b uint64) float64 { return float64(a-b) * 1000 / UserHZ }
	return &cpuUse{
		User:    ms(t.user+t.nice, o.user+o.nice),
		System:  ms(t.system, o.system),
		Softirq: ms(t.softirq, o.softirq),
		Irq:     ms(t.irq, o.irq),
		Steal:   ms(t.steal, o.steal),
	}
}

// kernel is the time the kernel spent: packet processing happens in softirq (or in system time
// when it runs from the generator's syscall or from ksoftirqd).
func (u *cpuUse) kernel() float64 { return u.System + u.Softirq + u.Irq }

// cpu measures CPU time per million packets at a fixed offered load, one generator core, 64-byte
// frames: first a baseline where in0 drops the frames with XDP (the generator's own cost, and
// veth's), then every mode, rotated round by round.
func (b *Pipeline) cpu() error {
	const size = 64
	rate := b.Cfg.CPURate
	if rate == 0 {
		rate = 250e3
		if l := b.Res.ThroughputOf(1, size, ModeLinux); l != nil && l.Mpps > 0 {
			// Half of what Linux forwards at most: a load every mode sustains without loss.
			rate = l.Mpps * 1e6 / 2
		}
	}
	cpus, err := UsableCPUs()
	if err != nil {
		return err
	}
	cpus = cpus[:1]
	modes := append([]Mode{ModeBaseline}, b.Cfg.Modes...)
	c := &CPUResult{OfferedMpps: rate / 1e6, FrameSize: size, Cores: 1}
	per := map[Mode][]Round{}
	err = EachRound(b.Cfg.Rounds, modes, func(r int, m Mode) error {
		return b.WithMode(m, func() error {
			rd, err := b.measure(size, cpus, rate)
			if err != nil {
				return fmt.Errorf("cpu, %s: %w", m, err)
			}
			per[m] = append(per[m], rd)
			b.Log.Info("measured cpu", "round", r+1, "mode", m, "offered_mpps", fmt.Sprintf("%.3f", rd.OfferedMpps),
				"mpps", fmt.Sprintf("%.3f", rd.Mpps), "kernel_ms", fmt.Sprintf("%.0f", rd.CPU.kernel()))
			return nil
		})
	})
	b.Res.CPU = c.summarise(per, modes)
	return err
}

// CPUResult is the CPU measurement.
type CPUResult struct {
	OfferedMpps float64   `json:"offered_mpps"`
	FrameSize   int       `json:"frame_size"`
	Cores       int       `json:"generator_cores"`
	Modes       []CPUMode `json:"modes"`
}

// CPUMode is one mode's CPU cost: the medians over rounds.
type CPUMode struct {
	Mode          Mode    `json:"mode"`
	Mpps          float64 `json:"received_mpps"`
	Loss          float64 `json:"loss"`               // 1 - received/offered
	KernelPerMpkt float64 `json:"kernel_ms_per_mpkt"` // system+softirq+irq, all CPUs
	DUTPerMpkt    float64 `json:"dut_ms_per_mpkt"`    // minus the baseline's
	UserPerMpkt   float64 `json:"user_ms_per_mpkt"`   // user time (the benchmark process itself)
	Rounds        []Round `json:"rounds"`
}

func (c *CPUResult) summarise(per map[Mode][]Round, modes []Mode) *CPUResult {
	c.Modes = nil
	var base float64
	for _, m := range modes {
		rds := per[m]
		if len(rds) == 0 {
			continue
		}
		var mpps, loss, kern, user []float64
		for _, rd := range rds {
			mpkt := float64(rd.Received) / 1e6
			mpps = append(mpps, rd.Mpps)
			// The two counters are read a moment apart: a hair more received than offered is
			// timing, not gain.
			loss = append(loss, max(1-float64(rd.Received)/max(float64(rd.Offered), 1), 0))
			if mpkt > 0 {
				kern = append(kern, rd.CPU.kernel()/mpkt)
				user = append(user, rd.CPU.User/mpkt)
			}
		}
		cm := CPUMode{Mode: m, Mpps: Median(mpps), Loss: Median(loss), KernelPerMpkt: Median(kern),
			UserPerMpkt: Median(user), Rounds: rds}
		if m == ModeBaseline {
			base = cm.KernelPerMpkt
		} else {
			cm.DUTPerMpkt = cm.KernelPerMpkt - base
		}
		c.Modes = append(c.Modes, cm)
	}
	return c
}

// ProcessCPU is the CPU time (user and system, all threads) process pid has used.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("linuxfp's CPU time: %w", err)
	}
	// pid (comm) state ppid ... utime stime: fields 14 and 15, counted from 1, after a comm
	// that may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	var ticks uint64
	for _, s := range f[11:13] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / UserHZ, nil
}
