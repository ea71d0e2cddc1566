//! Text a person reads (a title, a device's name, a command a notification shows whole): the
//! characters that may not be in it.

/// A control character, or a format character that reorders or hides text (bidirectional
/// overrides, zero-width characters, the soft hyphen): with one, a text can pass for another.
pub(crate) fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}' | '\u{00AD}')
}

/// A character that shows as nothing or as blank space: any white space (a tab, a no-break or
/// ideographic space), and the fillers and blanks that are not white space to Unicode (Hangul
/// fillers, the braille blank, the Mongolian vowel separator, the combining grapheme joiner,
/// Khmer's inherent vowels). A run of them can push what follows out of view.
pub(crate) fn blank(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '\u{115F}'
                | '\u{1160}'
                | '\u{3164}'
                | '\u{FFA0}'
                | '\u{2800}'
                | '\u{180E}'
                | '\u{034F}'
                | '\u{17B4}'
                | '\u{17B5}'
        )
}

/// Whether `text` reads whole as shown on one line: no invisible character, and no blank but
/// single ASCII spaces (a run of spaces, or any other blank, could hide a tail off the screen).
pub(crate) fn shows_whole(text: &str) -> bool {
    let mut last_blank = true;
    for c in text.chars() {
        if invisible(c) {
            return false;
        }
        if blank(c) {
            if c != ' ' || last_blank {
                return false;
            }
            last_blank = true;
        } else {
            last_blank = false;
        }
    }
    !last_blank || text.is_empty()
}

/// `text` with every run of blanks ([`blank`]) written as one space, and none at its ends: what
/// a notification shows.
pub(crate) fn collapsed(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split(blank).filter(|word| !word.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// A name a person gives (a token, a notify channel, a git remote): 1-64 of letters, digits,
/// `.`, `_`, `-`, starting with a letter or digit (so never taken for an option).
pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The name a client gives for who answers a permission request (`by`), recorded before its
/// token's name: 1-64 of letters, digits, `.`, `_`, `-`, `:` and `@`, starting with a letter or
/// digit (`alice`, `cli:alice`, `alice@example.com`), so that no space, control, bidirectional
/// or filler character, and no long text, can make a decision read like another person's (a
/// `by` of `link (ntfy:phone)`). Blank is none.
pub(crate) fn answerer(by: Option<String>) -> Result<Option<String>, String> {
    let fits = |by: &str| {
        by.len() <= 64
            && by.starts_with(|c: char| c.is_ascii_alphanumeric())
            && by
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '@'))
    };
    match by {
        Some(by) if by.trim().is_empty() => Ok(None),
        Some(by) if fits(&by) => Ok(Some(by)),
        Some(by) => Err(format!(
            "by is 1-64 letters, digits, '.', '_', '-', ':' or '@', starting with a letter or digit; not {:?}",
            by.chars().take(65).collect::<String>()
        )),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn padding_and_fillers_do_not_show_whole() {
        assert!(super::shows_whole("cargo test --all"));
        for padded in [
            format!("ls{}&& touch x", " ".repeat(270)),
            format!("ls{}&& touch x", "\u{3164}".repeat(100)),
            "ls\u{00A0}&& touch x".to_owned(),
            "ls\t&& touch x".to_owned(),
            "ls\u{2800}\u{2800}&& touch x".to_owned(),
            " ls".to_owned(),
            "ls ".to_owned(),
            "ls\u{200B}x".to_owned(),
        ] {
            assert!(!super::shows_whole(&padded), "{padded:?}");
        }
        assert_eq!(
            super::collapsed(&format!("ls{}&& \u{3164}\u{3164} touch x ", " ".repeat(270))),
            "ls && touch x"
        );
    }

    #[test]
    fn an_answerer_is_a_name_or_refused() {
        assert_eq!(super::answerer(Some("alice".into())), Ok(Some("alice".into())));
        assert_eq!(super::answerer(Some("cli:root".into())), Ok(Some("cli:root".into())));
        assert_eq!(super::answerer(Some("  ".into())), Ok(None));
        assert_eq!(super::answerer(None), Ok(None));
        for bad in [
            "alice\u{202e}evil".to_owned(),
            "bob\nlink (ntfy:phone)".to_owned(),
            "x".repeat(3000),
            "\u{3164}".to_owned(),
            "token admin (api)".to_owned(),
            "link (ntfy:phone)".to_owned(),
        ] {
            let refused = super::answerer(Some(bad.clone())).unwrap_err();
            assert!(refused.starts_with("by is 1-64"), "{refused}");
            assert!(refused.len() < 200, "{refused}");
        }
    }

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
