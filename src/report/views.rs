//! The files a person looks at beside the JSON result (--html, --hgrm,
//! --server-stats), checked before a run and written after it.

use super::*;

/// The files a person looks at, beside the JSON result: `--html` (the
/// report), `--hgrm` (the spectra's prefix) and `--server-stats` (a
/// `throng server --stats-json` file the report draws).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Views {
    pub html: Option<PathBuf>,
    pub hgrm: Option<PathBuf>,
    pub server_stats: Option<PathBuf>,
}

impl Views {
    /// Before a run: a file whose directory does not exist is refused
    /// (the run would measure for nothing).
    pub fn check(&self) -> Result<(), String> {
        let dir_of = |p: &Path| {
            p.parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map(Path::to_path_buf)
        };
        for (flag, p) in [("--html", &self.html), ("--hgrm", &self.hgrm)] {
            if let Some(d) = p.as_deref().and_then(dir_of) {
                if !d.is_dir() {
                    return Err(format!(
                        "{flag} {}: the directory {} does not exist",
                        p.as_deref().unwrap_or(Path::new("")).display(),
                        d.display()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Writes the report and the spectra of `runs` (the result and the
    /// summary are written before: nothing measured is lost here). Says
    /// what it wrote on stdout, and on stderr each failure and each
    /// spectrum a run has not (with why); false when something could not
    /// be written (a spectrum a run has not is no failure).
    pub fn write(&self, runs: &[html::Run]) -> bool {
        let mut ok = true;
        if let Some(path) = &self.html {
            let server = self
                .server_stats
                .as_deref()
                .map(html::read_server_stats)
                .transpose();
            let written = server.and_then(|s| html::write(path, runs, s.as_deref()));
            match written {
                Ok(()) => outln!("  report        {}", path.display()),
                Err(e) => {
                    errln!("throng: the HTML report was not written: {e:#}");
                    ok = false;
                }
            }
        }
        if let Some(prefix) = &self.hgrm {
            let tags = hgrm_tags(runs);
            for (run, tag) in runs.iter().zip(&tags) {
                match hgrm::write(prefix, tag.as_deref(), run.result) {
                    Ok(spectra) => {
                        for f in spectra.written {
                            outln!("  spectrum      {}", f.display());
                        }
                        // Said, not failed: a run has the spectra it has.
                        for why in spectra.missing {
                            let run = match tag {
                                Some(_) => format!("{}: ", run.label),
                                None => String::new(),
                            };
                            errln!("throng: --hgrm {}: {run}{why}", prefix.display());
                        }
                    }
                    Err(e) => {
                        errln!("throng: --hgrm {}: {e:#}", prefix.display());
                        ok = false;
                    }
                }
            }
        }
        ok
    }

    /// [`Views::write`], then the exit code: `code` when all was
    /// written, else 3 (results not written).
    pub fn finish(&self, runs: &[html::Run], code: ExitCode) -> ExitCode {
        if self.write(runs) {
            code
        } else {
            ExitCode::from(crate::exit::UNMEASURED)
        }
    }
}

/// The tag in the names of each run's `.hgrm` files: none for one run;
/// for several, each label made a file name (or its number in the list
/// when labels would collide).
pub(super) fn hgrm_tags(runs: &[html::Run]) -> Vec<Option<String>> {
    if runs.len() < 2 {
        return vec![None; runs.len()];
    }
    let tags: Vec<String> = runs.iter().map(|r| file_word(&r.label)).collect();
    let unique = tags.iter().collect::<std::collections::BTreeSet<_>>().len() == tags.len();
    if unique && tags.iter().all(|t| !t.is_empty()) {
        tags.into_iter().map(Some).collect()
    } else {
        (1..=runs.len()).map(|i| Some(i.to_string())).collect()
    }
}

/// A label as a word of a file name: "tcp (recycle 100)" is
/// "tcp-recycle-100".
pub(super) fn file_word(label: &str) -> String {
    let mut word = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else if !word.is_empty() && !word.ends_with('-') {
            word.push('-');
        }
    }
    word.trim_end_matches('-').to_string()
}
