//! A block of counters declared once: [`counter_block!`] makes from one
//! list of fields the per-worker block of relaxed atomics (written only by
//! its worker, read by the main thread) and its plain copy (summed over
//! workers, processes and hosts), with the reading of one into the other
//! and the sum of two copies. Adding a counter is one line in the list.
//!
//! A field's kind says how it is kept and summed:
//!
//! - `count`: an `AtomicU64` and a `u64`, added;
//! - `max`: an `AtomicU64` and a `u64`, the larger kept;
//! - `[N]`: `N` counts (`[AtomicU64; N]`, `[u64; N]`), added one by one;
//! - `errno_map`: counts by errno (`[AtomicU64; MAX_ERRNO]`), copied as a
//!   `BTreeMap<i32, u64>` of those not zero, added by errno;
//! - `errno_list`: the same copied as a `Vec<(i32, u64)>` in errno order,
//!   an errno not seen yet added last;
//! - `first_words`: a `Mutex<Option<String>>`, copied as the
//!   `Option<String>`; the first words seen are kept.
//!
//! Fields only the atomic block has (gauges, buckets read apart) follow
//! `live`, with their type and initial value; fields only the plain copy
//! has follow `plain`, set to their default when a block is read. The
//! plain copy's `merge_counters` sums the listed fields only: its owner
//! adds the `plain` ones.
//!
//! Per-field attributes (`#[doc]`) go on both structs; those after `@`
//! (`@[serde(default)]`) on the plain copy only.

/// See the module's documentation.
macro_rules! counter_block {
    (
        $(#[$am:meta])*
        $avis:vis struct $Atomic:ident;
        $(#[$pm:meta])*
        $pvis:vis struct $Plain:ident;
        counters {
            $( $(#[$fm:meta])* $(@[$fp:meta])* $f:ident: $kind:tt, )*
        }
        live {
            $( $(#[$lm:meta])* $l:ident: $lty:ty = $linit:expr, )*
        }
        plain {
            $( $(#[$xm:meta])* $x:ident: $xty:ty, )*
        }
    ) => {
        $(#[$am])*
        $avis struct $Atomic {
            $( $(#[$fm])* pub $f: $crate::metrics::counters::counter_block!(@atomic $kind), )*
            $( $(#[$lm])* pub $l: $lty, )*
        }

        impl Default for $Atomic {
            fn default() -> Self {
                $Atomic {
                    $( $f: $crate::metrics::counters::counter_block!(@new $kind), )*
                    $( $l: $linit, )*
                }
            }
        }

        $(#[$pm])*
        $pvis struct $Plain {
            $( $(#[$fm])* $(#[$fp])* pub $f: $crate::metrics::counters::counter_block!(@plain $kind), )*
            $( $(#[$xm])* pub $x: $xty, )*
        }

        impl $Plain {
            /// One worker's counters as they are now.
            fn snapshot(w: &$Atomic) -> $Plain {
                $Plain {
                    $( $f: $crate::metrics::counters::counter_block!(@load $kind, &w.$f), )*
                    $( $x: Default::default(), )*
                }
            }

            /// Adds another part's listed counters (a worker's, a
            /// process's, a host's).
            #[allow(dead_code)]
            fn merge_counters(&mut self, o: &$Plain) {
                $( $crate::metrics::counters::counter_block!(@merge $kind, self.$f, o.$f); )*
            }
        }
    };

    (@atomic count) => { ::std::sync::atomic::AtomicU64 };
    (@atomic max) => { ::std::sync::atomic::AtomicU64 };
    (@atomic [$n:expr]) => { [::std::sync::atomic::AtomicU64; $n] };
    (@atomic errno_map) => { [::std::sync::atomic::AtomicU64; $crate::metrics::MAX_ERRNO] };
    (@atomic errno_list) => { [::std::sync::atomic::AtomicU64; $crate::metrics::MAX_ERRNO] };
    (@atomic first_words) => { ::std::sync::Mutex<Option<String>> };

    (@plain count) => { u64 };
    (@plain max) => { u64 };
    (@plain [$n:expr]) => { [u64; $n] };
    (@plain errno_map) => { ::std::collections::BTreeMap<i32, u64> };
    (@plain errno_list) => { Vec<(i32, u64)> };
    (@plain first_words) => { Option<String> };

    (@new count) => { ::std::sync::atomic::AtomicU64::new(0) };
    (@new max) => { ::std::sync::atomic::AtomicU64::new(0) };
    (@new first_words) => { ::std::sync::Mutex::new(None) };
    (@new $any:tt) => { ::std::array::from_fn(|_| ::std::sync::atomic::AtomicU64::new(0)) };

    (@load count, $a:expr) => { $a.load(::std::sync::atomic::Ordering::Relaxed) };
    (@load max, $a:expr) => { $a.load(::std::sync::atomic::Ordering::Relaxed) };
    (@load [$n:expr], $a:expr) => {
        ::std::array::from_fn(|i| $a[i].load(::std::sync::atomic::Ordering::Relaxed))
    };
    (@load errno_map, $a:expr) => { $crate::metrics::counters::errnos($a).collect() };
    (@load errno_list, $a:expr) => { $crate::metrics::counters::errnos($a).collect() };
    (@load first_words, $a:expr) => { $a.lock().ok().and_then(|e| e.clone()) };

    (@merge count, $a:expr, $b:expr) => { $a += $b };
    (@merge max, $a:expr, $b:expr) => { $a = $a.max($b) };
    (@merge [$n:expr], $a:expr, $b:expr) => {
        for (a, b) in $a.iter_mut().zip(&$b) {
            *a += b;
        }
    };
    (@merge errno_map, $a:expr, $b:expr) => {
        for (e, n) in &$b {
            *$a.entry(*e).or_default() += n;
        }
    };
    (@merge errno_list, $a:expr, $b:expr) => {
        for &(e, n) in &$b {
            match $a.iter_mut().find(|(x, _)| *x == e) {
                Some((_, m)) => *m += n,
                None => $a.push((e, n)),
            }
        }
    };
    (@merge first_words, $a:expr, $b:expr) => {
        if $a.is_none() {
            $a.clone_from(&$b);
        }
    };
}

pub(crate) use counter_block;

/// The errnos counted (not zero) in a block's counts by errno, in order.
pub(crate) fn errnos(
    counts: &[std::sync::atomic::AtomicU64],
) -> impl Iterator<Item = (i32, u64)> + '_ {
    counts
        .iter()
        .enumerate()
        .map(|(e, c)| (e as i32, c.load(std::sync::atomic::Ordering::Relaxed)))
        .filter(|&(_, n)| n > 0)
}
