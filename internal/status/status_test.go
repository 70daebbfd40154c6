package status

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// serve answers the client's requests with h on a unix socket of the test's own, and returns a
// client that dials it.
func serve(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return NewClientWithDialer(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	})
}

// What the controller serves reaches the caller as it was sent.
func TestClientRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := &Status{PID: 7, StartedAt: at, FenceWatch: true, Fenced: []string{"ipv4"},
		LastApply: &Change{Seq: 3, FirstEvent: at, Applied: at.Add(time.Millisecond), Events: 2, Dirty: "[links]"},
		Interfaces: []Interface{{Ifindex: 2, Name: "eth0", Program: &Program{ID: 9, Hook: "xdp", Modules: []string{"router"}, InstalledAt: at},
			Forwarded: Counter{Packets: 5, Bytes: 500}, Passed: map[string]Counter{"ttl": {Packets: 1, Bytes: 60}}}}}
	var since string
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/status":
			writeJSONForTest(w, want)
		case "/v1/changes":
			since = r.URL.Query().Get("since")
			writeJSONForTest(w, []Change{*want.LastApply})
		}
	})
	got, err := c.Status()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("status %+v, want %+v", got, want)
	}
	ch, err := c.Changes(2)
	if err != nil || since != "2" || len(ch) != 1 || ch[0] != *want.LastApply {
		t.Fatalf("changes %+v %v (asked since %q), want the one change since 2", ch, err, since)
	}
}

// The errors a caller tells apart: no controller, not allowed, and any other answer with what
// the controller said.
func TestClientErrors(t *testing.T) {
	c := NewClientWithDialer(func(context.Context) (net.Conn, error) {
		return nil, errors.New("connection refused")
	})
	if _, err := c.Status(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("no controller: %v, want ErrNotRunning", err)
	}
	c = serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "uid 1000 lacks CAP_NET_ADMIN", http.StatusForbidden)
	})
	if _, err := c.Status(); !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "uid 1000") {
		t.Fatalf("forbidden: %v, want ErrNotAllowed with the controller's reason", err)
	}
	c = serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})
	if _, err := c.Status(); err == nil || errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("unavailable: %v, want the status and the body", err)
	}
	if _, err := NewClientInNetns("lfp-no-such-netns-test"); !errors.Is(err, ErrNoNetns) {
		t.Fatalf("missing namespace: %v, want ErrNoNetns", err)
	}
}

func writeJSONForTest(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
