//! The machinery behind every typed message: structs that keep unknown fields, enums that keep
//! unknown variants, and a cheap way to read a tag without parsing the whole object.
//!
//! serde's `#[serde(flatten)]` and internally tagged enums buffer the whole object into an
//! intermediate tree before building the struct, which costs more than parsing into a
//! `serde_json::Value`. The macros here generate visitors that read each field once and send
//! only unknown fields to a [`serde_json::Map`], and tagged enums that find their tag without
//! a second parse: a whole line's enum peeks at the tag in the raw text, and an enum inside a
//! value (a `stream_event`'s `event`, its `delta`, an assistant message's content blocks) reads
//! its object's entries until the tag and hands the variant's struct the rest of the same map,
//! so a nested value is not parsed a second time. See `docs/benchmarks.md` for what that buys.
//!
//! - `wire_struct!`: a struct whose deserializer reads each known key once and sends unknown
//!   keys to `extra` (a `serde_json::Map`, their order kept).
//! - `wire_enum!`: a whole line's variant is picked by `peek_tag` on the raw text, then parsed
//!   directly. Inside a value, `enum_from_map` reads the entries up to the tag; entries before
//!   it are kept as their text and replayed to the variant's struct first, each replay with a
//!   reader of its own, so at most two run inside one another and a line nested deeper that
//!   way is an error. Either way the tag is the first entry of its key whose value is a
//!   string, and an unknown tag is `Unknown(Value)`.
//! - `wire_str_enum!`: a string enum with `Other(String)` for a value it does not know.

use std::borrow::Cow;
use std::fmt;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer, StringDeserializer};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// Fields a typed struct does not know, in the order they arrived.
///
/// Kept so that a message read from the CLI and written again loses nothing, and so that
/// callers can reach fields that newer CLIs add before this crate names them.
pub type Extra = serde_json::Map<String, serde_json::Value>;

/// A quantity the CLI may write as an integer or as a float: a duration, a delay, a count.
///
/// The CLI is JavaScript, where `560` and `559.92` are the same kind of number: 2.1.100 and
/// 2.1.120 write `system/api_retry`'s `retry_delay_ms` with a fraction, 2.1.250 and 2.1.330 as
/// an integer (`docs/cli-drift.md`). The number is kept exactly as sent (a line re-encodes unchanged) and read
/// with [`Num::get`] (rounded, never negative) or [`Num::as_f64`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Num(pub serde_json::Number);

impl Num {
    /// The value rounded to the nearest whole number; negative or not finite reads as 0,
    /// beyond `u64` as `u64::MAX`.
    pub fn get(&self) -> u64 {
        if let Some(whole) = self.0.as_u64() {
            return whole;
        }
        match self.0.as_f64() {
            // `as` saturates: NaN is 0, a value past the range is the range's end.
            Some(float) if float > 0.0 => float.round() as u64,
            _ => 0,
        }
    }

    /// The value as a float.
    pub fn as_f64(&self) -> f64 {
        self.0.as_f64().unwrap_or(0.0)
    }

    /// [`Num::get`] of an optional field, 0 when absent.
    pub fn or_zero(field: &Option<Num>) -> u64 {
        field.as_ref().map_or(0, Num::get)
    }
}

impl Default for Num {
    fn default() -> Self {
        Num(serde_json::Number::from(0u64))
    }
}

impl From<u64> for Num {
    fn from(value: u64) -> Self {
        Num(serde_json::Number::from(value))
    }
}

/// Reads the string value of the top-level key `key` from the JSON object text `raw`.
///
/// Fast path: walks the leading `"key":"string"` pairs directly, which covers every tagged
/// object the CLI writes (`{"type":"system","subtype":"init",...}`). When a value before the
/// wanted key is not a plain string, or a string has escapes, it falls back to a full
/// allocation-free serde pass. Returns `None` when the key is absent or not a string.
pub(crate) fn peek_tag<'a>(raw: &'a str, key: &str) -> Option<Cow<'a, str>> {
    match peek_tag_fast(raw.as_bytes(), key.as_bytes()) {
        Peek::Found(start, end) => Some(Cow::Borrowed(&raw[start..end])),
        Peek::Absent => None,
        Peek::Unsure => peek_tag_slow(raw, key),
    }
}

enum Peek {
    Found(usize, usize),
    Absent,
    Unsure,
}

fn peek_tag_fast(bytes: &[u8], key: &[u8]) -> Peek {
    let mut pos = 0;
    let skip_ws = |pos: &mut usize| {
        while *pos < bytes.len() && matches!(bytes[*pos], b' ' | b'\t' | b'\n' | b'\r') {
            *pos += 1;
        }
    };
    // Reads a string with no escapes starting at `pos` (which must hold `"`).
    let plain_string = |pos: &mut usize| -> Option<(usize, usize)> {
        if bytes.get(*pos) != Some(&b'"') {
            return None;
        }
        let start = *pos + 1;
        let len = memchr::memchr2(b'"', b'\\', &bytes[start..])?;
        if bytes[start + len] != b'"' {
            return None;
        }
        *pos = start + len + 1;
        Some((start, start + len))
    };
    skip_ws(&mut pos);
    if bytes.get(pos) != Some(&b'{') {
        return Peek::Unsure;
    }
    pos += 1;
    loop {
        skip_ws(&mut pos);
        if bytes.get(pos) == Some(&b'}') {
            return Peek::Absent;
        }
        let Some((key_start, key_end)) = plain_string(&mut pos) else { return Peek::Unsure };
        skip_ws(&mut pos);
        if bytes.get(pos) != Some(&b':') {
            return Peek::Unsure;
        }
        pos += 1;
        skip_ws(&mut pos);
        let this_key = &bytes[key_start..key_end];
        let Some((value_start, value_end)) = plain_string(&mut pos) else { return Peek::Unsure };
        if this_key == key {
            return Peek::Found(value_start, value_end);
        }
        skip_ws(&mut pos);
        match bytes.get(pos) {
            Some(b',') => pos += 1,
            Some(b'}') => return Peek::Absent,
            _ => return Peek::Unsure,
        }
    }
}

fn peek_tag_slow<'a>(raw: &'a str, key: &str) -> Option<Cow<'a, str>> {
    struct Probe<'k>(&'k str);
    impl<'de> Visitor<'de> for Probe<'_> {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = None;
            while let Some(key) = map.next_key::<KeyStr<'de>>()? {
                if found.is_none() && key.0 == self.0 {
                    found = map.next_value::<StrOrOther<'de>>()?.0;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    let mut de = serde_json::Deserializer::from_str(raw);
    de.deserialize_map(Probe(key)).ok().flatten()
}

/// A map key, borrowed from the input when it has no escapes.
pub(crate) struct KeyStr<'de>(pub(crate) Cow<'de, str>);

impl<'de> de::Deserialize<'de> for KeyStr<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(CowStrVisitor).map(KeyStr)
    }
}

/// A string, borrowed when possible; any other JSON value reads as `None`.
pub(crate) struct StrOrOther<'de>(pub(crate) Option<Cow<'de, str>>);

impl<'de> de::Deserialize<'de> for StrOrOther<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrOrOther<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(StrOrOther(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(StrOrOther(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(StrOrOther(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(StrOrOther(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(StrOrOther(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(StrOrOther(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(StrOrOther(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(StrOrOther(None))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_any(self)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(StrOrOther(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(StrOrOther(None))
            }
        }
        deserializer.deserialize_any(V)
    }
}

struct CowStrVisitor;

impl<'de> Visitor<'de> for CowStrVisitor {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// Entries already read from the front of an object, in order, handed on with the rest of it.
/// Each value is kept as the text it came as: a field that keeps its JSON text (`RawJson`)
/// gets it exactly, as it does when read in place.
pub(crate) type Taken = Vec<(String, Box<RawValue>)>;

/// `text` as a JSON string value.
pub(crate) fn raw_string(text: &str) -> Box<RawValue> {
    serde_json::value::to_raw_value(text).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// The string a value is, if it is one.
fn string_of(raw: &RawValue) -> Option<String> {
    raw.get().starts_with('"').then(|| serde_json::from_str(raw.get()).ok()).flatten()
}

/// What a wire enum's variant holds: a wire struct, or another wire enum (`system` lines pick
/// their struct by `subtype` after `type`).
pub(crate) trait WireBody: Sized {
    /// Reads the object whose leading entries `taken` were already read from `map`, and the
    /// rest from `map`.
    fn from_rest<'de, A: MapAccess<'de>>(taken: Taken, map: A) -> Result<Self, A::Error>;

    /// Reads the object whose first entry, the tag `key: tag`, was already read from `map`.
    fn after_tag<'de, A: MapAccess<'de>>(
        key: &'static str,
        tag: &'static str,
        map: A,
    ) -> Result<Self, A::Error> {
        Self::from_rest(vec![(key.to_owned(), raw_string(tag))], map)
    }

    /// Decodes one JSON object given as text.
    fn from_text(raw: &str) -> Result<Self, serde_json::Error>;
}

/// A boxed body reads as its body does (a wire enum keeps its large variants boxed, so that
/// the enum stays small to move).
impl<T: WireBody> WireBody for Box<T> {
    fn from_rest<'de, A: MapAccess<'de>>(taken: Taken, map: A) -> Result<Self, A::Error> {
        T::from_rest(taken, map).map(Box::new)
    }

    fn after_tag<'de, A: MapAccess<'de>>(
        key: &'static str,
        tag: &'static str,
        map: A,
    ) -> Result<Self, A::Error> {
        T::after_tag(key, tag, map).map(Box::new)
    }

    fn from_text(raw: &str) -> Result<Self, serde_json::Error> {
        T::from_text(raw).map(Box::new)
    }
}

/// The generated half of a wire enum that [`enum_from_map`] needs.
pub(crate) trait WireEnum: Sized {
    /// The key whose value picks the variant.
    const TAG: &'static str;
    /// Whether `tag` names a variant.
    fn knows(tag: &str) -> bool;
    /// Reads the variant `tag` names (one [`WireEnum::knows`]): from the rest of `map` after
    /// the tag when `taken` is `None`, else after the entries `taken`, the tag among them.
    fn variant<'de, A: MapAccess<'de>>(
        tag: &str,
        taken: Option<Taken>,
        map: A,
    ) -> Result<Self, A::Error>;
    /// A value kept whole.
    fn unknown(value: Value) -> Self;
}

/// A wire enum read from any JSON value: an object by its tag, anything else kept whole.
pub(crate) fn deserialize_enum<'de, E: WireEnum, D: Deserializer<'de>>(
    d: D,
) -> Result<E, D::Error> {
    d.deserialize_any(EnumVisitor(std::marker::PhantomData))
}

/// A wire enum read from the object `map` whose leading entries `taken` were already read.
///
/// The tag is the first entry of the tag's key whose value is a string, as [`peek_tag`] reads
/// a whole line's. The CLI writes it first: then it is read borrowed, and the variant's struct
/// reads the rest of the same map. Otherwise the entries before it are kept (as their text)
/// and handed to the struct ahead of the rest. An unknown tag, or none, keeps the object whole.
pub(crate) fn enum_from_map<'de, E: WireEnum, A: MapAccess<'de>>(
    mut taken: Taken,
    mut map: A,
) -> Result<E, A::Error> {
    if taken.is_empty() {
        let Some(key) = map.next_key::<KeyStr<'de>>()? else {
            return Ok(E::unknown(Value::Object(serde_json::Map::new())));
        };
        if key.0 == E::TAG {
            match map.next_value::<TagValue<'de>>()? {
                TagValue::Str(tag) if E::knows(&tag) => return E::variant(&tag, None, map),
                TagValue::Str(tag) => {
                    taken.push((key.0.into_owned(), raw_string(&tag)));
                    return rest_kept_whole(taken, map);
                }
                // Not a string: a later entry of the key may be the tag.
                TagValue::Other(value) => {
                    let value =
                        serde_json::value::to_raw_value(&value).map_err(de::Error::custom)?;
                    taken.push((key.0.into_owned(), value));
                }
            }
        } else {
            let value = map.next_value::<Box<RawValue>>()?;
            taken.push((key.0.into_owned(), value));
        }
    }
    let is_tag = |key: &str, value: &RawValue| key == E::TAG && value.get().starts_with('"');
    let mut at = taken.iter().position(|(key, value)| is_tag(key, value));
    while at.is_none() {
        let Some(key) = map.next_key::<String>()? else { break };
        let value = map.next_value::<Box<RawValue>>()?;
        if is_tag(&key, &value) {
            at = Some(taken.len());
        }
        taken.push((key, value));
    }
    let tag = at.and_then(|at| string_of(&taken[at].1)).filter(|tag| E::knows(tag));
    match tag {
        Some(tag) => E::variant(&tag, Some(taken), map),
        None => rest_kept_whole(taken, map),
    }
}

/// The object of `taken` and the rest of `map`, kept whole.
fn rest_kept_whole<'de, E: WireEnum, A: MapAccess<'de>>(
    taken: Taken,
    map: A,
) -> Result<E, A::Error> {
    let mut object = serde_json::Map::new();
    for (key, value) in taken {
        object.insert(key, serde_json::from_str(value.get()).map_err(de::Error::custom)?);
    }
    let rest = serde_json::Map::deserialize(MapAccessDeserializer::new(map))?;
    for (key, value) in rest {
        object.insert(key, value);
    }
    Ok(E::unknown(Value::Object(object)))
}

/// The error of a variant that did not fit, naming its tag (`type "text": ...`). The inner
/// error's position, if it has one, is dropped: the reader adds the place it stopped.
pub(crate) fn in_variant<E: de::Error>(key: &str, tag: &str, error: &impl fmt::Display) -> E {
    let text = error.to_string();
    E::custom(format_args!("{key} {tag:?}: {}", without_position(&text)))
}

/// `text` without serde_json's trailing ` at line L column C`.
fn without_position(text: &str) -> &str {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(at) = text.rfind(" at line ") {
        if let Some((line, column)) = text[at + " at line ".len()..].split_once(" column ") {
            if digits(line) && digits(column) {
                return &text[..at];
            }
        }
    }
    text
}

/// How many replays of kept entries may run inside one another (see [`Replay`]).
const MAX_REPLAYS: u32 = 2;

thread_local! {
    static REPLAYS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A replay of kept entries running on this thread. Each replay reads its text with a reader
/// of its own, whose depth limit starts again: a hostile line nesting objects whose tag comes
/// last, each inside an entry before the tag, would otherwise recurse without bound (and keep
/// a copy of its text at every level). The CLI writes every tag first and replays nothing;
/// a line nested past this is refused with an error.
struct Replay;

impl Replay {
    fn enter() -> Result<Replay, String> {
        REPLAYS.with(|replays| {
            if replays.get() >= MAX_REPLAYS {
                return Err(format!(
                    "objects whose tag comes after their other entries are nested more than {MAX_REPLAYS} deep inside such entries"
                ));
            }
            replays.set(replays.get() + 1);
            Ok(Replay)
        })
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        REPLAYS.with(|replays| replays.set(replays.get().saturating_sub(1)));
    }
}

/// A map that yields `taken` first, then the rest of `map`.
pub(crate) struct Chain<A> {
    taken: std::vec::IntoIter<(String, Box<RawValue>)>,
    value: Option<Box<RawValue>>,
    map: A,
}

impl<A> Chain<A> {
    pub(crate) fn new(taken: Taken, map: A) -> Self {
        Chain { taken: taken.into_iter(), value: None, map }
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Chain<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        match self.taken.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(StringDeserializer::<A::Error>::new(key)).map(Some)
            }
            None => self.map.next_key_seed(seed),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        match self.value.take() {
            // Read from its text again (a reader that copies, so that it can outlive `'de`).
            Some(value) => {
                let _replay = Replay::enter().map_err(de::Error::custom)?;
                let mut reader = serde_json::Deserializer::from_reader(value.get().as_bytes());
                seed.deserialize(&mut reader).map_err(de::Error::custom)
            }
            None => self.map.next_value_seed(seed),
        }
    }
}

/// A tag's value: a string (borrowed when it has no escapes), or anything else, kept.
enum TagValue<'de> {
    Str(Cow<'de, str>),
    Other(Value),
}

impl<'de> Deserialize<'de> for TagValue<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TagValue<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(TagValue::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(TagValue::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(TagValue::Str(Cow::Owned(v)))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                ValueVisitor.visit_bool(v).map(TagValue::Other)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                ValueVisitor.visit_i64(v).map(TagValue::Other)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                ValueVisitor.visit_u64(v).map(TagValue::Other)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                ValueVisitor.visit_f64(v).map(TagValue::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                ValueVisitor.visit_unit().map(TagValue::Other)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                ValueVisitor.visit_none().map(TagValue::Other)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                Value::deserialize(d).map(TagValue::Other)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                ValueVisitor.visit_seq(seq).map(TagValue::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                ValueVisitor.visit_map(map).map(TagValue::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// Builds a [`Value`] from any JSON value, as `Value`'s own reader does.
struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        Value::deserialize(SeqAccessDeserializer::new(seq))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        Value::deserialize(MapAccessDeserializer::new(map))
    }
}

/// Reads a wire enum from any JSON value (see [`deserialize_enum`]).
struct EnumVisitor<E>(std::marker::PhantomData<E>);

impl<'de, E: WireEnum> Visitor<'de> for EnumVisitor<E> {
    type Value = E;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<E, A::Error> {
        enum_from_map(Vec::new(), map)
    }
    fn visit_bool<Er: de::Error>(self, v: bool) -> Result<E, Er> {
        ValueVisitor.visit_bool(v).map(E::unknown)
    }
    fn visit_i64<Er: de::Error>(self, v: i64) -> Result<E, Er> {
        ValueVisitor.visit_i64(v).map(E::unknown)
    }
    fn visit_u64<Er: de::Error>(self, v: u64) -> Result<E, Er> {
        ValueVisitor.visit_u64(v).map(E::unknown)
    }
    fn visit_f64<Er: de::Error>(self, v: f64) -> Result<E, Er> {
        ValueVisitor.visit_f64(v).map(E::unknown)
    }
    fn visit_str<Er: de::Error>(self, v: &str) -> Result<E, Er> {
        ValueVisitor.visit_str(v).map(E::unknown)
    }
    fn visit_string<Er: de::Error>(self, v: String) -> Result<E, Er> {
        ValueVisitor.visit_string(v).map(E::unknown)
    }
    fn visit_unit<Er: de::Error>(self) -> Result<E, Er> {
        ValueVisitor.visit_unit().map(E::unknown)
    }
    fn visit_none<Er: de::Error>(self) -> Result<E, Er> {
        ValueVisitor.visit_none().map(E::unknown)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<E, D::Error> {
        deserialize_enum(d)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<E, A::Error> {
        ValueVisitor.visit_seq(seq).map(E::unknown)
    }
}

/// The type of a struct field as a wire mode declares it.
macro_rules! wire_field_type {
    (req $ty:ty) => { $ty };
    (opt $ty:ty) => { ::core::option::Option<$ty> };
    (nul $ty:ty) => { ::core::option::Option<$ty> };
}
pub(crate) use wire_field_type;

/// Serializes one field according to its mode.
macro_rules! wire_field_ser {
    ($map:ident, req, $key:literal, $value:expr) => {
        ::serde::ser::SerializeMap::serialize_entry(&mut $map, $key, $value)?;
    };
    ($map:ident, opt, $key:literal, $value:expr) => {
        if let ::core::option::Option::Some(value) = $value {
            ::serde::ser::SerializeMap::serialize_entry(&mut $map, $key, value)?;
        }
    };
    ($map:ident, nul, $key:literal, $value:expr) => {
        ::serde::ser::SerializeMap::serialize_entry(&mut $map, $key, $value)?;
    };
}
pub(crate) use wire_field_ser;

/// Reads one field's value according to its mode into the visitor's slot.
macro_rules! wire_field_de {
    ($map:ident, req, $slot:ident, $ty:ty) => {
        $slot = ::core::option::Option::Some(::serde::de::MapAccess::next_value::<$ty>(&mut $map)?);
    };
    ($map:ident, opt, $slot:ident, $ty:ty) => {
        $slot = ::core::option::Option::Some(::serde::de::MapAccess::next_value::<$ty>(&mut $map)?);
    };
    ($map:ident, nul, $slot:ident, $ty:ty) => {
        $slot = ::core::option::Option::Some(::serde::de::MapAccess::next_value::<
            ::core::option::Option<$ty>,
        >(&mut $map)?);
    };
}
pub(crate) use wire_field_de;

/// Turns the visitor's slot into the field value, or reports a missing required field.
macro_rules! wire_field_finish {
    (req, $slot:ident, $key:literal) => {
        match $slot {
            ::core::option::Option::Some(value) => value,
            ::core::option::Option::None => {
                return ::core::result::Result::Err(::serde::de::Error::missing_field($key))
            }
        }
    };
    (opt, $slot:ident, $key:literal) => {
        $slot
    };
    (nul, $slot:ident, $key:literal) => {
        $slot.flatten()
    };
}
pub(crate) use wire_field_finish;

/// The slot type the visitor fills for one field.
macro_rules! wire_field_slot {
    (req $ty:ty) => { ::core::option::Option<$ty> };
    (opt $ty:ty) => { ::core::option::Option<$ty> };
    (nul $ty:ty) => { ::core::option::Option<::core::option::Option<$ty>> };
}
pub(crate) use wire_field_slot;

/// Declares a wire struct: named fields mapped to JSON keys, every unknown key kept in `extra`.
///
/// Field modes:
/// - `req`: always present; a missing key is a decode error.
/// - `opt`: `Option<T>`; absent reads as `None` and `None` is not written. A present `null`
///   needs `T` itself to accept null (write `opt x: Option<String>` for "absent, null or a
///   string").
/// - `nul`: `Option<T>` that is always written, `null` for `None` (fields the CLI always sends,
///   such as `parent_tool_use_id`).
///
/// `tags { "type" = "user" }` names constant keys written first and skipped when reading
/// (the enum that dispatched here has already checked them).
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident $( tags { $($tag_key:literal = $tag_value:literal),+ $(,)? } )? {
            $(
                $(#[$field_meta:meta])*
                $mode:ident $field:ident : $ty:ty = $key:literal
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Default)]
        $vis struct $name {
            $(
                $(#[$field_meta])*
                pub $field: $crate::wire::wire_field_type!($mode $ty),
            )*
            /// Fields this crate does not name, kept in arrival order.
            pub extra: $crate::wire::Extra,
        }

        impl $name {
            /// The constant tag keys and values this struct writes first.
            #[allow(dead_code)]
            pub const TAGS: &'static [(&'static str, &'static str)] = &[$($(($tag_key, $tag_value)),+)?];
        }

        const _: () = {
            use ::serde::de::{MapAccess, Visitor};

            #[allow(non_camel_case_types, dead_code)]
            enum WireField {
                $($field,)*
                WireTag,
                WireOther(::std::string::String),
            }

            struct WireFieldVisitor;

            impl<'de> Visitor<'de> for WireFieldVisitor {
                type Value = WireField;
                fn expecting(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.write_str("a field name")
                }
                fn visit_str<E: ::serde::de::Error>(self, v: &str) -> ::core::result::Result<WireField, E> {
                    ::core::result::Result::Ok(match v {
                        $($key => WireField::$field,)*
                        $($($tag_key)|+ => WireField::WireTag,)?
                        other => WireField::WireOther(other.to_owned()),
                    })
                }
            }

            impl<'de> ::serde::Deserialize<'de> for WireField {
                fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::core::result::Result<Self, D::Error> {
                    d.deserialize_identifier(WireFieldVisitor)
                }
            }

            struct WireVisitor;

            impl<'de> Visitor<'de> for WireVisitor {
                type Value = $name;
                fn expecting(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.write_str(concat!("a ", stringify!($name), " object"))
                }
                #[allow(unused_mut)]
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> ::core::result::Result<$name, A::Error> {
                    $(let mut $field: $crate::wire::wire_field_slot!($mode $ty) = ::core::option::Option::None;)*
                    let mut extra = $crate::wire::Extra::new();
                    while let ::core::option::Option::Some(key) = map.next_key::<WireField>()? {
                        match key {
                            $(WireField::$field => {
                                if $field.is_some() {
                                    return ::core::result::Result::Err(::serde::de::Error::duplicate_field($key));
                                }
                                $crate::wire::wire_field_de!(map, $mode, $field, $ty);
                            })*
                            WireField::WireTag => {
                                map.next_value::<::serde::de::IgnoredAny>()?;
                            }
                            WireField::WireOther(name) => {
                                let value = map.next_value::<::serde_json::Value>()?;
                                extra.insert(name, value);
                            }
                        }
                    }
                    ::core::result::Result::Ok($name {
                        $($field: $crate::wire::wire_field_finish!($mode, $field, $key),)*
                        extra,
                    })
                }
            }

            impl<'de> ::serde::Deserialize<'de> for $name {
                fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::core::result::Result<Self, D::Error> {
                    d.deserialize_map(WireVisitor)
                }
            }

            impl $crate::wire::WireBody for $name {
                fn from_rest<'de, A: MapAccess<'de>>(
                    mut taken: $crate::wire::Taken,
                    map: A,
                ) -> ::core::result::Result<Self, A::Error> {
                    // The tags are skipped when read: leave them out.
                    taken.retain(|(key, _)| !Self::TAGS.iter().any(|(tag, _)| tag == key));
                    if taken.is_empty() {
                        WireVisitor.visit_map(map)
                    } else {
                        WireVisitor.visit_map($crate::wire::Chain::new(taken, map))
                    }
                }

                fn after_tag<'de, A: MapAccess<'de>>(
                    key: &'static str,
                    tag: &'static str,
                    map: A,
                ) -> ::core::result::Result<Self, A::Error> {
                    if Self::TAGS.iter().any(|(tag_key, _)| *tag_key == key) {
                        WireVisitor.visit_map(map)
                    } else {
                        Self::from_rest(::std::vec![(key.to_owned(), $crate::wire::raw_string(tag))], map)
                    }
                }

                fn from_text(raw: &str) -> ::core::result::Result<Self, ::serde_json::Error> {
                    ::serde_json::from_str(raw)
                }
            }

            impl ::serde::Serialize for $name {
                fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::core::result::Result<S::Ok, S::Error> {
                    let mut map = s.serialize_map(::core::option::Option::None)?;
                    $($(::serde::ser::SerializeMap::serialize_entry(&mut map, $tag_key, $tag_value)?;)+)?
                    $($crate::wire::wire_field_ser!(map, $mode, $key, &self.$field);)*
                    for (key, value) in &self.extra {
                        ::serde::ser::SerializeMap::serialize_entry(&mut map, key, value)?;
                    }
                    ::serde::ser::SerializeMap::end(map)
                }
            }
        };
    };
}
pub(crate) use wire_struct;

/// Declares an enum of wire structs chosen by the string value of one key, plus an `Unknown`
/// variant that keeps any other object whole.
///
/// Reading peeks at the tag in the raw text (see [`peek_tag`]) and parses the chosen variant
/// directly; a known tag whose body does not fit its struct is a decode error naming the tag.
/// After the variants, `; Name(Type)` adds a variant the reader never makes itself: a value
/// of a known tag kept whole (`Type` has a `value` map), which its caller builds from that error.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident by $tag_key:literal {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident($inner:ty) = $tag_value:literal
            ),* $(,)?
            $(
                ;
                $(#[$drift_meta:meta])*
                $drift:ident($drift_ty:ty)
            )?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        $vis enum $name {
            $(
                $(#[$variant_meta])*
                $variant($inner),
            )*
            $(
                $(#[$drift_meta])*
                $drift($drift_ty),
            )?
            /// A value whose tag this crate does not know (or that has none), kept whole.
            Unknown(::serde_json::Value),
        }

        impl $name {
            /// The key whose value picks the variant.
            #[allow(dead_code)]
            pub const TAG_KEY: &'static str = $tag_key;

            /// The tag value of this variant; for `Unknown`, the tag it carried, if any.
            pub fn tag(&self) -> ::core::option::Option<&str> {
                match self {
                    $(Self::$variant(_) => ::core::option::Option::Some($tag_value),)*
                    $(Self::$drift(drift) => drift.value.get($tag_key).and_then(|tag| tag.as_str()),)?
                    Self::Unknown(value) => value.get($tag_key).and_then(|tag| tag.as_str()),
                }
            }

            /// Decodes one JSON object given as text.
            pub fn from_json_str(raw: &str) -> ::core::result::Result<Self, ::serde_json::Error> {
                let tag = $crate::wire::peek_tag(raw, $tag_key);
                match tag.as_deref() {
                    $(::core::option::Option::Some($tag_value) => {
                        <$inner as $crate::wire::WireBody>::from_text(raw).map(Self::$variant).map_err(|error| {
                            <::serde_json::Error as ::serde::de::Error>::custom(format_args!(
                                concat!($tag_key, " {:?}: {}"), $tag_value, error
                            ))
                        })
                    })*
                    _ => ::serde_json::from_str(raw).map(Self::Unknown),
                }
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::core::result::Result<Self, D::Error> {
                $crate::wire::deserialize_enum(d)
            }
        }

        impl $crate::wire::WireEnum for $name {
            const TAG: &'static str = $tag_key;

            fn knows(tag: &str) -> bool {
                matches!(tag, $($tag_value)|*)
            }

            fn variant<'de, A: ::serde::de::MapAccess<'de>>(
                tag: &str,
                taken: ::core::option::Option<$crate::wire::Taken>,
                map: A,
            ) -> ::core::result::Result<Self, A::Error> {
                let read = match tag {
                    $($tag_value => match taken {
                        ::core::option::Option::None => {
                            <$inner as $crate::wire::WireBody>::after_tag($tag_key, $tag_value, map)
                        }
                        ::core::option::Option::Some(taken) => {
                            <$inner as $crate::wire::WireBody>::from_rest(taken, map)
                        }
                    }
                    .map(Self::$variant),)*
                    other => {
                        return ::core::result::Result::Err(::serde::de::Error::custom(format_args!(
                            concat!("no variant of ", stringify!($name), " has ", $tag_key, " {:?}"), other
                        )))
                    }
                };
                read.map_err(|error| $crate::wire::in_variant($tag_key, tag, &error))
            }

            fn unknown(value: ::serde_json::Value) -> Self {
                Self::Unknown(value)
            }
        }

        impl $crate::wire::WireBody for $name {
            fn from_rest<'de, A: ::serde::de::MapAccess<'de>>(
                taken: $crate::wire::Taken,
                map: A,
            ) -> ::core::result::Result<Self, A::Error> {
                $crate::wire::enum_from_map(taken, map)
            }

            fn from_text(raw: &str) -> ::core::result::Result<Self, ::serde_json::Error> {
                Self::from_json_str(raw)
            }
        }

        impl ::core::default::Default for $name {
            /// `Unknown(null)`: a placeholder to overwrite, not a message to send.
            fn default() -> Self {
                Self::Unknown(::serde_json::Value::Null)
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::core::result::Result<S::Ok, S::Error> {
                match self {
                    $(Self::$variant(inner) => inner.serialize(s),)*
                    $(Self::$drift(drift) => drift.value.serialize(s),)?
                    Self::Unknown(value) => value.serialize(s),
                }
            }
        }
    };
}
pub(crate) use wire_enum;

/// `From<Inner>` for the variants of a wire enum whose inner type is unique to them.
macro_rules! wire_from {
    ($name:ident { $($variant:ident($inner:ty)),* $(,)? }) => {$(
        impl ::core::convert::From<$inner> for $name {
            fn from(inner: $inner) -> Self {
                // Into the variant's own type: the body itself, or its box.
                $name::$variant(::core::convert::From::from(inner))
            }
        }
    )*};
}
pub(crate) use wire_from;

/// Declares a string enum with an `Other` variant for values this crate does not know.
/// Mark one variant `#[default]`.
macro_rules! wire_str_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident = $value:literal
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        $vis enum $name {
            $(
                $(#[$variant_meta])*
                $variant,
            )*
            /// A value this crate does not know, kept as sent.
            Other(::std::string::String),
        }

        impl $name {
            /// The value as it appears on the wire.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $value,)*
                    Self::Other(other) => other,
                }
            }

            /// Every value this crate knows, in declaration order.
            #[allow(dead_code)]
            pub const KNOWN: &'static [&'static str] = &[$($value),*];
        }

        impl ::core::str::FromStr for $name {
            type Err = ::core::convert::Infallible;
            fn from_str(value: &str) -> ::core::result::Result<Self, Self::Err> {
                ::core::result::Result::Ok(match value {
                    $($value => Self::$variant,)*
                    other => Self::Other(other.to_owned()),
                })
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::core::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::core::result::Result<Self, D::Error> {
                let value = $crate::wire::KeyStr::deserialize(d)?;
                ::core::result::Result::Ok(match value.0.as_ref() {
                    $($value => Self::$variant,)*
                    other => Self::Other(other.to_owned()),
                })
            }
        }
    };
}
pub(crate) use wire_str_enum;

/// A JSON value kept as its exact text, parsed only when asked (`RawJson::get` gives the text).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct RawJson(pub Box<serde_json::value::RawValue>);

impl RawJson {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// Serializes `value` into raw JSON.
    pub fn from_serialize<T: serde::Serialize>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(RawJson)
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

/// A JSON value that is either a string or an array of something else (`content` fields).
#[derive(Debug, Clone, PartialEq)]
pub enum TextOr<T> {
    /// The plain-string form.
    Text(String),
    /// The structured form.
    Items(Vec<T>),
}

impl<T> Default for TextOr<T> {
    fn default() -> Self {
        TextOr::Text(String::new())
    }
}

impl<T: serde::Serialize> serde::Serialize for TextOr<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TextOr::Text(text) => s.serialize_str(text),
            TextOr::Items(items) => items.serialize(s),
        }
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for TextOr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = TextOr<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(TextOr::Text(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(TextOr::Text(v))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(TextOr::Items(items))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests;
