//! Lower-case hexadecimal, written one way everywhere: cache keys and
//! annotation digests, the installer's file digests, AWS session-name
//! hashes, unpredictable file names. A table lookup per nibble, with no
//! formatting machinery (a cache hit derives a key with it).

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as `2 * bytes.len()` lower-case hex digits.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().saturating_mul(2));
    for b in bytes {
        for nibble in [b >> 4, b & 0x0f] {
            out.push(char::from(
                DIGITS.get(usize::from(nibble)).copied().unwrap_or(b'0'),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_byte_is_two_lower_case_digits() {
        assert_eq!(super::encode(&[]), "");
        assert_eq!(super::encode(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        let all: Vec<u8> = (0..=255).collect();
        let expected: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(super::encode(&all), expected);
    }
}
