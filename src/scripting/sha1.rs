//! SHA-1 (FIPS 180-4), for script ids and `redis.sha1hex`: Redis names a script by the
//! lowercase hex SHA-1 of its body.

/// The 40-character lowercase hex SHA-1 of `data`.
pub fn sha1_hex(data: &[u8]) -> String {
    let digest = sha1(data);
    let mut s = String::with_capacity(40);
    for b in digest {
        s.push(char::from(b"0123456789abcdef"[(b >> 4) as usize]));
        s.push(char::from(b"0123456789abcdef"[(b & 15) as usize]));
    }
    s
}

pub fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let bit_len = (data.len() as u64).wrapping_mul(8);
    let full = data.len() / 64 * 64;
    for block in data[..full].chunks_exact(64) {
        compress(&mut h, block);
    }
    // The rest, 0x80, zeros and the bit length: one block, or two when the rest
    // leaves less than 9 bytes of room.
    let rest = &data[full..];
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let tail_len = if rest.len() < 56 { 64 } else { 128 };
    tail[tail_len - 8..tail_len].copy_from_slice(&bit_len.to_be_bytes());
    for block in tail[..tail_len].chunks_exact(64) {
        compress(&mut h, block);
    }
    let mut out = [0u8; 20];
    for (i, w) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
    }
    out
}

fn compress(h: &mut [u32; 5], block: &[u8]) {
    let mut w = [0u32; 80];
    for (i, c) in block.chunks_exact(4).enumerate() {
        w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
    }
    for i in 16..80 {
        w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
    }
    // Four loops, one per round function, so each compiles without a branch per step.
    let mut s = *h;
    for &wi in &w[0..20] {
        let [_, b, c, d, _] = s;
        step(&mut s, (b & c) | (!b & d), 0x5A82_7999, wi);
    }
    for &wi in &w[20..40] {
        let [_, b, c, d, _] = s;
        step(&mut s, b ^ c ^ d, 0x6ED9_EBA1, wi);
    }
    for &wi in &w[40..60] {
        let [_, b, c, d, _] = s;
        step(&mut s, (b & c) | (b & d) | (c & d), 0x8F1B_BCDC, wi);
    }
    for &wi in &w[60..80] {
        let [_, b, c, d, _] = s;
        step(&mut s, b ^ c ^ d, 0xCA62_C1D6, wi);
    }
    for (x, y) in h.iter_mut().zip(s) {
        *x = x.wrapping_add(y);
    }
}

/// One of the 80 steps: `f` is the round function of b, c, d; `k` the round constant.
#[inline(always)]
fn step(s: &mut [u32; 5], f: u32, k: u32, wi: u32) {
    let [a, b, c, d, e] = *s;
    let t = a
        .rotate_left(5)
        .wrapping_add(f)
        .wrapping_add(e)
        .wrapping_add(k)
        .wrapping_add(wi);
    *s = [t, a, b.rotate_left(30), c, d];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            sha1_hex(b"Pizza & Mandolino"),
            "74822d82031af7493c20eefa13bd07ec4fada82f"
        );
        assert_eq!(
            sha1_hex(&[b'a'; 1000]),
            "291e9a6c66994949b57ba5e650361e98fc36b1ba"
        );
        // Rests of 55, 56 and 64 bytes: the padding fits, spills, or takes a block.
        assert_eq!(
            sha1_hex(&[b'a'; 55]),
            "c1c8bbdc22796e28c0e15163d20899b65621d65a"
        );
        assert_eq!(
            sha1_hex(&[b'a'; 56]),
            "c2db330f6083854c99d4b5bfb6e8f29f201be699"
        );
        assert_eq!(
            sha1_hex(&[b'a'; 64]),
            "0098ba824b5c16427bd7a1122a5a442a25ec644d"
        );
    }
}
