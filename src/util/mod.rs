//! Small shared helpers.
pub mod clock;
pub mod crc16;
pub mod cstr;
pub mod geohash;
pub mod glob;
pub mod long_double;
pub mod outbound;
pub mod prefetch;
pub mod sockaddr;

pub use cstr::{memtoull, repr, split_args, string2ll};

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock unix time in milliseconds (what TTL deadlines are stored in).
#[inline]
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Seconds-resolution clock stored in entries for OBJECT IDLETIME (wraps after ~136 years).
#[inline]
pub fn lru_clock() -> u32 {
    (now_ms() / 1000) as u32
}

/// Human-readable byte counts as Redis prints them (used_memory_human ...).
pub fn bytes_human(n: u64) -> String {
    let f = n as f64;
    if n < 1024 {
        format!("{n}B")
    } else if f < 1024.0 * 1024.0 {
        format!("{:.2}K", f / 1024.0)
    } else if f < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}M", f / (1024.0 * 1024.0))
    } else {
        format!("{:.2}G", f / (1024.0 * 1024.0 * 1024.0))
    }
}

/// `strerror`-style text: Rust appends " (os error N)", Redis does not.
pub fn io_error_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// `bits` random bits as lowercase hex, from the kernel's CSPRNG (ACL GENPASS's
/// passwords, cluster node IDs).
pub fn random_hex(bits: usize) -> String {
    let chars = bits.div_ceil(4);
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: getrandom(2) writes at most the given length into the buffer.
        let n = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if n > 0 {
            filled += n as usize;
        }
    }
    let mut hex = String::with_capacity(chars + 1);
    for b in bytes {
        hex.push_str(&format!("{b:02x}"));
    }
    hex.truncate(chars);
    hex
}
