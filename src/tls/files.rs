//! Certificates and keys from PEM files, as OpenSSL reads Redis's `tls-*-file`s:
//! a certificate file may hold a chain, a key may be PKCS#8, PKCS#1 or SEC1, and a
//! PKCS#8 key may be encrypted (`ENCRYPTED PRIVATE KEY`, what `openssl rsa -aes256`
//! and `openssl pkcs8 -topk8` write) with the `*-pass` setting as its password.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Every certificate in `path`, in file order (leaf first for a chain).
pub fn certificates(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{path}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{path}: no certificate found"));
    }
    Ok(certs)
}

/// The private key in `path`, decrypted with `pass` when it is encrypted.
pub fn private_key(path: &str, pass: &str) -> Result<PrivateKeyDer<'static>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        return decrypt_pkcs8(path, &text, pass);
    }
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(format!(
            "{path}: keys encrypted in OpenSSL's traditional format are not supported; convert with `openssl pkcs8 -topk8 -v2 aes256`"
        ));
    }
    PrivateKeyDer::from_pem_slice(text.as_bytes()).map_err(|e| format!("{path}: {e}"))
}

fn decrypt_pkcs8(path: &str, text: &str, pass: &str) -> Result<PrivateKeyDer<'static>, String> {
    if pass.is_empty() {
        return Err(format!(
            "{path}: the key is encrypted and no password is set"
        ));
    }
    let start = text
        .find("-----BEGIN ENCRYPTED PRIVATE KEY-----")
        .unwrap_or_default();
    let (_, der) = pkcs8::der::pem::decode_vec(&text.as_bytes()[start..])
        .map_err(|e| format!("{path}: {e}"))?;
    let encrypted = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_slice())
        .map_err(|e| format!("{path}: {e}"))?;
    let plain = encrypted
        .decrypt(pass)
        .map_err(|_| format!("{path}: bad decrypt (wrong password?)"))?;
    Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        plain.as_bytes().to_vec(),
    )))
}

/// The trust anchors of `tls-ca-cert-file` and every certificate file in
/// `tls-ca-cert-dir` (OpenSSL's hashed directory: the files are plain PEM; files
/// that hold no certificate are passed over, as OpenSSL's lookup never opens them).
pub fn ca_roots(file: &str, dir: &str) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    let mut add = |certs: Vec<CertificateDer<'static>>, from: &str| -> Result<(), String> {
        for c in certs {
            roots
                .add(c)
                .map_err(|e| format!("{from}: not a usable CA certificate: {e}"))?;
        }
        Ok(())
    };
    if !file.is_empty() {
        add(certificates(file)?, file)?;
    }
    if !dir.is_empty() {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{dir}: {e}"))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.is_file() {
                continue;
            }
            let name = path.display().to_string();
            if let Ok(certs) = certificates(&name) {
                add(certs, &name)?;
            }
        }
        if roots.is_empty() && file.is_empty() {
            return Err(format!("{dir}: no CA certificate found"));
        }
    }
    Ok(roots)
}
