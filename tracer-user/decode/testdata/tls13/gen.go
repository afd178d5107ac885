// Command gen writes tls13-session.txt: both directions of a real Go
// crypto/tls TLS 1.3 session over loopback, as the bytes on the socket, with
// the traffic secrets Go's KeyLogWriter reports. tracer-decode's tls tests
// decrypt it. Regenerate: go run gen.go (any Go >= 1.21).
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"os"
	"strings"
	"time"
)

// recorded keeps every byte read from and written to a connection.
type recorded struct {
	net.Conn
	read, written bytes.Buffer
}

func (r *recorded) Read(b []byte) (int, error) {
	n, err := r.Conn.Read(b)
	r.read.Write(b[:n])
	return n, err
}

func (r *recorded) Write(b []byte) (int, error) {
	r.written.Write(b)
	return r.Conn.Write(b)
}

// messages the client sends; the server answers each with its reverse.
var messages = []string{
	"hello",
	strings.Repeat("podtrace ", 1900), // 17 KB: two records
	"last",
}

func main() {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range messages {
			b := make([]byte, len(m))
			if _, err := io.ReadFull(conn, b); err != nil {
				log.Fatal(err)
			}
			for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
				b[i], b[j] = b[j], b[i]
			}
			conn.Write(b)
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	rec := &recorded{Conn: raw}
	var keylog bytes.Buffer
	client := tls.Client(rec, &tls.Config{InsecureSkipVerify: true, KeyLogWriter: &keylog, MinVersion: tls.VersionTLS13})
	for _, m := range messages {
		client.Write([]byte(m))
		b := make([]byte, len(m))
		if _, err := io.ReadFull(client, b); err != nil {
			log.Fatal(err)
		}
	}
	out := fmt.Sprintf("suite %04x\n", client.ConnectionState().CipherSuite)
	for _, line := range strings.Split(strings.TrimSpace(keylog.String()), "\n") {
		f := strings.Fields(line)
		if f[0] == "CLIENT_HANDSHAKE_TRAFFIC_SECRET" || f[0] == "CLIENT_TRAFFIC_SECRET_0" || f[0] == "SERVER_TRAFFIC_SECRET_0" {
			out += strings.ToLower(f[0]) + " " + f[2] + "\n"
		}
	}
	out += "client_to_server " + hex.EncodeToString(rec.written.Bytes()) + "\n"
	out += "server_to_client " + hex.EncodeToString(rec.read.Bytes()) + "\n"
	for _, m := range messages {
		out += "message " + hex.EncodeToString([]byte(m)) + "\n"
	}
	if err := os.WriteFile("tls13-session.txt", []byte(out), 0o644); err != nil {
		log.Fatal(err)
	}
}
