"""A small kube-apiserver look-alike for recording HTTP/1.1 test connections.

Python's http.server (HTTP/1.1, keep-alive) answering the requests that
clients.py sends; see ../README.md for how the recordings were made.
Usage: python3 server.py PORT
"""
import http.server
import json
import sys
import time

with open(__file__.rsplit("/", 2)[0] + "/pod-web-7d4b9.json", "rb") as f:
    POD = f.read().strip()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-lookalike/1"

    def log_message(self, *args):
        pass

    def send_json(self, code, body, extra=()):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def do_GET(self):
        path = self.path
        if "watch=" in path:
            # As apiserver streams a watch: chunked, one JSON event per chunk.
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for kind in ("ADDED", "MODIFIED", "DELETED"):
                event = b'{"type":"%s","object":%s}\n' % (kind.encode(), POD)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
        elif path.startswith("/trailers"):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Trailer", "X-Checksum")
            self.end_headers()
            self.wfile.write(b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Checksum: 42\r\n\r\n")
        elif path.startswith("/close"):
            # No length: the body ends when the connection closes.
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"until the connection closes\n")
            time.sleep(0.02)
            self.wfile.write(b"second write\n")
            self.close_connection = True
        elif path.startswith("/api/v1/namespaces/default/pods/web-7d4b9"):
            if self.headers.get("If-None-Match") == '"rv-1"':
                self.send_response(304)
                self.send_header("ETag", '"rv-1"')
                self.end_headers()
                return
            self.send_json(200, POD, [("ETag", '"rv-1"'),
                                      ("Set-Cookie", "session=s3cr3t-cookie; HttpOnly")])
        else:
            self.send_json(404, b'{"kind":"Status","code":404}')

    do_HEAD = do_GET

    def do_POST(self):
        body = self.read_body()
        if self.path.endswith("/binding"):
            self.send_json(201, b'{"kind":"Status","status":"Success","code":201}')
        else:
            self.send_json(201, body or POD)

    def do_PUT(self):
        self.do_POST()

    def do_DELETE(self):
        self.send_response(204)
        self.end_headers()


class UpgradeHandler(Handler):
    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            self.send_response(101)
            self.send_header("Connection", "Upgrade")
            self.send_header("Upgrade", "websocket")
            self.send_header("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
            self.end_headers()
            # Echo raw bytes: no longer HTTP.
            data = self.connection.recv(1024)
            self.connection.sendall(data)
            self.close_connection = True
        else:
            super().do_GET()


if __name__ == "__main__":
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), UpgradeHandler)
    server.serve_forever()
