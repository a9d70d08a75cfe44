//! TLS as Redis 7.0 configures it (tls.c's tlsConfigure), on rustls: the `tls-*`
//! settings become one server context (clients on `tls-port`) and one client
//! context (links this server opens: a replica's link to its master with
//! `tls-replication yes`). They are built when TLS is in use (a `tls-port`,
//! `tls-replication` or `tls-cluster`) at start, where a failure stops the server,
//! and again on every CONFIG SET of a `tls-*` setting, where a failure leaves the
//! running contexts and the old settings in place (certificates are re-read, so
//! CONFIG SET of the same file path reloads a renewed certificate).
//!
//! Shards pick the current contexts up when they accept a TLS connection or open
//! a link: a generation counter tells them whether their copy is stale, so the
//! shared slot is locked only after a change.
//!
//! What rustls cannot do is refused, never silently dropped: TLSv1 / TLSv1.1,
//! cipher lists that select no suite rustls has, DH parameter files (rustls offers
//! ECDHE key exchange only), keys encrypted in OpenSSL's traditional PEM format.

mod files;
mod session_cache;
mod suites;

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, ServerConfig};

use crate::config::Config;

pub use suites::suite_name;

/// The contexts built from one set of `tls-*` settings.
struct Contexts {
    server: Arc<ServerConfig>,
    /// None without a CA to check the peer against (no link could be verified).
    client: Option<Arc<ClientConfig>>,
}

static CURRENT: Mutex<Option<Arc<Contexts>>> = Mutex::new(None);
/// Bumped by every install, so a shard's cached copy knows it is stale.
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static CACHED: RefCell<(u64, Option<Arc<Contexts>>)> = const { RefCell::new((0, None)) };
}

/// Whether the settings ask for TLS at all (Redis configures it only then).
pub fn in_use(config: &Config) -> bool {
    config.int_param("tls-port").unwrap_or(0) != 0
        || config.bool_param("tls-replication").unwrap_or(false)
        || config.bool_param("tls-cluster").unwrap_or(false)
}

/// Builds the contexts from `config` and makes them current, when TLS is in use.
/// On failure nothing changes and the error is the line to log (Redis's wording).
pub fn configure(config: &Config) -> Result<(), String> {
    if !in_use(config) {
        return Ok(());
    }
    let built = Arc::new(build(config)?);
    *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = Some(built);
    GENERATION.fetch_add(1, Ordering::Release);
    Ok(())
}

fn current() -> Option<Arc<Contexts>> {
    let generation = GENERATION.load(Ordering::Acquire);
    CACHED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != generation {
            let now = CURRENT.lock().unwrap_or_else(|p| p.into_inner()).clone();
            *cached = (generation, now);
        }
        cached.1.clone()
    })
}

/// The server context for a connection accepted on the TLS port.
pub fn acceptor() -> Option<Arc<ServerConfig>> {
    current().map(|c| c.server.clone())
}

/// The client context for a TLS link to another server.
pub fn connector() -> Option<Arc<ClientConfig>> {
    current().and_then(|c| c.client.clone())
}

/// The name a TLS link presents for `host` (an address or a DNS name).
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))
}

fn build(config: &Config) -> Result<Contexts, String> {
    let cert_file = config.str_param("tls-cert-file");
    let key_file = config.str_param("tls-key-file");
    if cert_file.is_empty() {
        return Err("No tls-cert-file configured!".into());
    }
    if key_file.is_empty() {
        return Err("No tls-key-file configured!".into());
    }
    let auth_clients = config.enum_param("tls-auth-clients").unwrap_or("yes");
    let ca_file = config.str_param("tls-ca-cert-file");
    let ca_dir = config.str_param("tls-ca-cert-dir");
    let links = config.bool_param("tls-replication").unwrap_or(false)
        || config.bool_param("tls-cluster").unwrap_or(false);
    if (auth_clients != "no" || links) && ca_file.is_empty() && ca_dir.is_empty() {
        return Err("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, tls-replication or tls-auth-clients are enabled!".into());
    }
    let versions = suites::protocols(config.str_param("tls-protocols"))?;
    let provider = Arc::new(provider(config, &versions)?);
    let certs =
        files::certificates(cert_file).map_err(|e| format!("Failed to load certificate: {e}"))?;
    let key = files::private_key(key_file, config.str_param("tls-key-file-pass"))
        .map_err(|e| format!("Failed to load private key: {e}"))?;
    let roots = if ca_file.is_empty() && ca_dir.is_empty() {
        None
    } else {
        let roots = files::ca_roots(ca_file, ca_dir)
            .map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {e}"))?;
        Some(Arc::new(roots))
    };
    let verifier = match (&roots, auth_clients) {
        (None, _) | (_, "no") => rustls::server::WebPkiClientVerifier::no_client_auth(),
        (Some(roots), mode) => {
            let builder = rustls::server::WebPkiClientVerifier::builder_with_provider(
                roots.clone(),
                provider.clone(),
            );
            let builder = if mode == "optional" {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder
                .build()
                .map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {e}"))?
        }
    };
    let own = certified_key(&provider, certs, key, key_file)?;
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("Failed to configure TLS protocols: {e}"))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(OneCertificate(own)));
    server.ignore_client_order = config
        .bool_param("tls-prefer-server-ciphers")
        .unwrap_or(false);
    if config.bool_param("tls-session-caching").unwrap_or(true) {
        let size = config
            .int_param("tls-session-cache-size")
            .unwrap_or(20480)
            .max(0) as usize;
        let timeout = config
            .int_param("tls-session-cache-timeout")
            .unwrap_or(300)
            .max(0) as u64;
        server.session_storage = Arc::new(session_cache::SessionCache::new(
            size,
            Duration::from_secs(timeout),
        ));
    } else {
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
    }
    let client = match roots {
        Some(roots) => Some(Arc::new(client_config(config, provider, &versions, roots)?)),
        None => None,
    };
    Ok(Contexts {
        server: Arc::new(server),
        client,
    })
}

/// rustls's ring provider with the cipher suites the settings allow, TLSv1.3's
/// first (rustls prefers the newer protocol anyway).
fn provider(
    config: &Config,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<CryptoProvider, String> {
    if !config.str_param("tls-dh-params-file").is_empty() {
        // Unreachable through the parameter table (it refuses the setting); kept so
        // that a file never appears to be in use.
        return Err(
            "tls-dh-params-file is not supported: Tessera offers ECDHE key exchange only".into(),
        );
    }
    // Both lists are checked whichever protocols are on, as OpenSSL checks them.
    let tls13 = suites::tls13_suites(config.str_param("tls-ciphersuites"))?;
    let tls12 = suites::tls12_ciphers(config.str_param("tls-ciphers"))?;
    let wants =
        |v: &rustls::SupportedProtocolVersion| versions.iter().any(|x| x.version == v.version);
    let mut cipher_suites = Vec::new();
    if wants(&rustls::version::TLS13) {
        cipher_suites.extend(tls13);
    }
    if wants(&rustls::version::TLS12) {
        cipher_suites.extend(tls12);
    }
    Ok(CryptoProvider {
        cipher_suites,
        ..rustls::crypto::ring::default_provider()
    })
}

/// The context for links this server opens: the peer's chain checked against the
/// CA (its name is not, as OpenSSL with Redis's settings does not check it), and
/// this server's client certificate: `tls-client-cert-file` / `-key-file` when both
/// are set, else `tls-cert-file` / `tls-key-file`, as Redis.
fn client_config(
    config: &Config,
    provider: Arc<CryptoProvider>,
    versions: &[&'static rustls::SupportedProtocolVersion],
    roots: Arc<rustls::RootCertStore>,
) -> Result<ClientConfig, String> {
    let (cert_file, key_file, pass) = match (
        config.str_param("tls-client-cert-file"),
        config.str_param("tls-client-key-file"),
    ) {
        (c, k) if !c.is_empty() && !k.is_empty() => {
            (c, k, config.str_param("tls-client-key-file-pass"))
        }
        _ => (
            config.str_param("tls-cert-file"),
            config.str_param("tls-key-file"),
            config.str_param("tls-key-file-pass"),
        ),
    };
    let certs =
        files::certificates(cert_file).map_err(|e| format!("Failed to load certificate: {e}"))?;
    let key = files::private_key(key_file, pass)
        .map_err(|e| format!("Failed to load private key: {e}"))?;
    let chain =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {e}"))?;
    let own = certified_key(&provider, certs, key, key_file)?;
    Ok(ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| format!("Failed to configure TLS protocols: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ChainOnly(chain)))
        .with_client_cert_resolver(Arc::new(OneCertificate(own))))
}

/// A certificate chain with its key, checked to belong together as OpenSSL's
/// SSL_CTX_use_PrivateKey_file checks (and with its error text) but for any
/// certificate version: rustls's own check parses the certificate with webpki,
/// which refuses the X.509 v1 certificates OpenSSL serves.
fn certified_key(
    provider: &CryptoProvider,
    certs: Vec<CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
    key_file: &str,
) -> Result<Arc<CertifiedKey>, String> {
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("Failed to load private key: {key_file}: {e}"))?;
    let cert_key = certs
        .first()
        .and_then(|c| files::subject_public_key_info(c.as_ref()));
    if let (Some(cert_key), Some(public)) = (cert_key, signing.public_key()) {
        if cert_key != public.as_ref() {
            return Err(format!(
                "Failed to load private key: {key_file}: key values mismatch"
            ));
        }
    }
    Ok(Arc::new(CertifiedKey::new(certs, signing)))
}

/// This server's one certificate, whatever the peer asks for (Redis has one).
#[derive(Debug)]
struct OneCertificate(Arc<CertifiedKey>);

impl rustls::server::ResolvesServerCert for OneCertificate {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

impl rustls::client::ResolvesClientCert for OneCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Checks a server's certificate chain and signatures but not its name: Redis
/// verifies peers with SSL_VERIFY_PEER and sets no host name to match, so
/// certificates without the master's address in them work for replication.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            // The name is checked after the chain: this error means the chain held.
            Err(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
