"""Clients for the HTTP/1.1 recordings: one connection per scenario.

Usage: python3 clients.py SCENARIO PORT  (see ../README.md)
"""
import http.client
import socket
import sys
import time

POD = open(__file__.rsplit("/", 2)[0] + "/pod-web-7d4b9.json", "rb").read().strip()
POD_PATH = "/api/v1/namespaces/default/pods/web-7d4b9"
SECRET = {
    "Authorization": "Bearer s3cr3t-token",
    "Cookie": "session=s3cr3t-cookie",
    "User-Agent": "kubectl/v1.30.0 (linux/amd64) kubernetes/7c48c2b",
    "Accept": "application/json",
}


def keepalive(port):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", POD_PATH, headers=SECRET)
    conn.getresponse().read()
    conn.request("POST", "/api/v1/namespaces/default/pods", body=POD,
                 headers={**SECRET, "Content-Type": "application/json"})
    conn.getresponse().read()
    binding = b'{"kind":"Binding","apiVersion":"v1","metadata":{"name":"web-7d4b9"},"target":{"kind":"Node","name":"node-1"}}'
    conn.request("POST", POD_PATH + "/binding", body=iter([binding[:40], binding[40:]]),
                 headers={"Content-Type": "application/json", "Authorization": "Bearer s3cr3t-token"},
                 encode_chunked=True)
    conn.getresponse().read()
    conn.request("HEAD", POD_PATH)
    conn.getresponse().read()
    conn.request("GET", POD_PATH, headers={"If-None-Match": '"rv-1"'})
    conn.getresponse().read()
    conn.request("DELETE", POD_PATH, headers={"Proxy-Authorization": "Basic czNjcjN0"})
    conn.getresponse().read()
    conn.request("GET", "/trailers")
    conn.getresponse().read()
    conn.close()


def watch(port):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dweb-7d4b9&watch=1",
                 headers=SECRET)
    conn.getresponse().read()
    conn.request("GET", POD_PATH, headers=SECRET)
    conn.getresponse().read()
    conn.close()


def read_for(sock, seconds):
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except socket.timeout:
        pass


def pipelined(port):
    sock = socket.create_connection(("127.0.0.1", port))
    host = "Host: 127.0.0.1:%d\r\n" % port
    sock.sendall(
        ("GET %s HTTP/1.1\r\n%sAccept: application/json\r\n\r\n" % (POD_PATH, host)
         + "HEAD %s HTTP/1.1\r\n%s\r\n" % (POD_PATH, host)
         + "GET %s HTTP/1.1\r\n%sIf-None-Match: \"rv-1\"\r\n\r\n" % (POD_PATH, host)
         + "DELETE %s HTTP/1.1\r\n%sContent-Length: 0\r\n\r\n" % (POD_PATH, host)).encode())
    read_for(sock, 0.5)
    sock.close()


def upgrade(port):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(("GET /api/v1/namespaces/default/pods/web-7d4b9/exec?command=sh&stdin=true HTTP/1.1\r\n"
                  "Host: 127.0.0.1:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                  "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  "Authorization: Bearer s3cr3t-token\r\n\r\n" % port).encode())
    sock.recv(4096)
    time.sleep(0.05)
    sock.sendall(b"\x81\x05hello GET / HTTP/1.1\r\n\r\n")
    read_for(sock, 0.3)
    sock.close()


if __name__ == "__main__":
    globals()[sys.argv[1]](int(sys.argv[2]))
