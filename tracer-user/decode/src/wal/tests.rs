use super::*;
use crate::etcd::KvRequest;
use crate::identity::{PodClue, clues_from_kv_request};
use crate::testdata;

const WAL: &str = "etcd-3.4.23-member.wal";

/// The KV requests of the entry records, decoded.
fn requests(records: &[WalRecord]) -> Vec<KvRequest> {
    records
        .iter()
        .filter(|r| r.kind == RecordKind::Entry)
        .filter_map(|r| WalKvEntry::decode(r).ok())
        .filter_map(|entry| {
            let (method, bytes) = entry.request?;
            Some(
                KvRequest::decode(method, &bytes)
                    .unwrap_or_else(|error| panic!("entry {}: {error}", entry.index)),
            )
        })
        .collect()
}

#[test]
fn whole_file_from_its_start() {
    let (records, errors) = WalReader::at_file_start().push(&testdata::bytes(WAL), false);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(records.first().map(|r| r.kind), Some(RecordKind::Crc));
    assert_eq!(records.get(1).map(|r| r.kind), Some(RecordKind::Metadata));
    let requests = requests(&records);
    let keys: Vec<String> = requests
        .iter()
        .flat_map(KvRequest::keys)
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert!(
        keys.contains(&"/registry/pods/default/x".to_string()),
        "{keys:?}"
    );
    assert!(
        keys.contains(&"/registry/pods/default/web-7d4b9".to_string()),
        "{keys:?}"
    );
}

#[test]
fn wal_txn_carries_the_pod_uid() {
    let (records, _) = WalReader::at_file_start().push(&testdata::bytes(WAL), false);
    let uid = requests(&records).iter().find_map(|request| match request {
        KvRequest::Txn(_) => clues_from_kv_request(request)
            .into_iter()
            .find_map(|c| match c {
                PodClue::Object(pod) => pod.uid,
                _ => None,
            }),
        _ => None,
    });
    assert_eq!(uid.as_deref(), Some("3f1c2a9e-5b7d-4e2a-9c1f-8a6b0d4e2f71"));
}

#[test]
fn starts_mid_file() {
    let file = testdata::bytes(WAL);
    let (all, _) = WalReader::at_file_start().push(&file, false);
    let mut reader = WalReader::new();
    let (records, _) = reader.push(&file[1001..], false);
    assert!(reader.skipped_bytes() > 0);
    // Every record from the first boundary after the cut is found.
    assert_eq!(records[..], all[all.len() - records.len()..]);
    assert!(records.len() >= 10, "{} of {}", records.len(), all.len());
}

#[test]
fn partial_writes_complete_later() {
    let file = testdata::bytes(WAL);
    let mut reader = WalReader::at_file_start();
    let mut records = Vec::new();
    for piece in file.chunks(37) {
        records.extend(reader.push(piece, false).0);
    }
    let (all, _) = WalReader::at_file_start().push(&file, false);
    assert_eq!(records, all);
}

#[test]
fn truncated_write_resynchronises() {
    let file = testdata::bytes(WAL);
    let (all, _) = WalReader::at_file_start().push(&file, false);
    let mut reader = WalReader::at_file_start();
    let (mut records, _) = reader.push(&file[..2000], true);
    records.extend(reader.push(&file[2500..], false).0);
    assert!(records.len() < all.len());
    assert_eq!(records.last(), all.last());
}

#[test]
fn a_wal_entry_holds_the_request_bytes_the_client_sent() {
    // The same etcd run recorded both (testdata/README.md): the Txn that
    // etcdctl sent over gRPC and the WAL entry etcd made of it.
    let mut connection = crate::http2::Http2Connection::default();
    for chunk in testdata::chunks("etcdctl-txn-create-pod.rec") {
        connection.push(&chunk);
    }
    let sent: Vec<Vec<u8>> = connection
        .finish()
        .iter()
        .filter_map(crate::grpc::GrpcCall::from_exchange)
        .filter(|call| call.method.as_deref() == Some("Txn"))
        .filter_map(|call| call.request_bytes().map(<[u8]>::to_vec))
        .collect();
    assert_eq!(sent.len(), 1, "one Txn on the wire");
    let (records, _) = WalReader::at_file_start().push(&testdata::bytes(WAL), false);
    let logged: Vec<Vec<u8>> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Entry)
        .filter_map(|r| WalKvEntry::decode(r).ok()?.request)
        .filter(|(method, _)| *method == "Txn")
        .map(|(_, bytes)| bytes)
        .collect();
    assert!(
        logged.contains(&sent[0]),
        "{} Txn entries, none the same bytes",
        logged.len()
    );
}

#[test]
fn the_head_of_a_segment_names_its_member() {
    let wal = testdata::bytes(WAL);
    let (records, _) = WalReader::at_file_start().push(&wal, false);
    let metadata = &records[1];
    assert_eq!(metadata.kind, RecordKind::Metadata);
    let ids = MemberIds::from_segment_head(&wal[..128])
        .expect("head parses")
        .expect("head holds the metadata record");
    // The same ids as a full decode of the record, and not zero.
    let full = etcdserverpb::Metadata::decode(metadata.data.as_slice()).unwrap();
    assert_eq!(Some(ids.member_id), full.node_id);
    assert_eq!(Some(ids.cluster_id), full.cluster_id);
    assert_ne!(ids.member_id, 0);
    assert_ne!(ids.cluster_id, 0);
}

#[test]
fn a_head_cut_before_the_metadata_names_nobody_and_garbage_is_an_error() {
    let wal = testdata::bytes(WAL);
    assert_eq!(MemberIds::from_segment_head(&wal[..20]), Ok(None));
    assert_eq!(MemberIds::from_segment_head(&[]), Ok(None));
    assert!(MemberIds::from_segment_head(&[0xff; 64]).is_err());
}

#[test]
fn a_state_tells_a_follower_but_not_whether_a_member_that_voted_for_itself_won() {
    let wal = testdata::bytes(WAL);
    let member = MemberIds::from_segment_head(&wal).unwrap().unwrap();
    let (records, _) = WalReader::at_file_start().push(&wal, false);
    // etcd saves a Ready's entries, then its state: an entry's role is read
    // from the state saved after it (as the WAL decoder does per write).
    let (mut state, mut pending, mut roles) = (None, Vec::new(), Vec::new());
    for record in &records {
        match record.kind {
            RecordKind::State => {
                let saved = HardState::decode(record).unwrap();
                roles.extend(
                    pending
                        .drain(..)
                        .map(|term| (term, saved.role(member.member_id, term))),
                );
                state = Some(saved);
            }
            RecordKind::Entry => pending.push(WalKvEntry::decode(record).unwrap().term),
            _ => {}
        }
    }
    // The bootstrap entries (term 1, before any election) were appended by
    // a follower; every entry after its election by a member that voted for
    // itself: it led (it is alone), which its state cannot tell from a
    // candidate that lost.
    assert!(roles.iter().any(|(term, _)| *term > 1), "{roles:?}");
    for (term, role) in &roles {
        let expected = if *term == 1 {
            RaftRole::Follower
        } else {
            RaftRole::Unknown
        };
        assert_eq!(*role, Some(expected), "{roles:?}");
    }
    // Another member reading the same state follows; another term says nothing.
    let state = state.unwrap();
    assert_eq!(
        state.role(member.member_id + 1, state.term),
        Some(RaftRole::Follower)
    );
    assert_eq!(state.role(member.member_id, state.term + 1), None);
}
