//! `tls-protocols`, `tls-ciphers` and `tls-ciphersuites` read as Redis hands them to
//! OpenSSL, over what rustls implements: TLSv1.2 and TLSv1.3, ECDHE key exchange
//! with AES-GCM or ChaCha20-Poly1305. A protocol rustls lacks (TLSv1, TLSv1.1) is
//! refused rather than silently left out; in a cipher list, as in OpenSSL's, names
//! that select nothing are ignored and only a list that selects nothing fails.

use rustls::crypto::ring::cipher_suite as cs;
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

/// The TLSv1.2 suites with their OpenSSL names.
const TLS12_SUITES: [(&str, SupportedCipherSuite); 6] = [
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
];

/// The TLSv1.3 suites with their IANA names (what `tls-ciphersuites` lists).
const TLS13_SUITES: [(&str, SupportedCipherSuite); 3] = [
    ("TLS_AES_256_GCM_SHA384", cs::TLS13_AES_256_GCM_SHA384),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        cs::TLS13_CHACHA20_POLY1305_SHA256,
    ),
    ("TLS_AES_128_GCM_SHA256", cs::TLS13_AES_128_GCM_SHA256),
];

/// `tls-protocols`: "" is both versions rustls has; otherwise the named ones.
pub fn protocols(spec: &str) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let words: Vec<&str> = spec.split_whitespace().collect();
    if words.is_empty() {
        return Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]);
    }
    let mut out: Vec<&'static SupportedProtocolVersion> = Vec::new();
    for w in words {
        let version = match w.to_ascii_lowercase().as_str() {
            "tlsv1.2" => &rustls::version::TLS12,
            "tlsv1.3" => &rustls::version::TLS13,
            "tlsv1" | "tlsv1.1" => {
                return Err(format!(
                    "{w} is specified in tls-protocols but not supported by Tessera (rustls implements TLSv1.2 and TLSv1.3 only)."
                ))
            }
            _ => {
                return Err("Invalid tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', 'TLSv1.2' and 'TLSv1.3'.".into())
            }
        };
        if !out.iter().any(|v| v.version == version.version) {
            out.push(version);
        }
    }
    Ok(out)
}

/// Whether one OpenSSL cipher-string word selects the TLSv1.2 suite `name`: a full
/// name, a keyword that selects every suite (DEFAULT, ALL, HIGH ...), or words
/// joined by `+` that each name a property of the suite (ECDHE+AESGCM, aRSA).
fn selects(word: &str, name: &str) -> bool {
    if word.eq_ignore_ascii_case(name) {
        return true;
    }
    word.split('+').all(|part| {
        let part = part.to_ascii_uppercase();
        match part.as_str() {
            "DEFAULT" | "ALL" | "HIGH" | "TLSV1.2" | "ECDHE" | "EECDH" | "KECDHE" | "AEAD"
            | "SECURE" => true,
            "RSA" | "ARSA" => name.contains("-RSA-"),
            "ECDSA" | "AECDSA" => name.contains("-ECDSA-"),
            "AESGCM" => name.contains("-GCM-"),
            "AES" => name.contains("-AES"),
            "AES128" => name.contains("-AES128-"),
            "AES256" => name.contains("-AES256-"),
            "CHACHA20" => name.contains("CHACHA20"),
            "SHA256" => name.ends_with("SHA256"),
            "SHA384" => name.ends_with("SHA384"),
            _ => false,
        }
    })
}

/// `tls-ciphers` (TLSv1.2 and below, OpenSSL's cipher-list syntax): words separated
/// by `:`, `,` or spaces, applied in order; `!word` and `-word` remove what the word
/// selects, `+word` (reordering) and `@STRENGTH` keep the selection. The suites
/// selected, in rustls's order of preference.
pub fn tls12_ciphers(spec: &str) -> Result<Vec<SupportedCipherSuite>, String> {
    if spec.is_empty() {
        return Ok(TLS12_SUITES.iter().map(|(_, s)| *s).collect());
    }
    let mut on = [false; TLS12_SUITES.len()];
    for word in spec.split([':', ',', ' ']).filter(|w| !w.is_empty()) {
        let (remove, word) = match word.as_bytes()[0] {
            b'!' | b'-' => (true, &word[1..]),
            b'+' | b'@' => continue,
            _ => (false, word),
        };
        for (i, (name, _)) in TLS12_SUITES.iter().enumerate() {
            if selects(word, name) {
                on[i] = !remove;
            }
        }
    }
    let chosen: Vec<SupportedCipherSuite> = TLS12_SUITES
        .iter()
        .zip(on)
        .filter(|(_, on)| *on)
        .map(|((_, s), _)| *s)
        .collect();
    if chosen.is_empty() {
        return Err(format!("Failed to configure ciphers: {spec}"));
    }
    Ok(chosen)
}

/// `tls-ciphersuites` (TLSv1.3): IANA names separated by `:`; "" is all of them.
/// An unknown name fails, as in OpenSSL.
pub fn tls13_suites(spec: &str) -> Result<Vec<SupportedCipherSuite>, String> {
    if spec.is_empty() {
        return Ok(TLS13_SUITES.iter().map(|(_, s)| *s).collect());
    }
    let mut out = Vec::new();
    for word in spec.split(':').filter(|w| !w.is_empty()) {
        match TLS13_SUITES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(word))
        {
            Some((_, s)) => out.push(*s),
            None => return Err(format!("Failed to configure ciphersuites: {spec}")),
        }
    }
    Ok(out)
}

/// The OpenSSL-style name of a negotiated suite (TLSv1.2's OpenSSL name, TLSv1.3's
/// IANA name), as `tls-ciphers` and `tls-ciphersuites` spell them.
pub fn suite_name(suite: SupportedCipherSuite) -> &'static str {
    TLS12_SUITES
        .iter()
        .chain(TLS13_SUITES.iter())
        .find(|(_, s)| s.suite() == suite.suite())
        .map_or("unknown", |(n, _)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[SupportedCipherSuite]) -> Vec<&'static str> {
        list.iter().map(|s| suite_name(*s)).collect()
    }

    #[test]
    fn cipher_lists_select_as_openssl_does() {
        assert_eq!(tls12_ciphers("DEFAULT").map(|v| v.len()), Ok(6));
        assert_eq!(
            tls12_ciphers("DEFAULT:-AES128-SHA256").map(|v| v.len()),
            Ok(6)
        );
        assert!(tls12_ciphers("-ALL:AES128-SHA256").is_err());
        assert_eq!(
            tls12_ciphers("ECDHE+AESGCM:!aECDSA").map(|v| names(&v)),
            Ok(vec![
                "ECDHE-RSA-AES256-GCM-SHA384",
                "ECDHE-RSA-AES128-GCM-SHA256"
            ])
        );
        assert_eq!(
            tls12_ciphers("HIGH:!CHACHA20:!AES256").map(|v| names(&v)),
            Ok(vec![
                "ECDHE-ECDSA-AES128-GCM-SHA256",
                "ECDHE-RSA-AES128-GCM-SHA256"
            ])
        );
        assert_eq!(
            tls12_ciphers("ecdhe-rsa-chacha20-poly1305").map(|v| names(&v)),
            Ok(vec!["ECDHE-RSA-CHACHA20-POLY1305"])
        );
    }

    #[test]
    fn tls13_suites_by_name() {
        assert_eq!(
            tls13_suites("TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256").map(|v| names(&v)),
            Ok(vec![
                "TLS_AES_128_GCM_SHA256",
                "TLS_CHACHA20_POLY1305_SHA256"
            ])
        );
        assert!(tls13_suites("TLS_AES_128_CCM_SHA256").is_err());
        assert_eq!(tls13_suites("").map(|v| v.len()), Ok(3));
    }

    #[test]
    fn protocols_as_redis_names_them() {
        assert_eq!(protocols("").map(|v| v.len()), Ok(2));
        assert_eq!(protocols("TLSv1.2").map(|v| v.len()), Ok(1));
        assert_eq!(protocols("tlsv1.2 TLSv1.3 TLSv1.3").map(|v| v.len()), Ok(2));
        assert!(protocols("TLSv1.1").unwrap_err().contains("not supported"));
        assert!(protocols("SSLv3")
            .unwrap_err()
            .starts_with("Invalid tls-protocols"));
    }
}
