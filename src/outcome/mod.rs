//! What a run writes for another part to read, one type per format: the
//! writer and every reader share it, so a renamed key cannot go unseen.

pub mod server_second;
