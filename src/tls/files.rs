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

/// One DER element read from the front of a byte string.
struct DerElement<'a> {
    /// Tag, length and contents.
    whole: &'a [u8],
    contents: &'a [u8],
    /// What follows the element.
    rest: &'a [u8],
}

fn der_element(der: &[u8]) -> Option<DerElement<'_>> {
    let (_tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    let header = der.len() - rest.len();
    Some(DerElement {
        whole: &der[..header + len],
        contents: &rest[..len],
        rest: &rest[len..],
    })
}

/// The SubjectPublicKeyInfo of a certificate, of any version: X.509 v1
/// certificates (what `openssl x509 -req` makes without extensions, as Redis's
/// gen-test-certs.sh does for redis.crt) work with OpenSSL, but webpki does not
/// parse them, so rustls's own key check cannot be used on them.
pub fn subject_public_key_info(cert: &[u8]) -> Option<&[u8]> {
    let certificate = der_element(cert)?.contents;
    let mut tbs = der_element(certificate)?.contents;
    // The explicit [0] version is absent in v1.
    if tbs.first() == Some(&0xa0) {
        tbs = der_element(tbs)?.rest;
    }
    // serialNumber, signature, issuer, validity, subject.
    for _ in 0..5 {
        tbs = der_element(tbs)?.rest;
    }
    Some(der_element(tbs)?.whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_walk_finds_the_key_in_v1_and_v3_layouts() {
        // SEQ { SEQ { [0]{INT 2}?, INT, SEQ, SEQ, SEQ, SEQ, SEQ(spki) }, ... }
        let spki = [0x30, 0x03, 0x02, 0x01, 0x07];
        let body: Vec<u8> = [
            &[0x02, 0x01, 0x01][..],
            &[0x30, 0x00],
            &[0x30, 0x00],
            &[0x30, 0x00],
            &[0x30, 0x00],
            &spki,
        ]
        .concat();
        let wrap = |tag: u8, inner: &[u8]| [&[tag, inner.len() as u8][..], inner].concat();
        let v1 = wrap(0x30, &wrap(0x30, &body));
        assert_eq!(subject_public_key_info(&v1), Some(&spki[..]));
        let v3_body = [&wrap(0xa0, &[0x02, 0x01, 0x02])[..], &body].concat();
        let v3 = wrap(0x30, &wrap(0x30, &v3_body));
        assert_eq!(subject_public_key_info(&v3), Some(&spki[..]));
        assert_eq!(subject_public_key_info(&v3[..10]), None);
        // A long-form length.
        assert_eq!(
            der_element(&[0x04, 0x81, 0x01, 0xff]).map(|e| e.contents),
            Some(&[0xff][..])
        );
    }
}
