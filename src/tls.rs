//! TLS settings for both sides, built once per run with rustls (ring):
//! the client's trust (a CA file, the system's store through
//! rustls-native-certs, which honours SSL_CERT_FILE and SSL_CERT_DIR, or
//! --tls-insecure),
//! server names, ALPN and resumption; the server's certificate from files
//! or made at start (rcgen), with its SHA-256 fingerprint.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use crate::scenario::TlsOptions;
use crate::usage::UsageError;

/// Sessions each side remembers for resumption.
const SESSIONS: usize = 64 * 1024;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

/// Reads every certificate in a PEM file.
fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            usage(format!(
                "{}: cannot read PEM certificates: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(usage(format!(
            "{}: no certificate in the file (a PEM file with BEGIN CERTIFICATE blocks)",
            path.display()
        )));
    }
    Ok(certs)
}

/// The client configuration of a run.
pub fn client_config(o: &TlsOptions) -> Result<Arc<ClientConfig>> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let mut cfg = if o.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider())))
            .with_no_client_auth()
    } else {
        let roots = match &o.ca {
            Some(file) => {
                let mut roots = RootCertStore::empty();
                let (added, _) = roots.add_parsable_certificates(certs(file)?);
                if added == 0 {
                    return Err(usage(format!(
                        "{}: no usable CA certificate in the file",
                        file.display()
                    )));
                }
                roots
            }
            None => system_roots()?,
        };
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    cfg.alpn_protocols = o.alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    cfg.resumption = if o.resume {
        Resumption::in_memory_sessions(SESSIONS)
    } else {
        Resumption::disabled()
    };
    Ok(Arc::new(cfg))
}

/// The system's trusted CA certificates (SSL_CERT_FILE and SSL_CERT_DIR
/// when set, else the platform's store); an error naming the cause and the
/// fix when none is usable (every handshake would fail), or when the file
/// SSL_CERT_FILE names cannot be read (its user meant that file, not the
/// rest of the store).
fn system_roots() -> Result<RootCertStore> {
    const OR_FLAGS: &str = "or give --tls-ca FILE (--tls-insecure trusts any certificate)";
    let found = rustls_native_certs::load_native_certs();
    if let Some(file) = std::env::var_os("SSL_CERT_FILE") {
        let unreadable = found.errors.iter().find_map(|e| match &e.kind {
            rustls_native_certs::ErrorKind::Io { inner, path } if path.as_os_str() == file => {
                Some(inner)
            }
            _ => None,
        });
        if let Some(e) = unreadable {
            return Err(usage(format!(
                "SSL_CERT_FILE={}: cannot read the CA certificates for TLS: {e}; point \
                 SSL_CERT_FILE at a PEM bundle or unset it to use the system's store, {OR_FLAGS}",
                file.to_string_lossy()
            )));
        }
    }
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added > 0 {
        return Ok(roots);
    }
    let set: Vec<(&str, String)> = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
        .into_iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (k, v.to_string_lossy().into_owned())))
        .collect();
    let cause = found
        .errors
        .first()
        .map_or(String::new(), |e| format!(" ({e})"));
    let (from, fix) = if set.is_empty() {
        (
            "the system's store".to_string(),
            "install the system's CA certificates (Debian: apt-get install ca-certificates) \
             or set SSL_CERT_FILE to a PEM bundle"
                .to_string(),
        )
    } else {
        let names: Vec<&str> = set.iter().map(|(k, _)| *k).collect();
        (
            set.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", "),
            format!(
                "point {} at PEM certificates, or unset {} to use the system's store",
                names.join(" or "),
                if names.len() == 1 { "it" } else { "them" }
            ),
        )
    };
    Err(usage(format!(
        "no trusted CA certificate for TLS in {from}{cause}: {fix}, {OR_FLAGS}"
    )))
}

/// The name a connection to `target` (as given, or its address) presents
/// and checks: --sni, else the target's host.
pub fn server_name(
    o: &TlsOptions,
    given: Option<&str>,
    addr: SocketAddr,
) -> Result<ServerName<'static>> {
    let host = match (&o.sni, given) {
        (Some(sni), _) => sni.clone(),
        (None, Some(g)) => {
            let host = g.rsplit_once(':').map_or(g, |(h, _)| h);
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string()
        }
        (None, None) => addr.ip().to_string(),
    };
    ServerName::try_from(host.clone()).map_err(|e| {
        usage(format!(
            "TLS server name '{host}': {e}; give a DNS name with --sni"
        ))
    })
}

/// Accepts any certificate (--tls-insecure) but still checks that the
/// handshake is signed by the key in it.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A certificate the server made for itself.
pub struct SelfSigned {
    pub cert_pem: String,
    pub key_pem: String,
    /// SHA-256 of the certificate (DER), as colon-separated hex.
    pub fingerprint: String,
}

/// Makes a self-signed certificate for localhost, 127.0.0.1 and ::1.
pub fn self_signed() -> Result<SelfSigned> {
    let names = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    let ck = rcgen::generate_simple_self_signed(names).context("making a certificate")?;
    Ok(SelfSigned {
        cert_pem: ck.cert.pem(),
        key_pem: ck.key_pair.serialize_pem(),
        fingerprint: fingerprint(ck.cert.der()),
    })
}

/// SHA-256 of a DER certificate, as AB:CD:... hex.
pub fn fingerprint(der: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, der);
    d.as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The server configuration from PEM text (chain, key).
pub fn server_config(cert_pem: &[u8], key_pem: &[u8], what: &str) -> Result<Arc<ServerConfig>> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| usage(format!("{what}: cannot read the certificate: {e}")))?;
    if chain.is_empty() {
        return Err(usage(format!(
            "{what}: no certificate (BEGIN CERTIFICATE) found"
        )));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| usage(format!("{what}: cannot read the private key: {e}")))?;
    let mut cfg = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| usage(format!("{what}: the certificate and key do not fit: {e}")))?;
    cfg.session_storage = rustls::server::ServerSessionMemoryCache::new(SESSIONS);
    cfg.ticketer = Arc::new(SharedTickets::new(key_pem));
    Ok(Arc::new(cfg))
}

/// Session tickets sealed (ChaCha20-Poly1305) under a key derived from the
/// server's private key: every process of `throng server --processes N`
/// reads the same key file, so a client resumes a session made by any of
/// them (a per-process ticket key or session cache would resume only the
/// few connections that land on the same process). The key does not roll: a
/// test server's tickets trade forward secrecy for resumption that works.
#[derive(Debug)]
struct SharedTickets {
    key: ring::aead::LessSafeKey,
}

const TICKET_NONCE: usize = ring::aead::NONCE_LEN;

impl SharedTickets {
    fn new(key_pem: &[u8]) -> SharedTickets {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(b"throng server session tickets\0");
        ctx.update(key_pem);
        let unbound =
            ring::aead::UnboundKey::new(&ring::aead::CHACHA20_POLY1305, ctx.finish().as_ref())
                .expect("a SHA-256 digest is a ChaCha20 key");
        SharedTickets {
            key: ring::aead::LessSafeKey::new(unbound),
        }
    }
}

impl rustls::server::ProducesTickets for SharedTickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        6 * 3600
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        use ring::rand::SecureRandom;
        let mut nonce = [0u8; TICKET_NONCE];
        ring::rand::SystemRandom::new().fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(TICKET_NONCE + plain.len() + ring::aead::MAX_TAG_LEN);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                ring::aead::Nonce::assume_unique_for_key(nonce),
                ring::aead::Aad::empty(),
                &mut out[TICKET_NONCE..],
            )
            .ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let nonce = cipher.get(..TICKET_NONCE)?;
        let nonce = ring::aead::Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = cipher[TICKET_NONCE..].to_vec();
        let n = self
            .key
            .open_in_place(nonce, ring::aead::Aad::empty(), &mut buf)
            .ok()?
            .len();
        buf.truncate(n);
        Some(buf)
    }
}

/// The first certificate of a PEM text's fingerprint.
pub fn pem_fingerprint(cert_pem: &[u8]) -> Option<String> {
    CertificateDer::pem_slice_iter(cert_pem)
        .next()?
        .ok()
        .map(|c| fingerprint(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_open_under_the_same_key_only() {
        use rustls::server::ProducesTickets;
        let a = SharedTickets::new(b"key one");
        let b = SharedTickets::new(b"key one");
        let c = SharedTickets::new(b"key two");
        let sealed = a.encrypt(b"session state").unwrap();
        assert_eq!(b.decrypt(&sealed).as_deref(), Some(&b"session state"[..]));
        assert_eq!(c.decrypt(&sealed), None);
        let mut bent = sealed.clone();
        *bent.last_mut().unwrap() ^= 1;
        assert_eq!(a.decrypt(&bent), None);
        assert_eq!(a.decrypt(&sealed[..5]), None);
        assert_ne!(a.encrypt(b"x"), a.encrypt(b"x"), "a fresh nonce each time");
    }

    #[test]
    fn self_signed_round_trips_into_both_configs() {
        let s = self_signed().unwrap();
        assert_eq!(s.fingerprint.len(), 32 * 3 - 1);
        assert_eq!(
            pem_fingerprint(s.cert_pem.as_bytes()),
            Some(s.fingerprint.clone())
        );
        server_config(s.cert_pem.as_bytes(), s.key_pem.as_bytes(), "test").unwrap();
        let dir = std::env::temp_dir().join(format!("throng-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &s.cert_pem).unwrap();
        let o = TlsOptions {
            ca: Some(ca),
            ..TlsOptions::default()
        };
        client_config(&o).unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn server_names_come_from_sni_or_target() {
        let addr: SocketAddr = "127.0.0.1:853".parse().unwrap();
        let o = TlsOptions::default();
        let n = server_name(&o, Some("dns.example:853"), addr).unwrap();
        assert_eq!(n.to_str(), "dns.example");
        let n = server_name(&o, Some("[::1]:853"), addr).unwrap();
        assert_eq!(n.to_str(), "::1");
        let n = server_name(&o, None, addr).unwrap();
        assert_eq!(n.to_str(), "127.0.0.1");
        let o = TlsOptions {
            sni: Some("other.test".into()),
            ..TlsOptions::default()
        };
        assert_eq!(server_name(&o, None, addr).unwrap().to_str(), "other.test");
    }

    #[test]
    fn bad_pem_is_a_clear_error() {
        let e = server_config(b"nothing", b"nothing", "--cert x").unwrap_err();
        assert!(e.to_string().contains("no certificate"), "{e}");
    }
}
