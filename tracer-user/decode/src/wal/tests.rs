use super::*;
use crate::identity::{PodClue, clues_from_kv_request};
use crate::testdata;

const WAL: &str = "etcd-3.4.23-member.wal";

fn entries(records: &[WalRecord]) -> Vec<WalEntry> {
    records
        .iter()
        .filter(|r| r.kind == RecordKind::Entry)
        .filter_map(|r| WalEntry::decode(r).ok())
        .collect()
}

#[test]
fn whole_file_from_its_start() {
    let (records, errors) = WalReader::at_file_start().push(&testdata::bytes(WAL), false);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(records.first().map(|r| r.kind), Some(RecordKind::Crc));
    assert_eq!(records.get(1).map(|r| r.kind), Some(RecordKind::Metadata));
    let entries = entries(&records);
    let keys: Vec<String> = entries
        .iter()
        .filter_map(|e| match &e.payload {
            EntryPayload::Kv { request, .. } => Some(request.keys()),
            _ => None,
        })
        .flatten()
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
    let uid = entries(&records).iter().find_map(|e| match &e.payload {
        EntryPayload::Kv {
            request: request @ KvRequest::Txn(_),
            ..
        } => clues_from_kv_request(request)
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
