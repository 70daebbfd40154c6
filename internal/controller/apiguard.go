package controller

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The status socket is abstract, so anyone in the network namespace can connect to it. It
// answers only root and holders of CAP_NET_ADMIN (who could change the configuration linuxfp
// follows anyway), and bounds what any client can hold, so that the API can never take the
// file descriptors the controller needs to follow a configuration change.
//
// File descriptors: since Go 1.19 the syscall package raises the soft RLIMIT_NOFILE to the hard
// limit (less one) at start and gives children the original back, so linuxfp has whatever hard
// limit it was started with: systemd's default of 524288, or as little as 1024 where soft and
// hard are equal. The API holds at most apiMaxConns answered and apiMaxRefusing refused
// connections, the connection being checked and its pidfd: a few dozen, far below 1024.
const (
	// apiMaxConns: answered connections open at once. A connection beyond it is refused (503)
	// rather than left waiting: netutil.LimitListener would stop accepting instead, and then no
	// connection is checked or refused either, the kernel's backlog fills with a flood and a
	// legitimate client's connect fails with it.
	apiMaxConns = 32
	// apiMaxRefusing: refused connections being told why at once; beyond it, a refused
	// connection is closed without a word (a flood is not owed an answer).
	apiMaxRefusing = 16
	// apiRefuseLinger bounds how long a refused connection is kept to tell it why.
	apiRefuseLinger = 500 * time.Millisecond
)

// newAPIServer serves h with timeouts that no client can stretch (a half-sent request is
// dropped after ReadHeaderTimeout). Serve it on a newAPIListener.
func newAPIServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       10 * time.Second,
		MaxHeaderBytes:    8 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// apiListener hands http.Server only the connections of authorised peers, at most apiMaxConns
// at a time; every other connection is refused (see refuse).
type apiListener struct {
	net.Listener
	log      *slog.Logger
	userNS   nsID // linuxfp's own user namespace
	answered chan struct{}
	refusing chan struct{}
}

func newAPIListener(ln net.Listener, log *slog.Logger) *apiListener {
	l := &apiListener{Listener: ln, log: log,
		answered: make(chan struct{}, apiMaxConns), refusing: make(chan struct{}, apiMaxRefusing)}
	l.userNS, _ = userNSOf("self") // unknown: only uid 0 is answered
	return l
}

// Accept returns the next connection of an authorised peer while fewer than apiMaxConns are
// open. It never blocks on the limit, so every connection is checked (and a refused one
// closed) as soon as it arrives.
func (l *apiListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err // http.Server retries temporary errors (EMFILE) after a pause
		}
		p, err := peerOf(c, l.userNS)
		if err != nil || !p.allowed() {
			why := fmt.Sprintf("uid %d, pid %d: not root, no CAP_NET_ADMIN", p.uid, p.pid)
			if p.capEff&(1<<unix.CAP_NET_ADMIN) != 0 {
				why = fmt.Sprintf("uid %d, pid %d: not root, CAP_NET_ADMIN only in another user namespace", p.uid, p.pid)
			}
			if err != nil {
				why = "cannot tell who connected: " + err.Error()
			}
			l.log.Debug("status API: refused a connection", "why", why)
			l.refuse(c, http.StatusForbidden, why)
			continue
		}
		select {
		case l.answered <- struct{}{}:
			return &slotConn{Conn: c, release: func() { <-l.answered }}, nil
		default:
			l.refuse(c, http.StatusServiceUnavailable,
				"linuxfp answers at most "+strconv.Itoa(apiMaxConns)+" status connections at once; try again")
		}
	}
}

// refuse answers c with code and msg without looking at its request (once it has arrived), and
// closes it within twice apiRefuseLinger; with apiMaxRefusing others being answered, it closes c
// at once.
func (l *apiListener) refuse(c net.Conn, code int, msg string) {
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		// Answer once the request has arrived (its header's end, 4 KiB of it, or the
		// deadline): an answer written before it reaches an HTTP client as a response on an
		// idle connection, which Go's transport drops, failing the request without the reason
		// ("Unsolicited response received on idle HTTP channel"); and a client that writes its
		// request into a socket already closed gets EPIPE and never reads the answer.
		c.SetReadDeadline(time.Now().Add(apiRefuseLinger))
		var seen []byte
		buf := make([]byte, 1024)
		for len(seen) < 4<<10 && !bytes.Contains(seen, []byte("\r\n\r\n")) {
			n, err := c.Read(buf)
			seen = append(seen, buf[:n]...)
			if err != nil {
				break
			}
		}
		c.SetWriteDeadline(time.Now().Add(apiRefuseLinger))
		fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
			code, http.StatusText(code), len(msg)+1, msg)
	}()
}

// slotConn gives its place among the apiMaxConns back when http.Server closes it.
type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// peer is what linuxfp knows of the process at the other end of a status connection.
type peer struct {
	pid int32
	// uid is the effective uid the process had when it connected, as linuxfp's user
	// namespace sees it (SO_PEERCRED translates it; an unmapped uid is the overflow uid).
	uid uint32
	// sameUserNS: the process is in linuxfp's user namespace, where its capabilities count.
	// Capabilities held in a user namespace of its own (unshare -Ur) count only there; linuxfp
	// itself runs in the initial one (loading its programs needs CAP_BPF there), which has no
	// ancestor whose capabilities would count as well.
	sameUserNS bool
	capEff     uint64
}

// allowed: root, or a process holding CAP_NET_ADMIN in linuxfp's user namespace, may read the
// status.
func (p peer) allowed() bool {
	return p.uid == 0 || (p.sameUserNS && p.capEff&(1<<unix.CAP_NET_ADMIN) != 0)
}

// peerOf asks the kernel who is connected on c. The uid comes from SO_PEERCRED, fixed when the
// peer called connect(). The kernel tells no capabilities of a socket's peer, so they are read
// with capget(2) of the pid SO_PEERCRED gives (the set CapEff in /proc/<pid>/status shows, at
// a seventh of the cost, so that a refusal costs little more than the accept), at accept: a
// peer that executes a program with file capabilities in between is judged by that program's
// capabilities. Read by pid, the answer could be another process's if the peer had exited and
// its pid been reused in between; for a peer about to be answered, its pidfd (SO_PEERPIDFD,
// Linux 6.5) closes that window: if it still names a live process after the read, the pid was
// never free, so the read was the peer's. Without it (older kernels) the window stays, as long
// as an accept takes.
func peerOf(c net.Conn, userNS nsID) (peer, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peer{}, errors.New("not a unix connection")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peer{}, err
	}
	if credErr != nil {
		return peer{}, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	p := peer{pid: cred.Pid, uid: cred.Uid}
	if p.uid == 0 {
		return p, nil
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3, Pid: p.pid}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return p, fmt.Errorf("capget pid %d: %w", p.pid, err)
	}
	p.capEff = uint64(data[1].Effective)<<32 | uint64(data[0].Effective)
	if p.capEff&(1<<unix.CAP_NET_ADMIN) == 0 {
		return p, nil // refused whatever its namespace
	}
	ns, err := userNSOf(strconv.Itoa(int(p.pid)))
	if err != nil {
		return p, err
	}
	p.sameUserNS = userNS != (nsID{}) && ns == userNS
	var pidfd int
	var pidfdErr error
	if err := rc.Control(func(fd uintptr) {
		pidfd, pidfdErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	}); err != nil {
		return p, err
	}
	switch {
	case errors.Is(pidfdErr, unix.ENOPROTOOPT):
		return p, nil
	case pidfdErr != nil:
		return p, fmt.Errorf("pid %d: SO_PEERPIDFD: %w", p.pid, pidfdErr)
	}
	defer unix.Close(pidfd)
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return p, fmt.Errorf("pid %d exited before it was checked: %w", p.pid, err)
	}
	return p, nil
}

// nsID identifies a namespace (device and inode of its /proc/<pid>/ns file).
type nsID struct{ dev, ino uint64 }

func userNSOf(pid string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+pid+"/ns/user", &st); err != nil {
		return nsID{}, err
	}
	return nsID{st.Dev, st.Ino}, nil
}
