//! What throng says about itself to the system it is installed on: shell
//! completions (clap_complete) and one manual page with every verb
//! (clap_mangen), both generated from the same clap definition as the
//! flags, so they cannot drift from them. Writes bytes to a writer; it
//! decides nothing about where they go (packaging/deb.sh puts them in the
//! Debian package).

use std::io::Write;

use clap_complete::Shell;
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;

/// The completion script of `shell` for throng.
pub fn completions(shell: Shell, out: &mut dyn Write) -> std::io::Result<()> {
    // clap_complete panics on a failed write: generate in memory, then write.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut super::command(), "throng", &mut script);
    out.write_all(&script)
}

/// throng(1): the top command's sections, then a section per verb (its
/// synopsis, description and options), then units, exit status and
/// environment.
pub fn man(out: &mut dyn Write) -> std::io::Result<()> {
    let mut cmd = super::command();
    // Gives each verb its full name ("throng client") for its synopsis.
    cmd.build();
    let top = Man::new(cmd.clone());
    let mut page = Vec::new();
    // By hand: clap_mangen drops an empty date and the fields after it shift.
    writeln!(
        page,
        ".TH THRONG 1 \"\" \"throng {}\" \"User Commands\"",
        env!("CARGO_PKG_VERSION")
    )?;
    top.render_name_section(&mut page)?;
    top.render_synopsis_section(&mut page)?;
    top.render_description_section(&mut page)?;
    top.render_options_section(&mut page)?;

    let mut verbs: Vec<&clap::Command> = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .collect();
    // In the order `--help` lists them (the verbs reshaped for -h are
    // added back last).
    verbs.sort_by_key(|c| c.get_display_order());
    let mut list = Roff::default();
    list.control("SH", ["COMMANDS"]);
    for v in &verbs {
        list.control("TP", []);
        list.text([bold(format!("throng {}", v.get_name()))]);
        list.text([roman(
            v.get_about().map(|a| a.to_string()).unwrap_or_default(),
        )]);
    }
    list.to_writer(&mut page)?;
    for v in verbs {
        verb(v, &mut page)?;
    }

    let mut tail = Roff::default();
    tail.control("SH", ["EXAMPLES"]);
    for (cmd, what) in super::EXAMPLES {
        tail.control("TP", []);
        tail.text([bold(cmd)]);
        tail.text([roman(what)]);
    }
    tail.control("SH", ["UNITS"]);
    if let Some(units) = cmd.get_after_help() {
        tail.text([roman(units.to_string())]);
    }
    tail.control("SH", ["EXIT STATUS"]);
    for (code, what) in [
        ("0", "Success: every check held."),
        (
            "1",
            "A check failed (the server's side, or the SLO): a --check that did \
             not hold, more failed connections than --max-failures.",
        ),
        (
            "2",
            "Bad usage or a plan refused: a bad value, a busy or privileged port, \
             an impossible request, no TLS roots; the message says what to change.",
        ),
        (
            "3",
            "The run could not be measured or its results not written: an I/O \
             error, a merge or cluster run missing a share (partial), a run that \
             overran its deadline, a report not written; for limit, a search the \
             client's own limit ended.",
        ),
        (
            "130",
            "Interrupted by SIGINT (Ctrl-C) or SIGTERM: the first one stops the \
             run and the results so far are still written, marked interrupted; a \
             second one ends the process at once. A server stopped by either, and \
             a client's --hold ended by Ctrl-C, exit 0.",
        ),
    ] {
        tail.control("TP", []);
        tail.text([bold(code)]);
        tail.text([roman(what)]);
    }
    tail.control("SH", ["ENVIRONMENT"]);
    tail.control("TP", []);
    tail.text([bold("SSL_CERT_FILE"), roman(", "), bold("SSL_CERT_DIR")]);
    tail.text([
        roman("The CA certificates that "),
        bold("--transport tls"),
        roman(" trusts when no "),
        bold("--tls-ca"),
        roman(" is given (otherwise the system's store)."),
    ]);
    tail.to_writer(&mut page)?;
    top.render_version_section(&mut page)?;
    out.write_all(&once_preamble(&page))
}

/// The page with the roff preamble (`.ie`/`.el` lines defining `Aq`) only
/// at its top: each clap_mangen section brings its own copy.
fn once_preamble(page: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(page);
    let mut seen = std::collections::HashSet::new();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let preamble = line.starts_with(".ie \\n(.g .ds Aq") || line.starts_with(".el .ds Aq");
        if !preamble || seen.insert(line) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.into_bytes()
}

/// One verb's section: `.SH "THRONG CLIENT"`, its synopsis and
/// description, and its options under subsections (one per help heading).
fn verb(v: &clap::Command, page: &mut Vec<u8>) -> std::io::Result<()> {
    let man = Man::new(v.clone());
    let mut head = Roff::default();
    let title = format!("THRONG {}", v.get_name().to_uppercase());
    head.control("SH", [title.as_str()]);
    head.to_writer(page)?;
    let mut body = Vec::new();
    man.render_synopsis_section(&mut body)?;
    man.render_description_section(&mut body)?;
    man.render_options_section(&mut body)?;
    // clap_mangen opens each of those with a section (.SH); here they are
    // parts of the verb's section.
    let headings: Vec<&str> = v
        .get_arguments()
        .filter_map(|a| a.get_help_heading())
        .collect();
    let body = String::from_utf8_lossy(&body);
    for line in body.lines() {
        let Some(name) = line.strip_prefix(".SH ") else {
            writeln!(page, "{line}")?;
            continue;
        };
        let name = name.trim_matches('"');
        match name {
            "SYNOPSIS" => {}
            "DESCRIPTION" => writeln!(page, ".PP")?,
            "OPTIONS" => writeln!(page, ".SS Options")?,
            _ => {
                let heading = headings
                    .iter()
                    .find(|h| h.eq_ignore_ascii_case(name))
                    .copied()
                    .unwrap_or(name);
                writeln!(page, ".SS \"{heading} options\"")?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> String {
        let mut out = Vec::new();
        man(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn man_page_has_a_section_per_verb() {
        let page = page();
        for verb in super::super::command().get_subcommands() {
            let heading = format!(".SH \"THRONG {}\"", verb.get_name().to_uppercase());
            assert!(page.contains(&heading), "{heading} missing");
        }
        assert!(page.contains(".SS \"Traffic options\""));
        assert!(page.contains("\\-\\-connections"));
        assert_eq!(page.matches(".SH SYNOPSIS").count(), 1);
    }

    #[test]
    fn man_page_says_130_follows_the_first_interrupt() {
        // The code exits 130 on the first interrupt (src/client,
        // src/limit), as the README says: the page says the same.
        let page = page();
        let status = &page[page
            .find(".SH \"EXIT STATUS\"")
            .expect("an EXIT STATUS section")..];
        assert!(status.contains("the first one stops the run"), "{status}");
        assert!(!status.contains("by a second SIGINT"), "{status}");
    }

    #[test]
    fn man_page_hides_internal_flags() {
        assert!(!page().contains("\\-\\-child"));
    }

    #[test]
    fn bash_completion_names_every_verb() {
        let mut out = Vec::new();
        completions(Shell::Bash, &mut out).unwrap();
        let script = String::from_utf8(out).unwrap();
        for verb in super::super::command().get_subcommands() {
            assert!(script.contains(verb.get_name()), "{}", verb.get_name());
        }
    }
}
