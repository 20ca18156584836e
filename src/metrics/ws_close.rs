//! WebSocket close codes as counted: a fixed set of slots in the
//! counters, keyed by code in the result.

use std::collections::BTreeMap;

/// Slots of WebSocket close codes counted: 1000..=1015 each (1005: a
/// close without a code), then 3000-3999 and 4000-4999 (the libraries'
/// and the applications' ranges) each as one.
pub const WS_CLOSE_SLOTS: usize = 18;

/// The slot close `code` is counted in (None: no status, counted as 1005).
pub fn ws_close_slot(code: Option<u16>) -> usize {
    match code.unwrap_or(1005) {
        c @ 1000..=1015 => usize::from(c - 1000),
        3000..=3999 => 16,
        _ => 17,
    }
}

/// The key a close-code slot is written under in the result.
fn ws_close_key(slot: usize) -> String {
    match slot {
        16 => "3xxx".into(),
        17 => "4xxx".into(),
        s => (1000 + s).to_string(),
    }
}

/// Close codes counted, by their key (`connections.ws_close_codes`).
pub fn ws_close_map(slots: &[u64; WS_CLOSE_SLOTS]) -> BTreeMap<String, u64> {
    (0..WS_CLOSE_SLOTS)
        .filter(|&s| slots[s] > 0)
        .map(|s| (ws_close_key(s), slots[s]))
        .collect()
}

/// The slots back from their keys (a result read for a merge).
pub fn ws_close_slots(map: &BTreeMap<String, u64>) -> [u64; WS_CLOSE_SLOTS] {
    std::array::from_fn(|s| map.get(&ws_close_key(s)).copied().unwrap_or(0))
}
