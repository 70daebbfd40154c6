package observe

import (
	"crypto/sha256"
	"encoding/hex"
)

// ObjectHashes gives the sha256 of each BPF object embedded in the binary, by its file name,
// so that a binary says which watchers it carries (linuxfp version).
func ObjectHashes() map[string]string {
	return map[string]string{
		"netlinkwatch_bpfel.o": sha256Hex(_NetlinkwatchBytes),
		"sysctlwatch_bpfel.o":  sha256Hex(_SysctlwatchBytes),
	}
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
