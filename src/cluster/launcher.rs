//! `--segment auto`: the slice a launcher gave this process, read from the
//! variables it sets, so that deploy examples need no shell arithmetic:
//! `THRONG_SEGMENT=K/N` (any launcher), a Kubernetes Indexed Job's
//! `JOB_COMPLETION_INDEX` (from 0) with the Job's completions in
//! `THRONG_SEGMENTS` (Kubernetes does not give the count to a pod: the
//! manifest sets it), or Slurm's `SLURM_PROCID` (from 0) and `SLURM_NTASKS`.

use crate::domain::Segment;

/// The slice the launcher's variables (looked up by `var`) give.
pub fn segment_from(var: &dyn Fn(&str) -> Option<String>) -> Result<Segment, String> {
    let num = |name: &str| -> Result<Option<u64>, String> {
        match var(name) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| format!("--segment auto: {name}={v} is not a whole number")),
        }
    };
    let check = |index: u64, count: u64, from: &str| {
        if index == 0 || index > count {
            return Err(format!(
                "--segment auto: {from} make slice {index}/{count}, not one of 1/{count} to \
                 {count}/{count}"
            ));
        }
        Ok(Segment { index, count })
    };
    if let Some(v) = var("THRONG_SEGMENT") {
        let (k, n) = v
            .split_once('/')
            .and_then(|(k, n)| Some((k.trim().parse().ok()?, n.trim().parse().ok()?)))
            .ok_or_else(|| format!("--segment auto: THRONG_SEGMENT={v} is not K/N, e.g. 2/4"))?;
        return check(k, n, "THRONG_SEGMENT");
    }
    if let Some(i) = num("JOB_COMPLETION_INDEX")? {
        let n = num("THRONG_SEGMENTS")?.ok_or(
            "--segment auto: JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but not \
             THRONG_SEGMENTS: set it in the manifest to the Job's spec.completions",
        )?;
        return check(
            i.saturating_add(1),
            n,
            "JOB_COMPLETION_INDEX and THRONG_SEGMENTS",
        );
    }
    if let (Some(i), Some(n)) = (num("SLURM_PROCID")?, num("SLURM_NTASKS")?) {
        return check(i.saturating_add(1), n, "SLURM_PROCID and SLURM_NTASKS");
    }
    Err(
        "--segment auto found no launcher's slice: set THRONG_SEGMENT=K/N, or run it as a \
         Kubernetes Indexed Job (JOB_COMPLETION_INDEX, with THRONG_SEGMENTS set to the \
         completions) or under srun (SLURM_PROCID and SLURM_NTASKS)"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Segment, String> {
        let owned: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        segment_from(&|name| {
            owned
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn throng_segment_first() {
        let s = with(&[("THRONG_SEGMENT", "2/4"), ("SLURM_PROCID", "0")]).unwrap();
        assert_eq!((s.index, s.count), (2, 4));
        assert!(with(&[("THRONG_SEGMENT", "5/4")]).is_err());
        assert!(with(&[("THRONG_SEGMENT", "x")])
            .unwrap_err()
            .contains("K/N"));
    }

    #[test]
    fn kubernetes_index_counts_from_zero() {
        let s = with(&[("JOB_COMPLETION_INDEX", "3"), ("THRONG_SEGMENTS", "4")]).unwrap();
        assert_eq!((s.index, s.count), (4, 4));
        let e = with(&[("JOB_COMPLETION_INDEX", "3")]).unwrap_err();
        assert!(e.contains("THRONG_SEGMENTS"), "{e}");
    }

    #[test]
    fn slurm_procid_and_ntasks() {
        let s = with(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")]).unwrap();
        assert_eq!((s.index, s.count), (2, 2));
        assert!(with(&[("SLURM_PROCID", "2"), ("SLURM_NTASKS", "2")]).is_err());
    }

    #[test]
    fn no_launcher_says_what_to_set() {
        assert!(with(&[]).unwrap_err().contains("THRONG_SEGMENT=K/N"));
    }
}
