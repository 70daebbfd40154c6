package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/spf13/cobra"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/status"
)

func monitorCmd() *cobra.Command {
	var (
		asJSON, print bool
		netns, typ    string
		write         string
		ifaces        []string
		reasons       []string
		snapLen       int
		count         int
	)
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "Show the packets the fast path hands to Linux or drops, as they happen",
		Long: `Show the packets the fast path hands to Linux ("pass") or drops ("drop"), as they happen:
time, interface, type, reason (the names linuxfp status counts), the hook that decided, and the
packet's protocol, addresses, ports and length. Forwarded packets are not shown (tcpdump on the
egress device sees them).

The data plane reports packets only while a monitor runs; reporting never changes or delays a
packet, but costs time per reported packet while it runs (docs/benchmarks.md). When packets
come faster than they can be read, the rest are counted as lost and said so.

-w FILE writes the packets (their first --snaplen bytes) to a pcap file that tcpdump -r and
Wireshark open ("-": standard output, for "| wireshark -k -i -"); the lines are then printed
only with --print. -n NETNS monitors the linuxfp of another network namespace, as ip -n takes it.`,
		Example: `  linuxfp monitor --type drop
  linuxfp monitor --interface eth0 --reason ttl_exceeded,fib_no_neighbour -j
  linuxfp monitor -w /tmp/linux.pcap -c 100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := status.MonitorQuery{Interfaces: splitList(ifaces), Reasons: splitList(reasons)}
			switch typ {
			case "":
				q.Pass, q.Drop = true, true
			case "pass":
				q.Pass = true
			case "drop":
				q.Drop = true
			default:
				return fmt.Errorf("--type %q: want drop or pass", typ)
			}
			for _, r := range q.Reasons {
				if _, ok := dataplane.ReasonByName(r); !ok {
					return fmt.Errorf("--reason %q: not a reason linuxfp counts (linuxfp status shows them)", r)
				}
			}
			switch {
			case snapLen == 0:
				snapLen = dataplane.MonitorSnapLenMax
			case snapLen < 0 || snapLen > dataplane.MonitorSnapLenMax:
				return fmt.Errorf("--snaplen %d: want 1 to %d (0: the most)", snapLen, dataplane.MonitorSnapLenMax)
			}
			q.SnapLen = snapLen
			client := status.NewClient()
			if netns != "" {
				var err error
				if client, err = status.NewClientInNetns(netns); err != nil {
					return err
				}
			}
			// Buffered: a burst of events is one write, flushed once no more are waiting.
			stdout := bufio.NewWriter(os.Stdout)
			defer stdout.Flush()
			m := &monitorRun{out: stdout, json: asJSON, print: write == "" || print, count: count}
			if write != "" {
				var f io.Writer = stdout
				if write != "-" {
					file, err := os.Create(write)
					if err != nil {
						return err
					}
					defer file.Close()
					fw := bufio.NewWriter(file)
					defer fw.Flush()
					f, m.file = fw, fw
				} else if m.print {
					m.out = bufio.NewWriter(os.Stderr) // standard output carries the pcap
					defer m.out.Flush()
				}
				m.pcap = pcapgo.NewWriterNanos(f)
				if err := m.pcap.WriteFileHeader(uint32(snapLen), layers.LinkTypeEthernet); err != nil {
					return fmt.Errorf("%s: %w", write, err)
				}
			}
			m.stdout = stdout
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			err := client.Monitor(ctx, q, m.event)
			if errors.Is(err, status.ErrNotRunning) && netns != "" {
				err = notRunningIn(netns)
			}
			if errors.Is(err, errCountReached) {
				err = nil
			}
			if write != "" && write != "-" {
				fmt.Fprintf(os.Stderr, "%d packets written to %s", m.seen, write)
				if m.lost > 0 {
					fmt.Fprintf(os.Stderr, ", %d lost", m.lost)
				}
				fmt.Fprintln(os.Stderr)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&asJSON, "json", "j", false, "one JSON object per packet (JSON lines)")
	f.StringVarP(&netns, "netns", "n", "", "the linuxfp of this network namespace (a name under /run/netns, as ip -n takes)")
	f.StringSliceVarP(&ifaces, "interface", "i", nil, "only packets received on these interfaces (comma-separated)")
	f.StringSliceVar(&reasons, "reason", nil, "only packets of these reasons (comma-separated, as linuxfp status names them: filter_dropped, ttl_exceeded ...)")
	f.StringVarP(&typ, "type", "t", "", "only drop (dropped in the fast path) or pass (handed to Linux); default both")
	f.StringVarP(&write, "write", "w", "", "write the packets to this pcap file (\"-\": standard output)")
	f.BoolVar(&print, "print", false, "with -w, print the packets too")
	f.IntVarP(&snapLen, "snaplen", "s", 128, "bytes of each packet to capture (0: the most, "+strconv.Itoa(dataplane.MonitorSnapLenMax)+")")
	f.IntVarP(&count, "count", "c", 0, "exit after this many packets (0: until interrupted)")
	return cmd
}

var errCountReached = errors.New("count reached")

// monitorRun is one `linuxfp monitor`: it prints each event and writes it to the pcap file.
type monitorRun struct {
	out    *bufio.Writer // the lines
	stdout *bufio.Writer // standard output: the lines, or the pcap of -w -
	file   *bufio.Writer // the pcap file of -w FILE

	json, print bool
	pcap        *pcapgo.Writer
	count       int
	seen        int
	lost        uint64
}

func (m *monitorRun) event(ev *status.MonitorEvent, more bool) error {
	err := m.handle(ev)
	if !more || err != nil {
		for _, w := range []*bufio.Writer{m.out, m.stdout, m.file} {
			if w != nil {
				if ferr := w.Flush(); ferr != nil && err == nil {
					err = ferr
				}
			}
		}
	}
	return err
}

func (m *monitorRun) handle(ev *status.MonitorEvent) error {
	if ev.Lost > 0 {
		m.lost += ev.Lost
		if m.json && m.print {
			return json.NewEncoder(m.out).Encode(struct {
				Lost uint64 `json:"lost"`
			}{ev.Lost})
		}
		fmt.Fprintf(os.Stderr, "linuxfp monitor: %d packets not reported (too many to read)\n", ev.Lost)
		return nil
	}
	if m.pcap != nil {
		ci := gopacket.CaptureInfo{Timestamp: ev.Time, CaptureLength: len(ev.Data), Length: max(ev.Len, len(ev.Data))}
		if err := m.pcap.WritePacket(ci, ev.Data); err != nil {
			return err
		}
	}
	if m.print {
		p := decodePacket(ev)
		if m.json {
			if err := json.NewEncoder(m.out).Encode(p); err != nil {
				return err
			}
		} else if _, err := fmt.Fprintln(m.out, p.text()); err != nil {
			return err
		}
	}
	m.seen++
	if m.count > 0 && m.seen >= m.count {
		return errCountReached
	}
	return nil
}

// monitorPacket is one line of `linuxfp monitor -j`: the event and what its bytes say.
type monitorPacket struct {
	Time      string `json:"time"`
	Interface string `json:"interface"`
	Ifindex   int    `json:"ifindex"`
	Type      string `json:"type"`
	Reason    string `json:"reason"`
	Hook      string `json:"hook"`
	Len       int    `json:"len"`
	SrcMAC    string `json:"src_mac,omitempty"`
	DstMAC    string `json:"dst_mac,omitempty"`
	// Proto: tcp, udp, icmp, icmpv6, sctp, another IP protocol's number, arp, or the EtherType
	// in hex.
	Proto    string `json:"proto,omitempty"`
	Src      string `json:"src,omitempty"`
	Dst      string `json:"dst,omitempty"`
	SrcPort  uint16 `json:"sport,omitempty"`
	DstPort  uint16 `json:"dport,omitempty"`
	TTL      *uint8 `json:"ttl,omitempty"` // hop limit for IPv6
	ICMPType *uint8 `json:"icmp_type,omitempty"`
	ICMPCode *uint8 `json:"icmp_code,omitempty"`
}

// decodePacket reads the headers in the event's bytes (as many as were captured).
func decodePacket(ev *status.MonitorEvent) monitorPacket {
	p := monitorPacket{Time: ev.Time.Format("2006-01-02T15:04:05.000000Z07:00"), Interface: ev.Interface,
		Ifindex: ev.Ifindex, Type: ev.Type, Reason: ev.Reason, Hook: ev.Hook, Len: ev.Len}
	if p.Interface == "" {
		p.Interface = "if" + strconv.Itoa(ev.Ifindex)
	}
	pkt := gopacket.NewPacket(ev.Data, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.Ethernet:
			p.SrcMAC, p.DstMAC = l.SrcMAC.String(), l.DstMAC.String()
			p.Proto = fmt.Sprintf("0x%04x", uint16(l.EthernetType))
		case *layers.ARP:
			p.Proto = "arp"
			if a, ok := netip.AddrFromSlice(l.SourceProtAddress); ok {
				p.Src = a.String()
			}
			if a, ok := netip.AddrFromSlice(l.DstProtAddress); ok {
				p.Dst = a.String()
			}
		case *layers.IPv4:
			p.Src, p.Dst, p.TTL = l.SrcIP.String(), l.DstIP.String(), &l.TTL
			p.Proto = ipProto(l.Protocol)
		case *layers.IPv6:
			p.Src, p.Dst, p.TTL = l.SrcIP.String(), l.DstIP.String(), &l.HopLimit
			p.Proto = ipProto(l.NextHeader)
		case *layers.IPv6HopByHop:
			p.Proto = ipProto(l.NextHeader)
		case *layers.IPv6Routing:
			p.Proto = ipProto(l.NextHeader)
		case *layers.IPv6Fragment:
			p.Proto = ipProto(l.NextHeader)
		case *layers.IPv6Destination:
			p.Proto = ipProto(l.NextHeader)
		case *layers.TCP:
			p.SrcPort, p.DstPort = uint16(l.SrcPort), uint16(l.DstPort)
		case *layers.UDP:
			p.SrcPort, p.DstPort = uint16(l.SrcPort), uint16(l.DstPort)
		case *layers.SCTP:
			p.SrcPort, p.DstPort = uint16(l.SrcPort), uint16(l.DstPort)
		case *layers.ICMPv4:
			t, c := l.TypeCode.Type(), l.TypeCode.Code()
			p.ICMPType, p.ICMPCode = &t, &c
		case *layers.ICMPv6:
			t, c := l.TypeCode.Type(), l.TypeCode.Code()
			p.ICMPType, p.ICMPCode = &t, &c
		}
	}
	return p
}

func ipProto(p layers.IPProtocol) string {
	switch p {
	case layers.IPProtocolTCP:
		return "tcp"
	case layers.IPProtocolUDP:
		return "udp"
	case layers.IPProtocolICMPv4:
		return "icmp"
	case layers.IPProtocolICMPv6:
		return "icmpv6"
	case layers.IPProtocolSCTP:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}

// text is the line `linuxfp monitor` prints, e.g.
// 10:04:05.123456 eth0 drop filter_dropped xdp: udp 198.18.0.2:4000 > 198.19.0.9:53 ttl 64 len 60
func (p monitorPacket) text() string {
	var b strings.Builder
	ts := p.Time
	if i := strings.IndexByte(ts, 'T'); i >= 0 && len(ts) >= i+16 {
		ts = ts[i+1 : i+16]
	}
	fmt.Fprintf(&b, "%s %s %s %s %s: ", ts, p.Interface, p.Type, p.Reason, p.Hook)
	addr := func(a string, port uint16) string {
		if port == 0 {
			return a
		}
		ap, err := netip.ParseAddr(a)
		if err != nil {
			return a
		}
		return netip.AddrPortFrom(ap, port).String()
	}
	switch {
	case p.Src != "":
		fmt.Fprintf(&b, "%s %s > %s", p.Proto, addr(p.Src, p.SrcPort), addr(p.Dst, p.DstPort))
	case p.SrcMAC != "":
		fmt.Fprintf(&b, "ethertype %s %s > %s", p.Proto, p.SrcMAC, p.DstMAC)
	default:
		b.WriteString("(no headers captured)")
	}
	if p.ICMPType != nil {
		fmt.Fprintf(&b, " type %d code %d", *p.ICMPType, *p.ICMPCode)
	}
	if p.TTL != nil {
		fmt.Fprintf(&b, " ttl %d", *p.TTL)
	}
	fmt.Fprintf(&b, " len %d", p.Len)
	return b.String()
}
