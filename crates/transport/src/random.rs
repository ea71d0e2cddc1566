//! Random identifiers and secrets, from the OS's random source.

/// `bytes` random bytes from the OS, as lowercase hex (`2 * bytes` characters).
///
/// # Panics
/// When the OS has no random source to give (`getrandom` fails only on systems Switchboard does
/// not run on, or before the kernel's pool is ready at boot): a token must never be guessable,
/// so there is no fallback.
pub fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).expect("the operating system's random source failed");
    hex::encode(buffer)
}

/// `N` random bytes from the OS (see [`random_hex`] for when it panics).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buffer = [0u8; N];
    getrandom::fill(&mut buffer).expect("the operating system's random source failed");
    buffer
}

#[cfg(test)]
mod tests {
    #[test]
    fn random_hex_is_random_and_as_long_as_asked() {
        let (a, b) = (super::random_hex(16), super::random_hex(16));
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a.bytes().all(|byte| byte.is_ascii_hexdigit() && !byte.is_ascii_uppercase()));
    }
}
