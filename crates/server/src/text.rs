//! Text a person reads (a title, a device's name, a command a notification shows whole): the
//! characters that may not be in it.

/// A control character, or a format character that reorders or hides text (bidirectional
/// overrides, zero-width characters, the soft hyphen): with one, a text can pass for another.
pub(crate) fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}' | '\u{00AD}')
}

#[cfg(test)]
mod tests {
    #[test]
    fn controls_and_hiding_characters_are_invisible() {
        for c in ['\n', '\u{7}', '\u{202E}', '\u{200B}', '\u{FEFF}', '\u{00AD}', '\u{2066}'] {
            assert!(super::invisible(c), "{c:?}");
        }
        for c in ['a', 'é', '😀', ' ', '-'] {
            assert!(!super::invisible(c), "{c:?}");
        }
    }
}
