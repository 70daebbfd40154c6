package harness

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// StartStream sends a UDP datagram to dst:9 every 100us from gen until stopped.
func StartStream(gen *nsutil.NS, dst string) (stop func()) {
	var c net.Conn
	gen.Do(func() error {
		var err error
		c, err = net.Dial("udp", net.JoinHostPort(dst, "9"))
		return err
	})
	if c == nil {
		return func() {}
	}
	var done atomic.Bool
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		payload := []byte("linuxfp response")
		for !done.Load() {
			c.Write(payload) // errors (ICMP unreachable before the change) are expected
			time.Sleep(100 * time.Microsecond)
		}
	}()
	return func() {
		done.Store(true)
		<-finished
		c.Close()
	}
}
