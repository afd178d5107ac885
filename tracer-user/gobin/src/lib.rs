//! Go binary introspection (work in progress, issue 3).
