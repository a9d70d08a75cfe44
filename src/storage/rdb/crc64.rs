//! Redis's CRC64 (Jones polynomial, reflected), slicing-by-8: the checksum of DUMP
//! payloads, RDB files and FUNCTION DUMP payloads.

const POLY: u64 = 0x95AC_9329_AC4B_C9B5;

const fn make_tables() -> [[u64; 256]; 8] {
    let mut t = [[0u64; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u64;
        let mut k = 0;
        while k < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            k += 1;
        }
        t[0][i] = crc;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut j = 1;
        while j < 8 {
            let prev = t[j - 1][i];
            t[j][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            j += 1;
        }
        i += 1;
    }
    t
}

static TABLES: [[u64; 256]; 8] = make_tables();

pub(super) fn update(mut crc: u64, data: &[u8]) -> u64 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let v = crc ^ u64::from_le_bytes(word);
        crc = t[7][(v & 0xff) as usize]
            ^ t[6][((v >> 8) & 0xff) as usize]
            ^ t[5][((v >> 16) & 0xff) as usize]
            ^ t[4][((v >> 24) & 0xff) as usize]
            ^ t[3][((v >> 32) & 0xff) as usize]
            ^ t[2][((v >> 40) & 0xff) as usize]
            ^ t[1][((v >> 48) & 0xff) as usize]
            ^ t[0][(v >> 56) as usize];
    }
    for &b in chunks.remainder() {
        crc = t[0][((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::super::crc64;
    use super::super::tests::prng;

    #[test]
    fn crc64_check_value() {
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        assert_eq!(crc64(0, b""), 0);
    }

    #[test]
    fn crc64_chains() {
        let data = prng(1000, 9);
        for split in [0, 1, 7, 8, 9, 500, 1000] {
            let (a, rest) = data.split_at(split);
            assert_eq!(crc64(crc64(0, a), rest), crc64(0, &data));
        }
    }
}
