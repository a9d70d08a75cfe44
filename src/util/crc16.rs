//! CRC16-XMODEM (polynomial 0x1021, init 0), the checksum Redis Cluster hashes keys
//! with. Computed slicing-by-8: every key access of a shard computes its slot, so the
//! byte-at-a-time table loop was a measurable share of a GET.

const fn make_tables() -> [[u16; 256]; 8] {
    let mut t = [[0u16; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut b = 0;
        while b < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            b += 1;
        }
        t[0][i] = crc;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev << 8) ^ t[0][(prev >> 8) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

static TABLES: [[u16; 256]; 8] = make_tables();

pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let hi = (crc >> 8) as u8 ^ c[0];
        let lo = crc as u8 ^ c[1];
        crc = TABLES[7][hi as usize]
            ^ TABLES[6][lo as usize]
            ^ TABLES[5][c[2] as usize]
            ^ TABLES[4][c[3] as usize]
            ^ TABLES[3][c[4] as usize]
            ^ TABLES[2][c[5] as usize]
            ^ TABLES[1][c[6] as usize]
            ^ TABLES[0][c[7] as usize];
    }
    for &b in chunks.remainder() {
        crc = (crc << 8) ^ TABLES[0][((crc >> 8) as u8 ^ b) as usize];
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn check_value() {
        // The standard CRC-16/XMODEM check value.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    proptest! {
        #[test]
        fn matches_the_crc16_crate(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            prop_assert_eq!(crc16(&data), crc16::State::<crc16::XMODEM>::calculate(&data));
        }
    }
}
