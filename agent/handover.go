package agent

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A relay hands its standard input and output over to the agent (agent relay, relay.go): its first
// message on the agent's socket is handoverByte with the two descriptors (SCM_RIGHTS), and from then
// on the agent serves the connection on them itself, so that the bytes of a pods/exec stream go from
// the container runtime's pipes to the agent and back with no process between. The relay waits for
// the agent to close the socket, which it does when the connection ends; the exec ends with the relay.

// handoverByte is the first byte of a relay's hand-over: no HTTP request starts with it.
const handoverByte = 0

// handoverListener is a listener whose connections may be handed over (handoverConn).
type handoverListener struct{ *net.UnixListener }

func (l handoverListener) Accept() (net.Conn, error) {
	c, err := l.AcceptUnix()
	if err != nil {
		return nil, err
	}
	return &handoverConn{sock: c}, nil
}

// handoverConn is a connection to the agent's socket that its first read finds handed over, or not.
// Handed over, it reads from in and writes to out; the socket only says the connection lives.
type handoverConn struct {
	sock *net.UnixConn

	once    sync.Once
	mu      sync.Mutex
	in, out *os.File // nil: not handed over
}

// files returns the handed-over descriptors, or nils.
func (c *handoverConn) files() (in, out *os.File) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.in, c.out
}

// errHandover: a hand-over that is not one, or of descriptors that are not pipes or sockets.
var errHandover = errors.New("agent: malformed hand-over")

func (c *handoverConn) Read(p []byte) (int, error) {
	first := false
	c.once.Do(func() { first = true })
	if !first {
		if in, _ := c.files(); in != nil {
			n, err := in.Read(p)
			return n, netError(err)
		}
		return c.sock.Read(p)
	}
	oob := make([]byte, unix.CmsgSpace(2*4))
	n, oobn, flags, _, err := c.sock.ReadMsgUnix(p, oob)
	fds := rights(oob[:oobn])
	if err != nil || oobn == 0 {
		closeAll(fds)
		return n, err
	}
	if n != 1 || p[0] != handoverByte || len(fds) != 2 || flags&unix.MSG_CTRUNC != 0 || !streamFD(fds[0]) || !streamFD(fds[1]) {
		closeAll(fds)
		return 0, errHandover
	}
	for _, fd := range fds {
		_ = unix.SetNonblock(fd, true) // pollable: the server's deadlines hold
	}
	in, out := os.NewFile(uintptr(fds[0]), "relay-in"), os.NewFile(uintptr(fds[1]), "relay-out")
	c.mu.Lock()
	c.in, c.out = in, out
	c.mu.Unlock()
	n, err = in.Read(p)
	return n, netError(err)
}

// netError is err of a file as a connection's: a *net.OpError, which says whether it is a timeout
// as net.Error does (the HTTP server tells its own cut-short reads from a client that went away so).
func netError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &net.OpError{Op: pe.Op, Net: "pipe", Err: pe.Err}
	}
	return err
}

// rights returns the descriptors of the SCM_RIGHTS messages in oob.
func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// streamFD reports whether fd is a pipe or a socket: what a relay's standard input and output are.
func streamFD(fd int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFIFO || st.Mode&unix.S_IFMT == unix.S_IFSOCK
}

func (c *handoverConn) Write(p []byte) (int, error) {
	if _, out := c.files(); out != nil {
		n, err := out.Write(p)
		return n, netError(err)
	}
	return c.sock.Write(p)
}

func (c *handoverConn) Close() error {
	if in, out := c.files(); in != nil {
		in.Close()
		out.Close()
	}
	return c.sock.Close()
}

// CloseWrite ends the connection's output (a port relay's half-close).
func (c *handoverConn) CloseWrite() error {
	if _, out := c.files(); out != nil {
		return out.Close()
	}
	return c.sock.CloseWrite()
}

func (c *handoverConn) LocalAddr() net.Addr  { return c.sock.LocalAddr() }
func (c *handoverConn) RemoteAddr() net.Addr { return c.sock.RemoteAddr() }

func (c *handoverConn) SetDeadline(t time.Time) error {
	if in, out := c.files(); in != nil {
		in.SetDeadline(t)
		return out.SetDeadline(t)
	}
	return c.sock.SetDeadline(t)
}

func (c *handoverConn) SetReadDeadline(t time.Time) error {
	if in, _ := c.files(); in != nil {
		return in.SetReadDeadline(t)
	}
	return c.sock.SetReadDeadline(t)
}

func (c *handoverConn) SetWriteDeadline(t time.Time) error {
	if _, out := c.files(); out != nil {
		return out.SetWriteDeadline(t)
	}
	return c.sock.SetWriteDeadline(t)
}

// handOver sends in and out to the agent on conn, as the first message of the connection.
func handOver(conn *net.UnixConn, in, out *os.File) error {
	var fds [2]int
	for i, f := range []*os.File{in, out} {
		sc, err := f.SyscallConn()
		if err != nil {
			return err
		}
		if err := sc.Control(func(fd uintptr) { fds[i] = int(fd) }); err != nil {
			return err
		}
	}
	_, _, err := conn.WriteMsgUnix([]byte{handoverByte}, unix.UnixRights(fds[0], fds[1]), nil)
	return err
}
