//! A schedule as `--schedule` and `--connections-schedule` take it: no
//! panic; what parses is phases of positive, finite length whose levels
//! start at the first phase's and end at the last one's, never outside the
//! levels the phases name.
#![no_main]
use libfuzzer_sys::fuzz_target;
use throng::scenario::{level_at, parse_phases};

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(phases) = parse_phases(spec) else {
        return;
    };
    let (first, last) = (phases[0], phases[phases.len() - 1]);
    let levels = phases.iter().flat_map(|p| [p.from, p.to]);
    let lo = levels.clone().fold(f64::INFINITY, f64::min);
    let hi = levels.fold(f64::NEG_INFINITY, f64::max);
    // Interpolation rounds: allow a few ulps of the largest level.
    let slack = hi.abs() * 1e-12;
    let mut start = 0.0;
    for p in &phases {
        assert!(p.seconds > 0.0 && p.seconds.is_finite(), "{p:?}");
        for t in [start, start + p.seconds / 2.0, start + p.seconds] {
            let l = level_at(&phases, t);
            assert!(l >= lo - slack && l <= hi + slack, "{l} at {t}: {phases:?}");
        }
        start += p.seconds;
    }
    assert_eq!(level_at(&phases, 0.0), first.from);
    assert_eq!(level_at(&phases, start), last.to);
    assert_eq!(level_at(&phases, f64::INFINITY), last.to);
});
