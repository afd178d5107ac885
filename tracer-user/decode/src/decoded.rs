//! The result shape every framing parser in this crate returns.

/// What a parser made of the bytes at the start of its buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded<T> {
    /// One complete unit, using the first `consumed` bytes.
    Message {
        /// The decoded unit.
        msg: T,
        /// How many bytes of the buffer it used.
        consumed: usize,
    },
    /// The bytes so far are a valid prefix: wait for more.
    Incomplete,
    /// The bytes are not this protocol.
    NotMine,
}
