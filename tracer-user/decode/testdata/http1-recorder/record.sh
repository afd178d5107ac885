#!/bin/sh
# Records testdata/http1-*.rec (see ../README.md). Run from this directory
# after `cargo build -p tracer-decode --example record_proxy`.
set -eu
PROXY=../../../../target/debug/examples/record_proxy
OUT=$(mktemp -d)
python3 server.py 18080 & SERVER=$!
sleep 0.5
record() { # name command...
    name=$1; shift
    $PROXY 127.0.0.1:18081 127.0.0.1:18080 "$OUT/$name" & P=$!
    sleep 0.3
    "$@"
    sleep 0.5
    kill $P
    cp "$OUT/$name-0.rec" "../http1-$name.rec"
}
record keepalive python3 clients.py keepalive 18081
record watch python3 clients.py watch 18081
record pipelined python3 clients.py pipelined 18081
record upgrade python3 clients.py upgrade 18081
record close curl -s -o /dev/null http://127.0.0.1:18081/close
record expect curl -s -o /dev/null -X PUT -H 'Expect: 100-continue' \
    -H 'Content-Type: application/json' -H 'Authorization: Bearer s3cr3t-token' \
    --data-binary @../pod-web-7d4b9.json http://127.0.0.1:18081/api/v1/namespaces/default/pods/web-7d4b9
kill $SERVER
rm -r "$OUT"
