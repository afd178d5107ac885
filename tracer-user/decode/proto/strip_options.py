#!/usr/bin/env python3
"""Copy etcd's .proto files into this directory without their custom options.

etcd annotates its protos with google.api.http, grpc-gateway openapiv2 and
versionpb options. None of them changes a message's wire format, and keeping
them would mean vendoring google/api and grpc-gateway protos too, so they are
removed here. Field names, numbers and types are untouched.

Usage: strip_options.py ETCD_CHECKOUT RAFT_CHECKOUT (plain source trees).
"""
import pathlib
import re
import sys

ETCD_FILES = {
    "api/authpb/auth.proto": "etcd/api/authpb/auth.proto",
    "api/mvccpb/kv.proto": "etcd/api/mvccpb/kv.proto",
    "api/etcdserverpb/rpc.proto": "etcd/api/etcdserverpb/rpc.proto",
    "api/etcdserverpb/raft_internal.proto": "etcd/api/etcdserverpb/raft_internal.proto",
    "api/etcdserverpb/etcdserver.proto": "etcd/api/etcdserverpb/etcdserver.proto",
    "api/membershippb/membership.proto": "etcd/api/membershippb/membership.proto",
    "server/storage/wal/walpb/record.proto": "etcd/server/wal/walpb/record.proto",
}
RAFT_FILES = {"raftpb/raft.proto": "raftpb/raft.proto"}


def strip_braced_options(text):
    """Remove `option (x) = { ... };` blocks, which may nest braces."""
    out, i = [], 0
    pattern = re.compile(r"option\s*\([^)]*\)\s*=\s*\{")
    while True:
        m = pattern.search(text, i)
        if not m:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if text[j] == ";":
            j += 1
        i = j


def strip(text):
    text = strip_braced_options(text)
    text = re.sub(r'^import\s+"(google/api|protoc-gen-openapiv2|etcd/api/versionpb)[^"]*";\n', "", text, flags=re.M)
    text = re.sub(r'^\s*option\s*\(versionpb\.[^)]*\)\s*=\s*"[^"]*";\n', "", text, flags=re.M)
    text = re.sub(r'\s*\[\(versionpb\.[^)]*\)\s*=\s*"[^"]*"\]', "", text)
    text = text.replace('import "rpc.proto";', 'import "etcd/api/etcdserverpb/rpc.proto";')
    return text


def main():
    etcd, raft = map(pathlib.Path, sys.argv[1:3])
    here = pathlib.Path(__file__).parent
    for root, files in ((etcd, ETCD_FILES), (raft, RAFT_FILES)):
        for src, dst in files.items():
            target = here / dst
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(strip((root / src).read_text()))


if __name__ == "__main__":
    main()
