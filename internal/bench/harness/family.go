package harness

// Family is an address family the forwarding benchmarks generate traffic of.
type Family string

const (
	IPv4 Family = "ipv4"
	IPv6 Family = "ipv6"
)

// Families lists the families in report order.
var Families = []Family{IPv4, IPv6}

// ParseFamily checks a family's name.
func ParseFamily(s string) (Family, error) { return ParseName(Families, "family", s) }

// rowFamily is f as a throughput row carries it: "" for IPv4, so that IPv4 rows read as they did
// before IPv6 rows existed.
func rowFamily(f Family) Family {
	if f == IPv4 {
		return ""
	}
	return f
}

// Of is the family of a throughput row.
func (row *ThroughputRow) Of() Family {
	if row.Family == "" {
		return IPv4
	}
	return row.Family
}

// FamilyRows are the rows of family f, in their order.
func FamilyRows(rows []ThroughputRow, f Family) []ThroughputRow {
	var out []ThroughputRow
	for _, r := range rows {
		if r.Of() == f {
			out = append(out, r)
		}
	}
	return out
}

// familySizes are the frame sizes measured for family f given sizes: IPv6 frames below the
// smallest IPv6 UDP frame (MinFrame) are measured at it, once.
func familySizes(f Family, sizes []int) []int {
	var out []int
	for _, s := range sizes {
		s = max(s, MinFrame(f == IPv6))
		if !containsInt(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func containsInt(v []int, x int) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}
