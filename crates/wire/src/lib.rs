//! Pure codecs for throng: build a message into a caller-owned buffer, find a
//! complete message at the front of a byte slice.
//!
//! Nothing here touches a socket, a clock or the allocator on the hot path
//! (encoders append to a `Vec` the caller reuses). "Not enough bytes yet" is a
//! normal answer (`Ok(None)`), never an error: callers keep the partial tail
//! and ask again when more bytes arrive. Bytes from the wire are untrusted:
//! every count and length is checked before it is used, and no input panics.

pub mod dns;
pub mod escape;
pub mod http;
pub mod line;
pub mod push;
pub mod resp;
pub mod ws;
