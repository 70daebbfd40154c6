package controller

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// interfaceGone tells whether an install on ifindex failed because the interface is gone: it
// was deleted after the state the plan was built from was read (a veth whose peer went first,
// say, re-read as changed). That is no failure to apply: its deletion's event follows, and
// the kernel detached its program with it.
func interfaceGone(ifindex int, err error) bool {
	if !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.ENOLINK) && !errors.Is(err, unix.ENXIO) {
		return false
	}
	_, lerr := net.InterfaceByIndex(ifindex)
	return lerr != nil
}
