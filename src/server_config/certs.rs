//! The server's TLS certificate and key: read from --cert and --key, or
//! made at start (self-signed) and written to files the clients can trust
//! and the processes of --processes share; removed at the end.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::usage::UsageError;

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// The server's certificate and key (PEM), and where they came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerTls {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Made at start (not given with --cert/--key).
    pub self_signed: bool,
    pub fingerprint: String,
}

impl ServerTls {
    /// Reads --cert and --key, or makes a self-signed certificate and writes
    /// it (and its key, for the processes of --processes) to files.
    pub fn load(cert: Option<&Path>, key: Option<&Path>) -> Result<ServerTls> {
        let read = |flag: &str, p: &Path| {
            std::fs::read(p).map_err(|e| usage(format!("{flag} {}: {e}", p.display())))
        };
        let t = match (cert, key) {
            (Some(c), Some(k)) => {
                let cert_pem = read("--cert", c)?;
                ServerTls {
                    fingerprint: crate::tls::pem_fingerprint(&cert_pem).unwrap_or_default(),
                    cert_pem,
                    key_pem: read("--key", k)?,
                    cert_file: c.to_path_buf(),
                    key_file: k.to_path_buf(),
                    self_signed: false,
                }
            }
            _ => {
                let s = crate::tls::self_signed()?;
                let dir = std::env::temp_dir();
                let stem = format!("throng-server-{}", std::process::id());
                let cert_file = dir.join(format!("{stem}-cert.pem"));
                let key_file = dir.join(format!("{stem}-key.pem"));
                std::fs::write(&cert_file, &s.cert_pem)
                    .with_context(|| format!("writing {}", cert_file.display()))?;
                write_private(&key_file, s.key_pem.as_bytes())?;
                ServerTls {
                    cert_pem: s.cert_pem.into_bytes(),
                    key_pem: s.key_pem.into_bytes(),
                    cert_file,
                    key_file,
                    self_signed: true,
                    fingerprint: s.fingerprint,
                }
            }
        };
        // Refuse a bad pair now, with the file names, not at the first client.
        crate::tls::server_config(&t.cert_pem, &t.key_pem, &t.cert_file.display().to_string())?;
        Ok(t)
    }

    /// Removes the files of a certificate made at start.
    pub fn cleanup(&self) {
        if self.self_signed {
            let _ = std::fs::remove_file(&self.cert_file);
            let _ = std::fs::remove_file(&self.key_file);
        }
    }

    /// What the banner says about it, with the client flag that trusts it.
    pub fn banner(&self) -> String {
        if self.self_signed {
            format!(
                "tls: self-signed certificate for localhost, 127.0.0.1 and ::1, SHA-256 {}\n\
                 tls: clients trust it with --transport tls --tls-ca {} (or --tls-insecure)",
                self.fingerprint,
                self.cert_file.display()
            )
        } else {
            format!(
                "tls: certificate {} (SHA-256 {})",
                self.cert_file.display(),
                self.fingerprint
            )
        }
    }
}

/// Writes a file only its owner can read (a private key).
fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(data)?;
    Ok(())
}
