//! A trigger's prompt, filled from its payload: `{{path.to.field}}` is the field's value (a
//! string as it is, a number or boolean as its JSON), `{{list.0.name}}` an element of a list,
//! `{{field?}}` nothing when the field is missing or null. There is no code, no loop, no
//! condition: a template is text and paths, checked when the trigger is made.
//!
//! A payload that does not fit (a field missing, an object or list where text goes) is refused
//! with the field's path; each value is cut at [`MAX_VALUE_CHARS`], the prompt at
//! [`MAX_PROMPT_CHARS`]. The payload's text is someone else's: it reaches the model as part of
//! the prompt, and the session's policy, not the template, decides what its tools may do.

use serde_json::Value;

/// The most characters one field puts into a prompt.
pub const MAX_VALUE_CHARS: usize = 20_000;

/// The most characters a filled prompt has.
pub const MAX_PROMPT_CHARS: usize = 100_000;

/// The most fields a template names.
pub const MAX_FIELDS: usize = 64;

/// A template, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Template(Vec<Piece>);

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Field { path: Vec<String>, optional: bool },
}

impl Template {
    /// Reads `text`; an error names the first place that is not text or a field.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        let mut fields = 0;
        while let Some(start) = rest.find("{{") {
            if start > 0 {
                pieces.push(Piece::Text(rest[..start].to_owned()));
            }
            let after = &rest[start + 2..];
            let Some(end) = after.find("}}") else {
                return Err(format!(
                    "the template has a {{{{ with no }}}} (at {:?})",
                    clip(&rest[start..])
                ));
            };
            let inner = after[..end].trim();
            let (inner, optional) = match inner.strip_suffix('?') {
                Some(inner) => (inner.trim_end(), true),
                None => (inner, false),
            };
            let path: Vec<String> = inner.split('.').map(str::to_owned).collect();
            let fine = path.iter().all(|segment| {
                !segment.is_empty()
                    && segment.len() <= 100
                    && segment.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            });
            if !fine || path.len() > 16 {
                return Err(format!(
                    "{{{{{}}}}} is not a field: a path of names and list indexes joined by dots, like {{{{check_run.output.title}}}}",
                    clip(&after[..end])
                ));
            }
            fields += 1;
            if fields > MAX_FIELDS {
                return Err(format!("the template names more than {MAX_FIELDS} fields"));
            }
            pieces.push(Piece::Field { path, optional });
            rest = &after[end + 2..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        Ok(Template(pieces))
    }

    /// The prompt for `payload`.
    pub fn fill(&self, payload: &Value) -> Result<String, String> {
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Field { path, optional } => {
                    let value = path.iter().try_fold(payload, |value, segment| match value {
                        Value::Object(map) => map.get(segment),
                        Value::Array(list) => {
                            segment.parse::<usize>().ok().and_then(|i| list.get(i))
                        }
                        _ => None,
                    });
                    let shown = path.join(".");
                    match value {
                        None | Some(Value::Null) if *optional => {}
                        None | Some(Value::Null) => {
                            return Err(format!("the payload has no {shown} (the prompt's {{{{{shown}}}}}; write {{{{{shown}?}}}} where it may be missing)"));
                        }
                        Some(Value::String(text)) => out.extend(text.chars().take(MAX_VALUE_CHARS)),
                        Some(value @ (Value::Number(_) | Value::Bool(_))) => {
                            out.push_str(&value.to_string())
                        }
                        Some(_) => {
                            return Err(format!("the payload's {shown} is an object or a list, not text (name a field inside it)"));
                        }
                    }
                }
            }
            if out.chars().count() > MAX_PROMPT_CHARS {
                return Err(format!(
                    "the filled prompt is longer than {MAX_PROMPT_CHARS} characters"
                ));
            }
        }
        if out.trim().is_empty() {
            return Err("the filled prompt is empty".into());
        }
        Ok(out)
    }
}

fn clip(text: &str) -> String {
    text.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_filled_by_path() {
        let template = Template::parse(
            "Issue #{{issue.number}} labelled {{label.name}} by {{sender.login}}: {{issue.title}}\n{{issue.body?}}{{labels.1}}",
        )
        .unwrap();
        let payload = json!({
            "issue": {"number": 42, "title": "Crash on start", "body": null},
            "label": {"name": "agent"},
            "sender": {"login": "ada"},
            "labels": ["a", "b"],
        });
        assert_eq!(
            template.fill(&payload).unwrap(),
            "Issue #42 labelled agent by ada: Crash on start\nb"
        );
    }

    #[test]
    fn a_payload_that_does_not_fit_is_refused_by_path() {
        let template = Template::parse("Fix {{check_run.output.title}}").unwrap();
        let error = template.fill(&json!({"check_run": {}})).unwrap_err();
        assert!(error.contains("no check_run.output.title"), "{error}");
        let error =
            template.fill(&json!({"check_run": {"output": {"title": {"a": 1}}}})).unwrap_err();
        assert!(error.contains("not text"), "{error}");
        let long = "x".repeat(MAX_VALUE_CHARS + 10);
        let filled = template.fill(&json!({"check_run": {"output": {"title": long}}})).unwrap();
        assert_eq!(filled.chars().count(), 4 + MAX_VALUE_CHARS);
        let error = Template::parse("{{title?}}").unwrap().fill(&json!({})).unwrap_err();
        assert!(error.contains("empty"), "{error}");
    }

    #[test]
    fn a_template_that_is_not_one_is_refused_when_made() {
        for (bad, why) in [
            ("Fix {{title", "no }}"),
            ("{{a..b}}", "is not a field"),
            ("{{ a b }}", "is not a field"),
            ("{{a[0]}}", "is not a field"),
        ] {
            let error = Template::parse(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
        assert!(Template::parse(&"{{a}}".repeat(65)).unwrap_err().contains("more than 64"));
        assert_eq!(Template::parse("plain").unwrap().fill(&json!(null)).unwrap(), "plain");
    }
}
