// Package difftest is the differential test harness: it injects the same corpus of Ethernet
// frames into a device under test twice (say, once with Linux alone and once with linuxfp) and
// compares what came out, frame by frame, at named capture points.
//
// A corpus is a list of named frames injected, in order and at a modest pace, at one interface
// of one namespace. Captures are taken at named interfaces of other namespaces (or the injecting
// one: ICMP errors and anything else coming back). Frames are sent and received with AF_PACKET
// sockets; a socket keeps the namespace it was created in, so they are created inside
// nsutil.NS.Do and then used from any goroutine.
//
// Comparison (Compare) is of multisets: ordering may differ between two runs and is not part of
// the promise. A Classifier decides what is compared exactly, what only has to be seen in both
// runs, what is noise, and normalises what legitimately differs between two runs of Linux
// itself (Policy is the one the forwarding tests share).
package difftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// Frame is one frame of a corpus.
type Frame struct {
	// Name is the case the frame belongs to; several frames may share it. Reports use it.
	Name string
	Data []byte
	// CsumStart, when not 0, sends the frame as a stack with transmit checksum offload sends
	// it (containers' veths): its skb is CHECKSUM_PARTIAL, the checksum from CsumStart (an
	// offset in Data: the L4 header) to the end still to be computed and stored at
	// CsumStart+CsumOffset, where Data must hold the pseudo-header sum as such a stack leaves
	// it. Whatever the frame crosses then sees it as it sees a container's packet. (A packet
	// socket with PACKET_VNET_HDR: a virtio_net_hdr with VIRTIO_NET_HDR_F_NEEDS_CSUM.)
	CsumStart, CsumOffset uint16
	// GSOSize, when not 0 (with CsumStart), sends an IPv4 TCP frame as a GSO train, the
	// super-packet a TCP stack hands a device with TSO: one frame beyond the MTU, to be cut into
	// segments of GSOSize payload bytes by whatever cannot pass it on whole
	// (VIRTIO_NET_HDR_GSO_TCPV4).
	GSOSize uint16
	// Via, when set, names the endpoint of Options.Via the frame is sent from instead of
	// Options.Inject: a frame that reaches the device under test through another of its
	// interfaces, in the corpus's order.
	Via string
}

// Endpoint is a device in a namespace, named for reports ("gen", "sink").
type Endpoint struct {
	Name   string
	NS     *nsutil.NS
	Device string
}

// Options describe one run.
type Options struct {
	Inject Endpoint
	// Via are further endpoints frames name in Frame.Via.
	Via     []Endpoint
	Capture []Endpoint
	// Gap is the time from one frame's send to the next: slow enough that no queue on the way
	// (veth rings, backlogs, socket buffers) drops anything for capacity reasons, which Linux
	// and a fast path would do differently.
	Gap time.Duration
	// Settle is how long captures go on after the last frame: long enough for what Linux does
	// late (it gives up on an unresolved neighbour after about 3 s and only then sends ICMP
	// host unreachable for the packets it queued).
	Settle time.Duration
}

// Packet is one captured frame.
type Packet struct {
	Data []byte
	At   time.Duration // since the first frame was sent
}

// Capture is what one run saw at every capture point.
type Capture struct {
	Sent    int
	Elapsed time.Duration
	Packets map[string][]Packet // by Endpoint.Name, in arrival order
}

// maxFrame bounds what a capture socket reads at once; anything longer (GRO can build frames
// far beyond the MTU) is an error rather than a silently truncated frame.
const maxFrame = 256 << 10

// Run injects frames in order at o.Inject and returns what the capture points received. Frames
// the capture points themselves sent (PACKET_OUTGOING, which includes the injected frames when
// the injecting device is also a capture point) are not part of a capture.
func Run(o Options, frames []Frame) (*Capture, error) {
	if o.Gap <= 0 {
		o.Gap = 500 * time.Microsecond
	}
	caps := make([]*capturer, 0, len(o.Capture))
	defer func() {
		for _, c := range caps {
			c.close()
		}
	}()
	for _, ep := range o.Capture {
		c, err := startCapture(ep)
		if err != nil {
			return nil, err
		}
		caps = append(caps, c)
	}
	// Per endpoint, a socket for plain frames and, if any frame sent there needs one, a second
	// one for frames left to checksum offload (PACKET_VNET_HDR).
	type injector struct{ fd, partial, ifindex int }
	injectors := map[string]*injector{}
	open := func(ep Endpoint) (*injector, error) {
		fd, ifindex, err := openPacket(ep, 0)
		if err != nil {
			return nil, err
		}
		in := &injector{fd: fd, partial: -1, ifindex: ifindex}
		injectors[ep.Name] = in
		return in, nil
	}
	defer func() {
		for _, in := range injectors {
			unix.Close(in.fd)
			if in.partial >= 0 {
				unix.Close(in.partial)
			}
		}
	}()
	inj, err := open(o.Inject)
	if err != nil {
		return nil, err
	}
	eps := map[string]Endpoint{o.Inject.Name: o.Inject}
	for _, ep := range o.Via {
		if _, err := open(ep); err != nil {
			return nil, err
		}
		eps[ep.Name] = ep
	}
	for i, f := range frames {
		name := o.Inject.Name
		if f.Via != "" {
			name = f.Via
		}
		in, ok := injectors[name]
		if !ok {
			return nil, fmt.Errorf("frame %d (%s): no endpoint %q to inject it at", i, f.Name, f.Via)
		}
		if f.CsumStart == 0 || in.partial >= 0 {
			continue
		}
		if in.partial, _, err = openPacket(eps[name], 0); err != nil {
			return nil, err
		}
		if err := unix.SetsockoptInt(in.partial, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			return nil, fmt.Errorf("PACKET_VNET_HDR on %s: %w", name, err)
		}
	}

	start := time.Now()
	for _, c := range caps {
		c.start.Store(start.UnixNano())
	}
	for i, f := range frames {
		if d := time.Until(start.Add(time.Duration(i) * o.Gap)); d > 0 {
			time.Sleep(d)
		}
		in := inj
		if f.Via != "" {
			in = injectors[f.Via]
		}
		fd, ifi, vnet := in.fd, in.ifindex, []byte(nil)
		if f.CsumStart != 0 {
			fd, vnet = in.partial, vnetHdrPartial(f.CsumStart, f.CsumOffset)
			if f.GSOSize != 0 {
				if err := vnetHdrGSO(vnet, f); err != nil {
					return nil, fmt.Errorf("frame %d (%s): %w", i, f.Name, err)
				}
			}
		} else if f.GSOSize != 0 {
			return nil, fmt.Errorf("frame %d (%s): a GSO train needs its checksum left to offload (CsumStart)", i, f.Name)
		}
		if err := send(fd, ifi, vnet, f.Data); err != nil {
			at := o.Inject.Name
			if f.Via != "" {
				at = f.Via
			}
			return nil, fmt.Errorf("send frame %d (%s) on %s: %w", i, f.Name, at, err)
		}
	}
	time.Sleep(o.Settle)
	res := &Capture{Sent: len(frames), Elapsed: time.Since(start), Packets: map[string][]Packet{}}
	var errs []error
	for _, c := range caps {
		pkts, err := c.stop()
		if err != nil {
			errs = append(errs, fmt.Errorf("capture at %s: %w", c.ep.Name, err))
		}
		res.Packets[c.ep.Name] = pkts
	}
	return res, errors.Join(errs...)
}

// send transmits one whole Ethernet frame; the protocol comes from the frame's own header. vnet
// is the virtio_net_hdr that goes first on a PACKET_VNET_HDR socket (nil on another).
func send(fd, ifindex int, vnet, frame []byte) error {
	if len(frame) < 14 {
		return fmt.Errorf("frame of %d bytes has no Ethernet header", len(frame))
	}
	to := &unix.SockaddrLinklayer{
		Ifindex:  ifindex,
		Protocol: binary.NativeEndian.Uint16(frame[12:14]), // network order already, as sll_protocol wants
		Halen:    6,
	}
	copy(to.Addr[:], frame[0:6])
	if vnet != nil {
		frame = append(slices.Clip(vnet), frame...)
	}
	return unix.Sendto(fd, frame, 0, to)
}

// struct virtio_net_hdr (include/uapi/linux/virtio_net.h): flags, gso_type, hdr_len, gso_size,
// csum_start, csum_offset; a packet socket reads it in little-endian order (virtio 1.0).
const (
	vnetHdrLen            = 10
	virtioNetHdrNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM
	virtioNetHdrGSOTCPv4  = 1 // VIRTIO_NET_HDR_GSO_TCPV4
)

// vnetHdrPartial is the virtio_net_hdr of a packet whose checksum is left to offload: no GSO,
// the checksum from start on, stored at start+offset (virtio_net_hdr_to_skb() makes the skb
// CHECKSUM_PARTIAL with them).
// vnetHdrGSO makes h, a vnetHdrPartial, that of a TCP/IPv4 GSO train: its headers end after the
// TCP header at f.CsumStart, each segment carries f.GSOSize bytes.
func vnetHdrGSO(h []byte, f Frame) error {
	th := int(f.CsumStart)
	if len(f.Data) < th+20 || binary.BigEndian.Uint16(f.Data[12:]) != 0x0800 || f.Data[14+9] != 6 || f.CsumOffset != 16 {
		return errors.New("a GSO train must be TCP over IPv4")
	}
	h[1] = virtioNetHdrGSOTCPv4
	binary.LittleEndian.PutUint16(h[2:], uint16(th+int(f.Data[th+12]>>4)*4))
	binary.LittleEndian.PutUint16(h[4:], f.GSOSize)
	return nil
}

func vnetHdrPartial(start, offset uint16) []byte {
	h := make([]byte, vnetHdrLen)
	h[0] = virtioNetHdrNeedsCsum
	binary.LittleEndian.PutUint16(h[6:], start)
	binary.LittleEndian.PutUint16(h[8:], offset)
	return h
}

// openPacket opens an AF_PACKET socket bound to ep's device inside its namespace. With proto 0
// the socket receives nothing (the injector); with ETH_P_ALL it sees every frame of the device.
func openPacket(ep Endpoint, proto uint16) (fd, ifindex int, err error) {
	err = ep.NS.Do(func() error {
		ifi, err := net.InterfaceByName(ep.Device)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", ep.Device, ep.NS.Name, err)
		}
		ifindex = ifi.Index
		// Protocol 0 at creation: the socket sees nothing until it is bound to the one device.
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("packet socket in %s: %w", ep.NS.Name, err)
		}
		if proto != 0 {
			// Room for a whole run: nothing may be lost in the capture itself.
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20); err != nil {
				unix.Close(fd)
				return fmt.Errorf("receive buffer on %s: %w", ep.Name, err)
			}
			// Wake up now and then to see whether the capture is over.
			tv := unix.NsecToTimeval((20 * time.Millisecond).Nanoseconds())
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				unix.Close(fd)
				return fmt.Errorf("receive timeout on %s: %w", ep.Name, err)
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifindex}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind packet socket to %s in %s: %w", ep.Device, ep.NS.Name, err)
		}
		return nil
	})
	return fd, ifindex, err
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

type capturer struct {
	ep    Endpoint
	fd    int
	start atomic.Int64 // UnixNano of the first send
	done  atomic.Bool
	wg    sync.WaitGroup
	pkts  []Packet
	err   error
	once  sync.Once
}

func startCapture(ep Endpoint) (*capturer, error) {
	fd, _, err := openPacket(ep, unix.ETH_P_ALL)
	if err != nil {
		return nil, err
	}
	c := &capturer{ep: ep, fd: fd}
	c.start.Store(time.Now().UnixNano())
	c.wg.Add(1)
	go c.loop()
	return c, nil
}

func (c *capturer) loop() {
	defer c.wg.Done()
	buf := make([]byte, maxFrame)
	for {
		n, _, _, from, err := unix.Recvmsg(c.fd, buf, nil, unix.MSG_TRUNC)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				// Stop only once the socket is drained.
				if c.done.Load() {
					return
				}
				continue
			}
			c.err = fmt.Errorf("receive: %w", err)
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if n > len(buf) {
			c.err = fmt.Errorf("received a frame of %d bytes (GRO?), more than %d", n, len(buf))
			continue
		}
		c.pkts = append(c.pkts, Packet{
			Data: append([]byte(nil), buf[:n]...),
			At:   time.Duration(time.Now().UnixNano() - c.start.Load()),
		})
	}
}

func (c *capturer) stop() ([]Packet, error) {
	c.done.Store(true)
	c.wg.Wait()
	return c.pkts, c.err
}

func (c *capturer) close() {
	c.once.Do(func() {
		c.done.Store(true)
		c.wg.Wait()
		unix.Close(c.fd)
	})
}
