package controller

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPeerAllowed(t *testing.T) {
	const netAdmin, netRaw = 1 << 12, 1 << 13
	for _, tc := range []struct {
		name string
		p    peer
		want bool
	}{
		{"root", peer{uid: 0}, true},
		{"root without capabilities", peer{uid: 0, sameUserNS: true}, true},
		{"nobody", peer{uid: 65534, sameUserNS: true}, false},
		{"nobody with CAP_NET_ADMIN", peer{uid: 65534, sameUserNS: true, capEff: netAdmin}, true},
		{"nobody with CAP_NET_RAW only", peer{uid: 65534, sameUserNS: true, capEff: netRaw}, false},
		{"every capability of a namespace of its own (unshare -Ur)", peer{uid: 1000, capEff: 1<<41 - 1}, false},
	} {
		if got := tc.p.allowed(); got != tc.want {
			t.Errorf("%s: allowed %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAPIListenerLimit: beyond apiMaxConns open connections a client is told so at once (503)
// instead of waiting, and is answered again once one closes.
func TestAPIListenerLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the listener answers only root or CAP_NET_ADMIN")
	}
	sock := filepath.Join(t.TempDir(), "api")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := newAPIServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), log)
	go srv.Serve(newAPIListener(ln, log))
	defer srv.Close()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	get := func() (int, string) {
		t.Helper()
		resp, err := hc.Get("http://linuxfp/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != http.StatusOK {
		t.Fatalf("root: %d %s, want 200", code, body)
	}

	// Hold every place with a half-sent request. Connections are accepted in the order they
	// were made, so the next one is over the limit.
	var held []net.Conn
	for range apiMaxConns {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: linuxfp\r\n")
		held = append(held, c)
	}
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "at most") {
		t.Fatalf("over the limit: %d %q, want 503 saying why", code, body)
	}

	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := get()
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a place was given back, yet: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
