package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
)

// ObjectHashes gives the sha256 of each BPF object embedded in the binary, by its file name,
// so that a binary says which data plane it carries (linuxfp version).
func ObjectHashes() map[string]string {
	return map[string]string{
		"linuxfp_bpfel.o":   sha256Hex(_LinuxfpBytes),
		"linuxfptc_bpfel.o": sha256Hex(_LinuxfpTcBytes),
	}
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
