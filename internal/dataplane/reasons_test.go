package dataplane

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The names in reasons.go must follow enum lfp_reason in the shared header.
func TestReasonsMatchHeader(t *testing.T) {
	src, err := os.ReadFile("../../bpf/include/linuxfp_types.h")
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`(?s)enum lfp_reason \{(.*?)\};`).FindSubmatch(src)
	if body == nil {
		t.Fatal("enum lfp_reason not found")
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(LFP_[A-Z0-9_]+)`).FindAllSubmatch(body[1], -1) {
		names = append(names, string(m[1]))
	}
	if names[len(names)-1] != "LFP_REASON_MAX" || len(names)-1 != NumReasons {
		t.Fatalf("header has %d reasons (%s), reasons.go %d", len(names)-1, strings.Join(names, " "), NumReasons)
	}
}
