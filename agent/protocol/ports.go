package protocol

import "time"

// The agent's route of port relays (protocol 2). A GET of PathPort with "Connection: Upgrade" and
// "Upgrade: UpgradeTCP" asks the agent to connect to 127.0.0.1:port, on the sandbox's own loopback,
// from inside the sandbox; once it has, it answers 101 Switching Protocols and the socket carries the
// TCP connection's bytes both ways until either side closes. A port nothing listens on is an Error
// with CodePortUnreachable (status 502), and the socket stays HTTP.
const (
	PathPort   = "/v1/port" // GET ?port=N, upgraded
	UpgradeTCP = "sandboxd-tcp"
)

// CodePortUnreachable says the agent could not connect to the port: nothing listens there, or it did
// not accept within DialPortTimeout.
const CodePortUnreachable = "port_unreachable"

// DialPortTimeout bounds the agent's connect to a port, whatever the request's deadline.
const DialPortTimeout = 10 * time.Second
