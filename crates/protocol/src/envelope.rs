//! Cheap routing: the handful of fields a router needs, read without building the message.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::Deserializer;

use crate::wire::{KeyStr, StrOrOther};

/// The routing fields of one line, borrowed from it where they have no escapes.
///
/// Parsing skips every other value without allocating, which makes it several times faster
/// than a full decode (`docs/benchmarks.md`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// `type`.
    pub kind: Option<Cow<'a, str>>,
    /// `subtype`, or for control messages `request.subtype` / `response.subtype`.
    pub subtype: Option<Cow<'a, str>>,
    /// `session_id`.
    pub session_id: Option<Cow<'a, str>>,
    /// `uuid`.
    pub uuid: Option<Cow<'a, str>>,
    /// `request_id`, or for a control response `response.request_id`.
    pub request_id: Option<Cow<'a, str>>,
    /// `parent_tool_use_id` (`None` when null).
    pub parent_tool_use_id: Option<Cow<'a, str>>,
}

impl<'a> Envelope<'a> {
    /// Reads the routing fields of one line.
    pub fn parse(line: &'a [u8]) -> Result<Envelope<'a>, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_slice(line);
        let envelope = de.deserialize_map(EnvelopeVisitor)?;
        de.end()?;
        Ok(envelope)
    }

    /// `type`, or `""`.
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or("")
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut envelope = Envelope::default();
        let mut inner_subtype = None;
        let mut inner_request_id = None;
        while let Some(key) = map.next_key::<KeyStr<'de>>()? {
            match key.0.as_ref() {
                "type" => first(&mut envelope.kind, map.next_value::<StrOrOther<'de>>()?.0),
                "subtype" => first(&mut envelope.subtype, map.next_value::<StrOrOther<'de>>()?.0),
                "session_id" => {
                    first(&mut envelope.session_id, map.next_value::<StrOrOther<'de>>()?.0)
                }
                "uuid" => first(&mut envelope.uuid, map.next_value::<StrOrOther<'de>>()?.0),
                "request_id" => {
                    first(&mut envelope.request_id, map.next_value::<StrOrOther<'de>>()?.0)
                }
                "parent_tool_use_id" => {
                    first(&mut envelope.parent_tool_use_id, map.next_value::<StrOrOther<'de>>()?.0);
                }
                "request" | "response" => {
                    let inner = map.next_value::<Inner<'de>>()?;
                    inner_subtype = inner_subtype.or(inner.subtype);
                    inner_request_id = inner_request_id.or(inner.request_id);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if matches!(envelope.kind.as_deref(), Some("control_request" | "control_response")) {
            envelope.subtype = envelope.subtype.or(inner_subtype);
            envelope.request_id = envelope.request_id.or(inner_request_id);
        }
        Ok(envelope)
    }
}

/// Keeps the first value of a key that appears twice, as the typed decoder does for tags.
fn first<'a>(slot: &mut Option<Cow<'a, str>>, value: Option<Cow<'a, str>>) {
    if slot.is_none() {
        *slot = value;
    }
}

/// `subtype` and `request_id` of a nested `request` / `response` object; anything else reads
/// as empty.
#[derive(Default)]
struct Inner<'a> {
    subtype: Option<Cow<'a, str>>,
    request_id: Option<Cow<'a, str>>,
}

impl<'de> de::Deserialize<'de> for Inner<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Inner<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut inner = Inner::default();
                while let Some(key) = map.next_key::<KeyStr<'de>>()? {
                    match key.0.as_ref() {
                        "subtype" => inner.subtype = map.next_value::<StrOrOther<'de>>()?.0,
                        "request_id" => inner.request_id = map.next_value::<StrOrOther<'de>>()?.0,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(inner)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Inner::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Inner::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Inner::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Inner::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Inner::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Inner::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Inner::default())
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_control_response_routing_from_the_nested_body() {
        let line = br#"{"type":"control_response","response":{"subtype":"success","request_id":"r-1","response":{"mode":"plan"}}}"#;
        let envelope = Envelope::parse(line).unwrap();
        assert_eq!(envelope.kind(), "control_response");
        assert_eq!(envelope.subtype.as_deref(), Some("success"));
        assert_eq!(envelope.request_id.as_deref(), Some("r-1"));
    }

    #[test]
    fn null_parent_reads_as_none_and_escaped_strings_are_unescaped() {
        let line = br#"{"uuid":"a\"b","type":"user","parent_tool_use_id":null,"session_id":"s"}"#;
        let envelope = Envelope::parse(line).unwrap();
        assert_eq!(envelope.uuid.as_deref(), Some("a\"b"));
        assert_eq!(envelope.parent_tool_use_id, None);
        assert_eq!(envelope.session_id.as_deref(), Some("s"));
    }

    #[test]
    fn subtype_of_a_non_control_message_is_not_taken_from_nested_objects() {
        let line = br#"{"type":"user","request":{"subtype":"x"}}"#;
        assert_eq!(Envelope::parse(line).unwrap().subtype, None);
    }

    #[test]
    fn trailing_garbage_is_an_error() {
        assert!(Envelope::parse(br#"{"type":"user"} x"#).is_err());
        assert!(Envelope::parse(br#"[1,2]"#).is_err());
    }
}
