//! The one definition of everything podtrace's kernel programs and its agent share.
//!
//! In: nothing. Out: `#[repr(C)]` records the eBPF programs write into the ring
//! buffer ([`event`]), the configuration user space hands to the programs before
//! load ([`config`]), socket and file capture ([`io`]), function probes on Kubernetes components
//! ([`gofunc`]), the reasons for which the kernel side drops or cuts data
//! ([`drop_reason`]), and the names of maps and programs ([`names`]).
//!
//! The crate is `no_std` so the kernel side can use it. Every type here holds
//! plain integers and byte arrays: the kernel writes integers, user space turns
//! them into enums with `TryFrom` and rejects what it does not know. With the
//! `user` feature the types also implement `aya::Pod`.
#![no_std]

pub mod config;
pub mod drop_reason;
pub mod event;
pub mod gofunc;
pub mod io;
pub mod names;

/// Implements `aya::Pod` for plain-data wire types when building user space.
macro_rules! impl_pod {
    ($($ty:ty),+ $(,)?) => {
        $(
            #[cfg(feature = "user")]
            // SAFETY: the type is `#[repr(C)]`, holds only integers and byte
            // arrays, and has no implicit padding (checked by const asserts
            // next to its definition), so every bit pattern is valid.
            unsafe impl aya::Pod for $ty {}
        )+
    };
}
pub(crate) use impl_pod;
