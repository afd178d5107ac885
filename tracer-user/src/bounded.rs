//! A map with a bound that, when full, forgets its oldest entry and counts
//! it. What the stages remember of sandboxes, calls and Pods must stay
//! bounded, but forgetting everything at once when a bound is reached drops
//! what the very next event needs (a wiped set of the node spans sent sent a Pod's
//! node span twice); the oldest entry is the one least likely to be asked
//! for again.

use std::{
    borrow::Borrow,
    collections::{HashMap, VecDeque, hash_map::RandomState},
    hash::{BuildHasher, Hash},
};

/// A `HashMap` of at most `capacity` entries, the oldest inserted evicted
/// first (an insert of a key already there keeps its place). `S` hashes
/// (FxHash where the keys are the stages' own and lookups are per event).
#[derive(Clone)]
pub struct BoundedMap<K, V, S = RandomState> {
    entries: HashMap<K, (u64, V), S>,
    /// Keys in insertion order with the stamp they were inserted with; a
    /// key removed, or removed and inserted again, leaves a stale pair
    /// (its stamp no longer matches), skipped and compacted away.
    order: VecDeque<(u64, K)>,
    next_stamp: u64,
    capacity: usize,
    evicted: u64,
}

impl<K, V, S> std::fmt::Debug for BoundedMap<K, V, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundedMap")
            .field("len", &self.entries.len())
            .field("capacity", &self.capacity)
            .field("evicted", &self.evicted)
            .finish()
    }
}

impl<K: Eq + Hash + Clone, V, S: BuildHasher + Default> BoundedMap<K, V, S> {
    /// An empty map holding at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::with_hasher(S::default()),
            order: VecDeque::new(),
            next_stamp: 0,
            capacity: capacity.max(1),
            evicted: 0,
        }
    }

    /// Inserts `value` under `key`; returns the value it replaced. A new key
    /// in a full map evicts the oldest entry first.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        if let Some(slot) = self.entries.get_mut(&key) {
            return Some(std::mem::replace(&mut slot.1, value));
        }
        self.insert_evicting(key, value);
        None
    }

    /// Inserts `value` under `key` (replacing a value already there);
    /// returns what was evicted to make room, for a caller that counts what
    /// it held.
    pub fn insert_evicting(&mut self, key: K, value: V) -> Vec<(K, V)> {
        if let Some(slot) = self.entries.get_mut(&key) {
            slot.1 = value;
            return Vec::new();
        }
        let evicted = self.make_room();
        let stamp = self.stamp(&key);
        self.entries.insert(key, (stamp, value));
        evicted
    }

    /// The value under `key`, inserted with `make` if there is none (which
    /// may evict the oldest entry).
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        if !self.entries.contains_key(&key) {
            self.make_room();
            let stamp = self.stamp(&key);
            return &mut self.entries.entry(key).or_insert((stamp, make())).1;
        }
        &mut self.entries.entry(key).or_insert_with(|| (0, make())).1
    }

    /// The value under `key`.
    pub fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.entries.get(key).map(|(_, value)| value)
    }

    /// The value under `key`, to change.
    pub fn get_mut<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.entries.get_mut(key).map(|(_, value)| value)
    }

    /// Whether `key` is there.
    pub fn contains_key<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.entries.contains_key(key)
    }

    /// Removes `key`; returns its value.
    pub fn remove<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let removed = self.entries.remove(key).map(|(_, value)| value);
        self.compact();
        removed
    }

    /// Keeps the entries `keep` says to.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain(|key, (_, value)| keep(key, value));
        self.compact();
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(key, (_, value))| (key, value))
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries evicted to make room, since the map was made.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// A new stamp for `key`, noted in the insertion order.
    fn stamp(&mut self, key: &K) -> u64 {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.order.push_back((stamp, key.clone()));
        stamp
    }

    /// Evicts the oldest entries until one more fits.
    fn make_room(&mut self) -> Vec<(K, V)> {
        let mut evicted = Vec::new();
        while self.entries.len() >= self.capacity {
            let Some((stamp, key)) = self.order.pop_front() else {
                // Unreachable while every entry has its pair in `order`.
                break;
            };
            if self
                .entries
                .get(&key)
                .is_some_and(|(current, _)| *current == stamp)
            {
                if let Some((_, value)) = self.entries.remove(&key) {
                    evicted.push((key, value));
                }
                self.evicted += 1;
            }
        }
        evicted
    }

    /// Drops stale pairs from the order once they outnumber the entries.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order.retain(|(stamp, key)| {
                entries
                    .get(key)
                    .is_some_and(|(current, _)| current == stamp)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_map_forgets_its_oldest_entry_and_counts_it() {
        let mut map: BoundedMap<_, _> = BoundedMap::new(3);
        for key in 0..3 {
            map.insert(key, key * 10);
        }
        // Replacing a value keeps its place: 0 is still the oldest.
        assert_eq!(map.insert(0, 1), Some(0));
        map.insert(3, 30);
        assert!(!map.contains_key(&0));
        assert_eq!((map.len(), map.evicted()), (3, 1));
        // A removed key's stale place is skipped: 2 and 3 stay, 1 goes next.
        assert_eq!(map.remove(&2), Some(20));
        map.insert(2, 21);
        map.insert(4, 40);
        assert!(!map.contains_key(&1));
        assert_eq!(map.get(&2), Some(&21));
        assert_eq!(map.get(&3), Some(&30));
        assert_eq!(map.evicted(), 2);
        *map.get_or_insert_with(5, || 0) += 50;
        assert_eq!(map.get(&5), Some(&50));
        assert!(!map.contains_key(&3), "3 was the oldest left");
        // A caller that counts what it held gets what made room.
        assert_eq!(map.insert_evicting(6, 60), [(2, 21)]);
        assert_eq!(map.insert_evicting(6, 61), [], "a key there is replaced");
        assert_eq!(map.get(&6), Some(&61));
        assert_eq!(map.len(), 3);
    }

    #[test]
    fn its_order_stays_bounded_under_churn() {
        let mut map: BoundedMap<_, _> = BoundedMap::new(4);
        for round in 0..10_000u32 {
            map.insert(round % 8, round);
            if round % 3 == 0 {
                map.remove(&(round % 8));
            }
            map.retain(|_, value| *value % 5 != 0);
        }
        assert!(map.len() <= 4);
        assert!(
            map.order.len() <= 2 * map.len() + 64 + 1,
            "{}",
            map.order.len()
        );
    }
}
