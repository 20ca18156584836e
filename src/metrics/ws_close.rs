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

/// Slots of refused WebSocket upgrades, by the HTTP status the server
/// answered: the usual refusals each, the rest by class, `101` (switching
/// protocols, but its headers were wrong) and `none` (no HTTP answer:
/// none within the connect timeout, or not HTTP).
const WS_REFUSED_KEYS: [&str; 18] = [
    "none", "101", "400", "401", "403", "404", "405", "426", "429", "500", "502", "503", "504",
    "1xx", "2xx", "3xx", "4xx", "5xx",
];
pub const WS_REFUSED_SLOTS: usize = WS_REFUSED_KEYS.len();

/// The slot of an upgrade refused with `status` (None: no HTTP answer).
pub fn ws_refused_slot(status: Option<u16>) -> usize {
    // (The parser takes any three digits: one outside 100-599 is no HTTP
    // status.)
    let Some(s) = status.filter(|s| (100..600).contains(s)) else {
        return 0;
    };
    let exact = s.to_string();
    if let Some(i) = WS_REFUSED_KEYS.iter().position(|k| *k == exact) {
        return i;
    }
    match s / 100 {
        1 => 13,
        2 => 14,
        3 => 15,
        4 => 16,
        _ => 17,
    }
}

/// Refused upgrades counted, by their key (`connections.ws_refused`).
pub fn ws_refused_map(slots: &[u64; WS_REFUSED_SLOTS]) -> BTreeMap<String, u64> {
    (0..WS_REFUSED_SLOTS)
        .filter(|&s| slots[s] > 0)
        .map(|s| (WS_REFUSED_KEYS[s].to_string(), slots[s]))
        .collect()
}

/// The slots back from their keys (a result read for a merge).
pub fn ws_refused_slots(map: &BTreeMap<String, u64>) -> [u64; WS_REFUSED_SLOTS] {
    std::array::from_fn(|s| map.get(WS_REFUSED_KEYS[s]).copied().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_upgrades_are_keyed_by_status() {
        let mut slots = [0; WS_REFUSED_SLOTS];
        for s in [
            None,
            Some(101),
            Some(403),
            Some(403),
            Some(418),
            Some(503),
            Some(301),
            // Three digits that are no HTTP status.
            Some(700),
            Some(42),
        ] {
            slots[ws_refused_slot(s)] += 1;
        }
        let map = ws_refused_map(&slots);
        let keys: Vec<(&str, u64)> = map.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        assert_eq!(
            keys,
            [
                ("101", 1),
                ("3xx", 1),
                ("403", 2),
                ("4xx", 1),
                ("503", 1),
                ("none", 3)
            ]
        );
        assert_eq!(ws_refused_slots(&map), slots);
    }
}
