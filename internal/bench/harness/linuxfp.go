package harness

import "time"

// LinuxfpSettle is how long linuxfp must apply no change before a measurement: ten times its
// longest coalescing delay for a burst of events (20 ms).
const LinuxfpSettle = 200 * time.Millisecond
