//! DNS query names: the check that a name (with its `{rand}` labels as
//! what they become) encodes, and query files in dnsperf's format.

/// Letters a `{rand}` in a query name becomes (one label's worth).
pub const RAND_LABEL_LEN: usize = 10;

/// Record types a query file may mix: each gets its own row of RCODE
/// counts, a fixed table in every worker.
pub const MAX_QTYPES: usize = 64;

/// Checks that `name` encodes, with each `{rand}` as the label it becomes.
pub fn check_name(name: &str) -> Result<(), wire::dns::DnsError> {
    let probe = name.replace("{rand}", &"x".repeat(RAND_LABEL_LEN));
    wire::dns::encode_name(&probe, &mut Vec::new())
}

/// Reads a query file in dnsperf's format: `NAME [TYPE]` per line, the
/// type a mnemonic (any case) or `TYPEnnn`, `default_qtype` when absent;
/// blank lines and lines starting with `#` or `;` are skipped. Returns the
/// names and their types, or the first bad line, numbered from 1.
pub fn parse_query_file(text: &str, default_qtype: u16) -> Result<(Vec<String>, Vec<u16>), String> {
    let mut names = Vec::new();
    let mut qtypes = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let at = format!("line {}: '{line}'", i + 1);
        let mut fields = line.split_whitespace();
        let name = fields.next().expect("a non-blank line has a field");
        let qtype = match fields.next() {
            None => default_qtype,
            Some(t) => wire::dns::rtype_from_name(t).ok_or_else(|| {
                format!(
                    "{at}: '{t}' is not a record type; give a mnemonic (A, AAAA, CNAME, MX, NS, \
                     PTR, SOA, SRV, TXT, CAA, DS, DNSKEY, HTTPS, SVCB, ANY) or TYPEnnn"
                )
            })?,
        };
        let extra = fields.count();
        if extra > 0 {
            return Err(format!(
                "{at}: {} fields; a line is `NAME [TYPE]` (dnsperf's format), a comment is a \
                 line of its own starting with # or ;",
                extra + 2
            ));
        }
        check_name(name)
            .map_err(|e| format!("{at}: the name is not valid: {e}; fix or remove the line"))?;
        names.push(name.to_string());
        qtypes.push(qtype);
    }
    Ok((names, qtypes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_file_takes_names_types_and_comments() {
        let text = "# dnsperf data\n\nwww.example.com A\n; another comment\n  example.com\taaaa  \nmail.example.com\nx.example TYPE65\n_dns.example SVCB\n";
        let (names, types) = parse_query_file(text, wire::dns::rtype::MX).unwrap();
        assert_eq!(
            names,
            [
                "www.example.com",
                "example.com",
                "mail.example.com",
                "x.example",
                "_dns.example"
            ]
        );
        assert_eq!(types, [1, 28, 15, 65, 64]);
    }

    #[test]
    fn query_file_unknown_type_names_the_line() {
        let e = parse_query_file("a.example A\n\nb.example AAAAA\n", 1).unwrap_err();
        assert!(
            e.starts_with("line 3: 'b.example AAAAA': 'AAAAA' is not a record type"),
            "{e}"
        );
        assert!(e.contains("TYPEnnn"), "{e}");
        let e = parse_query_file("c.example TYPE70000\n", 1).unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
    }

    #[test]
    fn query_file_extra_fields_are_refused() {
        let e = parse_query_file("ok.example\nwww.example.com A IN\n", 1).unwrap_err();
        assert!(
            e.starts_with("line 2: 'www.example.com A IN': 3 fields"),
            "{e}"
        );
        assert!(e.contains("NAME [TYPE]"), "{e}");
    }

    #[test]
    fn query_file_invalid_names_are_refused() {
        let long_label = format!("{}.example", "a".repeat(64));
        let long_name = vec!["a".repeat(63); 4].join(".");
        for (line, why) in [
            (long_label.as_str(), "label longer than 63"),
            (long_name.as_str(), "name longer than 255"),
            ("a..example", "empty label"),
            ("bad\\032name.example", "character '\\\\'"),
            (
                "{rand}{rand}{rand}{rand}{rand}{rand}{rand}.example",
                "label longer than 63",
            ),
        ] {
            let e = parse_query_file(&format!("# x\n{line} A\n"), 1).unwrap_err();
            assert!(e.starts_with("line 2: "), "{e}");
            assert!(e.contains(why), "{line}: {e}");
            assert!(e.contains("fix or remove the line"), "{e}");
        }
    }
}
