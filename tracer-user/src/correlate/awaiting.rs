//! Spans held until what they wait for arrives — their parent, the other
//! side of their call, their Pod's UID — or until a deadline: the one way
//! correlation holds a span back (a server span for its client, an etcd span
//! for its parent write, a root for the client side of the write that ended
//! it).

/// Items held with their deadlines, in the order they came; bounded.
#[derive(Debug)]
pub struct Awaiting<T> {
    held: Vec<(T, u64)>,
    capacity: usize,
}

impl<T> Awaiting<T> {
    /// Holds at most `capacity` items at once.
    pub fn new(capacity: usize) -> Self {
        Self {
            held: Vec::new(),
            capacity,
        }
    }

    /// Holds `item` until `deadline_ns` (CLOCK_MONOTONIC); when full, gives
    /// it back for the caller to send as it is or count.
    pub fn hold(&mut self, item: T, deadline_ns: u64) -> Result<(), T> {
        if self.held.len() >= self.capacity {
            return Err(item);
        }
        self.held.push((item, deadline_ns));
        Ok(())
    }

    /// Takes out, in the order they came, the items `arrived` says have
    /// what they wait for (it may fill in what it finds), those whose
    /// deadline is at or before `now_ns`, and all of them when `all`.
    pub fn take(
        &mut self,
        now_ns: u64,
        all: bool,
        mut arrived: impl FnMut(&mut T) -> bool,
    ) -> Vec<T> {
        let mut out = Vec::new();
        for (mut item, deadline_ns) in std::mem::take(&mut self.held) {
            if arrived(&mut item) || all || now_ns >= deadline_ns {
                out.push(item);
            } else {
                self.held.push((item, deadline_ns));
            }
        }
        out
    }

    /// Whether any held item is `matching`.
    pub fn any(&self, matching: impl FnMut(&T) -> bool) -> bool {
        self.held.iter().map(|(item, _)| item).any(matching)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_go_when_they_arrive_at_their_deadline_or_at_the_end_in_their_order() {
        let mut awaiting = Awaiting::new(3);
        awaiting.hold("a", 10).unwrap();
        awaiting.hold("b", 20).unwrap();
        awaiting.hold("c", 30).unwrap();
        assert_eq!(awaiting.hold("d", 40), Err("d"), "full");
        assert_eq!(awaiting.take(5, false, |item| *item == "b"), ["b"]);
        assert_eq!(awaiting.take(10, false, |_| false), ["a"]);
        assert!(awaiting.any(|item| *item == "c") && !awaiting.any(|item| *item != "c"));
        assert_eq!(awaiting.take(11, true, |_| false), ["c"]);
        assert!(!awaiting.any(|_| true));
    }
}
