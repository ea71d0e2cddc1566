//! Fuzzes one-tap links and their form: a link signed for a claim made from the input, then
//! changed where the input says, verifies only when unchanged (and no longer than the longest
//! link taken); text that no key signed never
//! verifies; a form body never panics, and a form written from two fields reads back as them.
//!
//! Run: `scripts/fuzz.sh 60 link`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_server::links::{AnswerForm, LinkClaim, LinkKey, MAX_LINK_CHARS};

fuzz_target!(|data: &[u8]| {
    let key = LinkKey::from_hex(&"5a".repeat(32)).expect("64 hex digits");
    let text = String::from_utf8_lossy(data);
    assert_eq!(key.verify(&text), None, "text no key signed verified: {text:?}");

    let mut parts = text.splitn(4, '\0');
    let claim = LinkClaim {
        session: parts.next().unwrap_or_default().to_owned(),
        request: parts.next().unwrap_or_default().to_owned(),
        expires_ms: data.len() as u64 * 1_000_003,
        channel: parts.next().unwrap_or_default().to_owned(),
    };
    let Some(link) = key.sign(&claim) else {
        // Too long for any link taken: none is made (a notice then offers no button).
        return;
    };
    assert!(link.len() <= MAX_LINK_CHARS, "a link past the limit was made");
    assert_eq!(key.verify(&link), Some(claim.clone()), "a signed link verifies");
    // Change the link: each input byte past the claim picks a place and a character.
    let changes = parts.next().unwrap_or_default().as_bytes();
    let mut changed = link.clone().into_bytes();
    for pair in changes.chunks(2) {
        let place = usize::from(pair[0]) * changed.len() / 256;
        let with = *pair.get(1).unwrap_or(&b'A');
        if place < changed.len() && with.is_ascii() {
            changed[place] = with;
        }
    }
    let changed = String::from_utf8(changed).expect("ASCII stays ASCII");
    if changed != link {
        assert_eq!(key.verify(&changed), None, "a changed link verified: {changed}");
    }

    let form = AnswerForm::parse(data);
    let written = form_urlencoded::Serializer::new(String::new())
        .append_pair("decision", &form.decision)
        .append_pair("message", form.message.as_deref().unwrap_or_default())
        .finish();
    let again = AnswerForm::parse(written.as_bytes());
    assert_eq!(again.decision, form.decision);
    assert_eq!(again.message.unwrap_or_default(), form.message.unwrap_or_default());
});
