# A server for the ports tests, run inside a sandbox with the host's python3.
#   portserver.py http PORT      HTTP/1.1: / says hello, /big?n=N sends N bytes, /echo echoes a POST
#                                body, /headers answers the request's headers, /ws is a WebSocket echo,
#                                /conn names the server (a random nonce) and the connection's client port
#   portserver.py garbage PORT   answers every connection with bytes that are no HTTP, then closes
#   portserver.py endless PORT   answers a status line, then headers that never end
#   portserver.py slow PORT      answers a status line, then a byte of header every second
#   portserver.py zeros PORT     reads a decimal count and a newline, sends that many bytes, closes
#   portserver.py reset PORT     reads a request, answers half a status line, then resets the connection
#   portserver.py cut PORT       reads a request, answers a head of 1000 bytes' body and 10 of them,
#                                then resets the connection
import base64, hashlib, json, os, socket, socketserver, struct, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK = b"x" * (1 << 20)
NONCE = os.urandom(8).hex()  # this server's, as /conn names it

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are written apart

    def log_message(self, *a):
        pass

    def send_body(self, code, body, ctype="text/plain"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path == "/ws":
            return self.websocket()
        if path == "/big":
            n = int(query.partition("=")[2])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            while n > 0:
                k = min(n, len(CHUNK))
                self.wfile.write(CHUNK[:k])
                n -= k
            return
        if path == "/conn":
            return self.send_body(200, ("%s %d" % (NONCE, self.client_address[1])).encode())
        if path == "/headers":
            return self.send_body(200, json.dumps(dict(self.headers.items())).encode(), "application/json")
        self.send_body(200, ("hello from " + path + (("?" + query) if query else "")).encode())

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.send_body(200, self.rfile.read(n), "application/octet-stream")

    def websocket(self):
        key = self.headers["Sec-WebSocket-Key"]
        acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", acc)
        self.end_headers()
        self.wfile.flush()
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2:
                return
            op, n, masked = h[0] & 0x0F, h[1] & 0x7F, h[1] & 0x80
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if masked else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:
                w.write(b"\x88\x02\x03\xe8")
                w.flush()
                self.close_connection = True
                return
            if op == 9:
                op = 10
            head = bytes([0x80 | op])
            if len(data) < 126:
                head += bytes([len(data)])
            elif len(data) < 65536:
                head += bytes([126]) + struct.pack(">H", len(data))
            else:
                head += bytes([127]) + struct.pack(">Q", len(data))
            w.write(head + data)
            w.flush()


class Raw(socketserver.BaseRequestHandler):
    def handle(self):
        s = self.request
        first = s.recv(65536)
        mode = self.server.mode
        try:
            if mode == "zeros":
                n = int(first.split(b"\n")[0])
                while n > 0:
                    k = min(n, len(CHUNK))
                    s.sendall(CHUNK[:k])
                    n -= k
                s.shutdown(socket.SHUT_WR)
                s.recv(1)
            elif mode in ("reset", "cut"):
                if mode == "reset":
                    s.sendall(b"HTTP/1.1 2")
                else:
                    s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")
                time.sleep(0.2)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            elif mode == "garbage":
                s.sendall(b"\x00\xff\xfeSSH-2.0-not-http\r\n\r\n\x00")
            elif mode == "endless":
                s.sendall(b"HTTP/1.1 200 OK\r\n")
                while True:
                    s.sendall(b"X-Endless: " + b"a" * 1000 + b"\r\n")
            elif mode == "slow":
                s.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                while True:
                    time.sleep(1)
                    s.sendall(b"a")
        except OSError:
            pass


class RawServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "http":
        ThreadingHTTPServer.daemon_threads = True
        ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
    srv = RawServer(("127.0.0.1", port), Raw)
    srv.mode = mode
    srv.serve_forever()


main()
