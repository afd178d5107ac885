//! Sockets and WAL files that targets had open before podtrace started,
//! found in /proc so that long-lived connections (apiserver↔etcd,
//! kubelet↔containerd) are followed like new ones.
//!
//! For a process: `/proc/PID/fd/*` links name `socket:[INODE]` or a path;
//! the process's own network namespace view (`/proc/PID/net/{tcp,tcp6,unix}`)
//! maps socket inodes to addresses.

use std::{
    collections::HashMap,
    fs,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::Path,
};

use tracer_common::io::{ConnAction, FdKind};

use super::wire::{Peer, unix_path_string};

/// An open fd worth following.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenFd {
    /// Process id.
    pub tgid: u32,
    /// File descriptor.
    pub fd: u32,
    /// Socket or WAL file.
    pub kind: FdKind,
    /// For sockets, the other end (TCP) or the socket path (unix, if bound).
    pub peer: Peer,
    /// For TCP sockets, the local port: with `peer`, it finds the other
    /// end of a connection between two processes of this host.
    pub local_port: Option<u16>,
    /// For files, the path.
    pub path: Option<String>,
    /// Which end the process is: `AcceptedBeforeStart`,
    /// `ConnectedBeforeStart`, or `OpenAtStart` when not known.
    pub action: ConnAction,
}

/// A socket in a /proc/net table: its peer, and which end it is.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SocketEntry {
    peer: Peer,
    local_port: Option<u16>,
    action: ConnAction,
}

/// TCP states that carry no data (include/net/tcp_states.h): LISTEN (10),
/// CLOSE (7).
const TCP_IDLE_STATES: [u8; 2] = [0x0a, 0x07];
/// `__SO_ACCEPTCON` in /proc/net/unix Flags: a listening socket.
const UNIX_LISTENING_FLAG: u32 = 0x0001_0000;
/// SOCK_STREAM in /proc/net/unix Type.
const UNIX_STREAM: u32 = 1;

/// Open sockets (TCP in any data-carrying state, connected unix stream
/// sockets) of `tgid`, and, when `wal_files`, its open `*.wal` files.
/// A process that exits during the scan yields what was read.
pub fn open_fds(proc_root: &Path, tgid: u32, wal_files: bool) -> Vec<OpenFd> {
    let dir = proc_root.join(tgid.to_string());
    let Ok(fds) = fs::read_dir(dir.join("fd")) else {
        return Vec::new();
    };
    let mut sockets: HashMap<u64, SocketEntry> = HashMap::new();
    for (file, v6) in [("net/tcp", false), ("net/tcp6", true)] {
        if let Ok(table) = fs::read_to_string(dir.join(file)) {
            sockets.extend(parse_tcp_table(&table, v6));
        }
    }
    if let Ok(table) = fs::read_to_string(dir.join("net/unix")) {
        sockets.extend(parse_unix_table(&table));
    }
    fds.filter_map(Result::ok)
        .filter_map(|entry| {
            let fd: u32 = entry.file_name().to_str()?.parse().ok()?;
            let link = fs::read_link(entry.path()).ok()?;
            let link = link.to_string_lossy();
            if let Some(inode) = link
                .strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'))
            {
                let entry = sockets.get(&inode.parse().ok()?)?.clone();
                return Some(OpenFd {
                    tgid,
                    fd,
                    kind: FdKind::Socket,
                    peer: entry.peer,
                    local_port: entry.local_port,
                    path: None,
                    action: entry.action,
                });
            }
            (wal_files && link.ends_with(".wal")).then(|| OpenFd {
                tgid,
                fd,
                kind: FdKind::WalFile,
                peer: Peer::Unknown,
                local_port: None,
                path: Some(link.into_owned()),
                action: ConnAction::OpenAtStart,
            })
        })
        .collect()
}

/// inode → remote address of the data-carrying sockets in a /proc/net/tcp{,6}
/// table. A socket whose local port is one a socket of the table listens on
/// (same address, or the wildcard) was accepted; the others connected.
fn parse_tcp_table(table: &str, v6: bool) -> Vec<(u64, SocketEntry)> {
    const LISTEN: u8 = 0x0a;
    let rows: Vec<(SocketAddr, SocketAddr, u8, u64)> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            let local = parse_hex_addr(fields.get(1)?, v6)?;
            let remote = parse_hex_addr(fields.get(2)?, v6)?;
            let state = u8::from_str_radix(fields.get(3)?, 16).ok()?;
            let inode = fields.get(9)?.parse().ok()?;
            Some((local, remote, state, inode))
        })
        .collect();
    let listening: Vec<SocketAddr> = rows
        .iter()
        .filter(|row| row.2 == LISTEN)
        .map(|row| row.0)
        .collect();
    rows.iter()
        .filter(|(_, _, state, _)| !TCP_IDLE_STATES.contains(state))
        .map(|&(local, remote, _, inode)| {
            let accepted = listening.iter().any(|listener| {
                listener.port() == local.port()
                    && (listener.ip() == local.ip() || listener.ip().is_unspecified())
            });
            let action = if accepted {
                ConnAction::AcceptedBeforeStart
            } else {
                ConnAction::ConnectedBeforeStart
            };
            (
                inode,
                SocketEntry {
                    peer: Peer::Tcp(remote),
                    local_port: Some(local.port()),
                    action,
                },
            )
        })
        .collect()
}

/// `0100007F:0050` (IPv4) or 32 hex digits (IPv6), each 32-bit word in host
/// (little-endian) order, then the port in big-endian hex.
fn parse_hex_addr(text: &str, v6: bool) -> Option<SocketAddr> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let ip = match (v6, words.as_slice()) {
        (false, [word]) => IpAddr::V4(Ipv4Addr::from(word.to_le_bytes())),
        (true, [a, b, c, d]) => {
            let mut bytes = [0u8; 16];
            for (chunk, word) in bytes.chunks_exact_mut(4).zip([a, b, c, d]) {
                chunk.copy_from_slice(&word.to_le_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// inode → path of the connected stream sockets in a /proc/net/unix table:
/// `Num RefCount Protocol Flags Type St Inode [Path]`. An accepted socket
/// shows the path of the socket it was accepted on; a client's socket, which
/// is not bound, shows none.
fn parse_unix_table(table: &str) -> Vec<(u64, SocketEntry)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            let flags = u32::from_str_radix(fields.get(3)?, 16).ok()?;
            let kind = u32::from_str_radix(fields.get(4)?, 16).ok()?;
            let inode = fields.get(6)?.parse().ok()?;
            if kind != UNIX_STREAM || flags & UNIX_LISTENING_FLAG != 0 {
                return None;
            }
            let entry = match fields.get(7) {
                // /proc shows abstract names with a leading `@` already.
                Some(path) => SocketEntry {
                    peer: Peer::Unix(unix_path_string(path.as_bytes())),
                    local_port: None,
                    action: ConnAction::AcceptedBeforeStart,
                },
                None => SocketEntry {
                    peer: Peer::Unknown,
                    local_port: None,
                    action: ConnAction::ConnectedBeforeStart,
                },
            };
            Some((inode, entry))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_table_keeps_established_and_skips_listening() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:094B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:094B 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0000000000000000 20 4 30 10 -1";
        let sockets = parse_tcp_table(table, false);
        assert_eq!(
            sockets,
            [(
                2222,
                SocketEntry {
                    peer: Peer::Tcp("127.0.0.1:53924".parse().unwrap()),
                    local_port: Some(2379),
                    // Local port 2379 is the listener's: accepted.
                    action: ConnAction::AcceptedBeforeStart,
                }
            )]
        );
    }

    #[test]
    fn tcp6_addresses_are_word_swapped() {
        let addr = parse_hex_addr("00000000000000000000000001000000:0050", true).unwrap();
        assert_eq!(addr, "[::1]:80".parse().unwrap());
    }

    #[test]
    fn unix_table_keeps_connected_streams_with_paths() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 3333 /run/containerd/containerd.sock
0000000000000000: 00000003 00000000 00000000 0001 03 4444 /run/containerd/containerd.sock
0000000000000000: 00000003 00000000 00000000 0001 03 5555
0000000000000000: 00000003 00000000 00000000 0002 01 6666 /dev/log";
        let sockets = parse_unix_table(table);
        assert_eq!(
            sockets,
            [
                (
                    4444,
                    SocketEntry {
                        peer: Peer::Unix("/run/containerd/containerd.sock".into()),
                        local_port: None,
                        action: ConnAction::AcceptedBeforeStart,
                    }
                ),
                (
                    5555,
                    SocketEntry {
                        peer: Peer::Unknown,
                        local_port: None,
                        action: ConnAction::ConnectedBeforeStart,
                    }
                )
            ]
        );
    }

    #[test]
    fn own_process_sockets_are_found() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, _) = listener.accept().unwrap();
        let found = open_fds(Path::new("/proc"), std::process::id(), false);
        let client_fd = std::os::fd::AsRawFd::as_raw_fd(&client) as u32;
        let entry = found
            .iter()
            .find(|open| open.fd == client_fd)
            .expect("client socket");
        assert_eq!(entry.peer, Peer::Tcp(listener.local_addr().unwrap()));
        assert_eq!(entry.action, ConnAction::ConnectedBeforeStart);
        let server_fd = std::os::fd::AsRawFd::as_raw_fd(&_server) as u32;
        let server = found.iter().find(|open| open.fd == server_fd).unwrap();
        assert_eq!(server.action, ConnAction::AcceptedBeforeStart);
        // The listening socket carries no data and is not followed.
        let listener_fd = std::os::fd::AsRawFd::as_raw_fd(&listener) as u32;
        assert!(found.iter().all(|open| open.fd != listener_fd));
    }
}
