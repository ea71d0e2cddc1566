//! Text a person reads (a title, a device's name, a command a notification shows whole): the
//! characters that may not be in it.

/// A control character, or a format character that reorders or hides text (bidirectional
/// overrides, zero-width characters, the soft hyphen): with one, a text can pass for another.
pub(crate) fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}' | '\u{00AD}')
}

/// A name a person gives (a token, a notify channel, a git remote): 1-64 of letters, digits,
/// `.`, `_`, `-`, starting with a letter or digit (so never taken for an option).
pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
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

    #[test]
    fn names_are_short_plain_and_never_options() {
        for good in ["ops", "phone-2", "a.b_c", &"x".repeat(64)] {
            assert!(super::is_name(good), "{good}");
        }
        for bad in ["", "-x", ".ops", "a b", "é", "token admin (x)", &"x".repeat(65)] {
            assert!(!super::is_name(bad), "{bad}");
        }
    }
}
