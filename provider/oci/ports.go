package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

var _ sandbox.PortDialer = (*Provider)(nil)

// DialPort connects to 127.0.0.1:port inside ref: no link and no egress rule is needed, and a sandbox
// on loopback only is reached as well. On runc the provider makes the connection itself, from a
// socket made in the sandbox's network namespace (dialInSandbox), so that the connection's bytes pass
// between the daemon and the sandbox's server with no process between them. On gVisor, whose loopback
// is inside its own kernel, and wherever the namespace cannot be entered, the sandbox's agent makes
// it and relays its bytes over its socket (agentclient's DialPort).
//
// Errors: those of usable; ErrPortUnreachable; those of agentclient's DialPort.
func (p *Provider) DialPort(ctx context.Context, ref sandbox.Ref, port int) (net.Conn, error) {
	b, err := p.usable(ctx, ref)
	if err != nil {
		return nil, err
	}
	if p.runc.class == classRunc && !p.relayPorts.Load() {
		conn, err := dialInSandbox(ctx, b.l, port)
		if !errors.Is(err, errNoNamespace) {
			if err != nil {
				return nil, fmt.Errorf("port %d of %s: %w", port, ref, err)
			}
			return conn, nil
		}
		p.log.Debug("port reached through the agent's relay", "sandbox", ref.ID, "why", err)
	}
	conn, err := b.client.DialPort(ctx, port)
	if err != nil {
		return nil, fmt.Errorf("port %d of %s: %w", port, ref, err)
	}
	return conn, nil
}

// errNoNamespace: the sandbox's network namespace could not be entered; its agent's relay may still
// reach the port.
var errNoNamespace = errors.New("the sandbox's network namespace cannot be entered")

// dialInSandbox connects to 127.0.0.1:port in the network namespace of the container laid out in l.
// Everything in the sandbox is hostile, so nothing it says is followed: the namespace is that of the
// container's init as runc recorded it (init.pid), checked to be in the container's cgroup after a
// pidfd pins the process (a pid reused by another process after the init ended is never entered),
// and the address is always 127.0.0.1:port. Only the socket is made in the namespace, on a thread
// that returns to the daemon's namespace at once or is never used again; the connect runs on the
// daemon's poller, bounded by ctx and protocol.DialPortTimeout.
//
// Errors: errNoNamespace (wrapped, with why); ErrPortUnreachable.
func dialInSandbox(ctx context.Context, l layout, port int) (net.Conn, error) {
	pidfd, err := containerPidfd(l)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoNamespace, err)
	}
	fd, err := socketInNamespace(pidfd)
	unix.Close(pidfd)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoNamespace, err)
	}
	ctx, cancel := context.WithTimeout(ctx, protocol.DialPortTimeout)
	defer cancel()
	conn, err := connectLoopback(ctx, fd, port)
	if err != nil {
		return nil, fmt.Errorf("connect to port %d in the sandbox: %v: %w", port, err, sandbox.ErrPortUnreachable)
	}
	return conn, nil
}

// containerPidfd opens a pidfd of the init of the container laid out in l, checked to be in the
// container's cgroup after the pidfd is open: while the process the pidfd holds lives, its pid is no
// other's, so a setns through the pidfd that succeeds entered the namespace of that init.
func containerPidfd(l layout) (int, error) {
	m, err := readMetaFile(l)
	if err != nil {
		return -1, err
	}
	pid, err := containerPid(l, m.CgroupPath)
	if err != nil {
		return -1, err
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	if again, err := containerPid(l, m.CgroupPath); err != nil || again != pid {
		unix.Close(pidfd)
		return -1, fmt.Errorf("the container's init %d changed as it was opened (now %d, %v)", pid, again, err)
	}
	return pidfd, nil
}

// socketInNamespace makes a TCP socket (non-blocking, close-on-exec) in the network namespace of the
// process pidfd holds. It runs on a goroutine of its own, locked to its thread: the thread goes back
// to the namespace it came from before it is unlocked, and when it cannot, it stays locked, so that
// it ends with the goroutine and nothing else ever runs in the sandbox's namespace.
func socketInNamespace(pidfd int) (int, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, fmt.Errorf("the daemon's network namespace: %w", err)}
			return
		}
		defer unix.Close(home)
		if err := unix.Setns(pidfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, fmt.Errorf("enter the sandbox's network namespace: %w", err)}
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
		if rerr := unix.Setns(home, unix.CLONE_NEWNET); rerr != nil {
			if err == nil {
				unix.Close(fd)
			}
			ch <- result{-1, fmt.Errorf("back to the daemon's network namespace: %w", rerr)}
			return // still locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
		if err != nil {
			err = fmt.Errorf("a socket in the sandbox's network namespace: %w", err)
		}
		ch <- result{fd, err}
	}()
	r := <-ch
	return r.fd, r.err
}

// connectLoopback connects the non-blocking socket fd to 127.0.0.1:port, waiting on the poller until
// ctx ends, and returns it as a net.Conn with Nagle off. fd is closed either way.
func connectLoopback(ctx context.Context, fd, port int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "127.0.0.1:"+strconv.Itoa(port))
	defer f.Close()
	err := unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	if errors.Is(err, unix.EINPROGRESS) || errors.Is(err, unix.EINTR) {
		err = waitConnected(ctx, f)
	}
	if err != nil {
		return nil, err
	}
	conn, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return conn, nil
}

// waitConnected waits until the connect under way on f has ended, or ctx.
func waitConnected(ctx context.Context, f *os.File) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = f.SetWriteDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	var cerr error
	werr := raw.Write(func(fd uintptr) bool {
		if _, err := unix.Getpeername(int(fd)); err == nil {
			return true
		}
		so, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			cerr = err
		case so != 0:
			cerr = unix.Errno(so)
		default:
			return false // still connecting
		}
		return true
	})
	if werr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return werr
	}
	return cerr
}
