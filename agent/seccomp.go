package agent

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxFilterBytes bounds the program LoadFilter reads: the kernel takes at most 4096 instructions
// (BPF_MAXINSNS) of 8 bytes each.
const maxFilterBytes = 4096 * 8

// LoadFilter reads a classic BPF seccomp program (struct sock_filter entries in the machine's byte
// order) from the inherited descriptor fd, closes it, and installs it on every thread of this process,
// which its children inherit and cannot undo. The agent does this before it serves anything: no command
// of the sandbox runs before it, or without it. A program that cannot be read or installed is an error
// (the agent then ends), never a start without the filter.
func LoadFilter(fd int) error {
	f := os.NewFile(uintptr(fd), "seccomp-filter")
	if f == nil {
		return fmt.Errorf("seccomp filter: descriptor %d is not open", fd)
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxFilterBytes+1))
	f.Close()
	if err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	if len(raw) == 0 || len(raw)%8 != 0 || len(raw) > maxFilterBytes {
		return fmt.Errorf("seccomp filter: %d bytes is no program of at most %d instructions", len(raw), maxFilterBytes/8)
	}
	prog := make([]unix.SockFilter, len(raw)/8)
	for i := range prog {
		b := raw[8*i:]
		prog[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	// A filter needs no_new_privs (or CAP_SYS_ADMIN); the runtime set it already, and it cannot be unset.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp filter: no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// TSYNC: every thread of the agent at once (the Go runtime has started several); on failure the
	// call returns the id of a thread it could not synchronize instead of an error number.
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog)))
	switch {
	case errno != 0:
		return fmt.Errorf("seccomp filter: %w", errno)
	case r != 0:
		return fmt.Errorf("seccomp filter: thread %d could not take it", r)
	}
	return nil
}
