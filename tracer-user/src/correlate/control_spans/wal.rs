//! The WAL appends and fdatasyncs that made a Pod write durable, one span
//! per Pod entry a sync covered, in every member's trace of the Pod.

use crate::correlate::span::SpanKey;

use crate::correlate::contract::{attr, name};

use super::*;

/// WAL writes since the segment's last sync.
#[derive(Clone, Debug, Default)]
pub(super) struct WalBatch {
    first_write_ns: u64,
    bytes: u64,
    entries: u64,
    pod_entries: Vec<WalPodEntry>,
    /// The member's Raft id, when a segment head named it.
    member_id: Option<u64>,
}

impl ControlSpans {
    /// A write to a WAL segment: part of the batch its next sync makes durable.
    pub fn on_wal(&mut self, write: &WalMessage) -> Vec<Span> {
        self.advance(write.start_ts_ns);
        if !self.batches.contains_key(&write.conn) && self.batches.len() >= MAX_WAL_FILES {
            self.dropped += write.pod_entries.len() as u64;
            return Vec::new();
        }
        let batch = self.batches.entry(write.conn).or_default();
        if batch.bytes == 0 {
            batch.first_write_ns = write.start_ts_ns;
        }
        batch.bytes += write.bytes;
        batch.entries += write.entries;
        batch.member_id = write.member.map(|m| m.member_id).or(batch.member_id);
        let room = MAX_BATCH_ENTRIES.saturating_sub(batch.pod_entries.len());
        self.dropped += write.pod_entries.len().saturating_sub(room) as u64;
        batch
            .pod_entries
            .extend(write.pod_entries.iter().take(room).cloned());
        Vec::new()
    }

    /// A sync of a file: for a WAL segment with Pod entries written since
    /// its last sync, one span per entry in its Pod's trace. One fdatasync
    /// often makes several Pods' writes durable (etcd batches proposals):
    /// each span says how many entries and which Pods shared it.
    pub fn on_fsync(&mut self, sync: &FsyncRecord) -> Vec<Span> {
        self.advance(sync.ids.ts_ns);
        let Some(batch) = self.batches.remove(&sync.conn) else {
            return Vec::new();
        };
        if let Some(id) = batch.member_id {
            self.etcd_member_id(sync.ids.tgid, id);
        }
        // Each entry's Pods, learnt once: the batch attribute needs them all
        // before any entry's span is drafted.
        let entries: Vec<(&WalPodEntry, Vec<PodName>)> = batch
            .pod_entries
            .iter()
            .map(|entry| (entry, self.learn(&entry.clues, &entry.fingerprint)))
            .collect();
        let mut pods_in_batch: Vec<String> = Vec::new();
        for (_, pods) in &entries {
            for pod in pods {
                let name = format!("{}/{}", pod.namespace, pod.name);
                if !pods_in_batch.contains(&name) {
                    pods_in_batch.push(name);
                }
            }
        }
        let batch_names = pods_in_batch
            .iter()
            .take(MAX_BATCH_NAMES)
            .cloned()
            .collect::<Vec<_>>()
            .join(",");
        let status = if sync.ret < 0 {
            SpanStatus::Error(format!("{:?} failed: error {}", sync.syscall, -sync.ret))
        } else {
            SpanStatus::Unset
        };
        for (entry, pods) in entries {
            let fingerprint = hex(&entry.fingerprint);
            for pod in pods {
                // A follower sees the Pod reported Running only here.
                self.end_if_reported(&entry.clues, &pod, entry.fingerprint);
                let mut attributes = vec![
                    string_attribute(attr::DB_SYSTEM_NAME, "etcd"),
                    int_attribute(attr::ETCD_RAFT_INDEX, entry.index as i64),
                    int_attribute(attr::ETCD_RAFT_TERM, entry.term as i64),
                    int_attribute(attr::ETCD_WAL_BYTES, batch.bytes as i64),
                    int_attribute(attr::ETCD_WAL_ENTRIES, batch.entries as i64),
                    int_attribute(attr::ETCD_WAL_PODS, pods_in_batch.len() as i64),
                    string_attribute(attr::ETCD_WAL_BATCH, &batch_names),
                    int_attribute(attr::ETCD_WAL_FSYNC_NS, sync.duration_ns as i64),
                    (
                        attr::ETCD_WAL_SHARED.to_owned(),
                        AttributeValue::Bool(pods_in_batch.len() > 1),
                    ),
                ];
                if let Some(member) = self.members.get(&sync.ids.tgid) {
                    attributes.push(string_attribute(attr::ETCD_MEMBER_NAME, member));
                }
                // In hex, as etcd prints member ids.
                if let Some(id) = batch.member_id {
                    attributes.push(string_attribute(attr::ETCD_MEMBER_ID, &format!("{id:x}")));
                }
                if let Some(role) = entry.role {
                    attributes.push(string_attribute(attr::ETCD_MEMBER_ROLE, role.as_str()));
                }
                // A follower's append is part of its leader's replication
                // to it, when that was decoded (here or on the leader's node).
                let replicated = match (entry.role, batch.member_id) {
                    (Some(RaftRole::Follower), Some(id)) => {
                        Some(replicate_key(id, entry.index)).filter(|k| self.seen.contains_key(k))
                    }
                    _ => None,
                };
                self.wait(
                    Draft {
                        pod,
                        key: SpanKey::EtcdWal {
                            conn_id: sync.conn.conn_id,
                            index: entry.index,
                            fingerprint: &fingerprint,
                        }
                        .encode(),
                        parent: Some(replicated.unwrap_or_else(|| {
                            SpanKey::EtcdCall {
                                side: Side::Server,
                                fingerprint: &fingerprint,
                            }
                            .encode()
                        })),
                        name: name::ETCD_WAL.to_owned(),
                        kind: SpanKind::Internal,
                        start_unix_ns: self.clock.unix_ns(batch.first_write_ns),
                        end_unix_ns: self.clock.unix_ns(sync.ids.ts_ns),
                        attributes,
                        status: status.clone(),
                    },
                    sync.ids.ts_ns + WAIT_NS,
                );
            }
            if entry.role == Some(RaftRole::Leader) && sync.ret >= 0 {
                let committed = self.replication.leader_synced(entry, sync.ids.ts_ns);
                self.draft_replicated(committed);
            }
        }
        self.release(false)
    }
}
