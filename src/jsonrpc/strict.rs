//! The tree path: one JSON value parsed by serde_json into a `Value`, strictly (no
//! duplicate key, no key a lenient upstream reads as something else) and within a cap on
//! the values it builds. The scanner ([`mod@super::scan`]) must reach its verdicts.

use super::{ParseError, scan};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::cell::Cell;
use std::fmt;

/// Parse one JSON value, refusing duplicate keys at any depth (numbers keep their literal
/// digits; an exponent is written `e+`) and a body that holds more than `max_values`
/// JSON values (every scalar, array and object counts, keys do not).
///
/// A byte limit does not bound memory: each `0,` of an array becomes a `Value` plus the
/// `String` its arbitrary-precision number keeps, so 4 MiB of zeros parse into ~216 MB.
/// Values are counted as they start, so building stops at the first one over the cap;
/// the rest is only read by a syntax pass that builds nothing (below).
pub fn parse_bounded(bytes: &[u8], max_values: usize) -> Result<Value, ParseError> {
    scan::refuse_bom(bytes)?;
    let strict = Strict {
        left: Cell::new(max_values),
        refusal: Cell::new(None),
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    // serde_json's own errors (syntax, depth) carry no refusal; ours say why they failed.
    // A refusal stops the parse where it stands, but a body that is not JSON further on
    // is still a parse error (-32700, as JSON-RPC asks), whatever came first: a syntax
    // pass that builds nothing ([`Syntax`]) decides, so the cap's bound on memory holds.
    let value =
        StrictSeed(&strict)
            .deserialize(&mut de)
            .map_err(|_| match strict.refusal.get() {
                Some(refusal) if is_json(bytes) => refusal.error(),
                _ => ParseError::Syntax,
            })?;
    de.end().map_err(|_| ParseError::Syntax)?;
    Ok(value)
}

/// Whether `bytes` are one JSON value, checked without building it.
fn is_json(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Syntax>(bytes).is_ok()
}

/// A JSON value read through serde_json's full parse and nothing kept: the same depth
/// limit, UTF-8 and escape checks (a lone surrogate) as the strict parse, so a body gets
/// the same verdict on its syntax whether or not a refusal came first. (`IgnoredAny`
/// would skip: no depth limit, strings unchecked.)
struct Syntax;

impl<'de> de::Deserialize<'de> for Syntax {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Syntax)
    }
}

impl<'de> Visitor<'de> for Syntax {
    type Value = Syntax;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Syntax, E> {
        Ok(Syntax)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Syntax, E> {
        Ok(Syntax)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Syntax, E> {
        Ok(Syntax)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Syntax, E> {
        Ok(Syntax)
    }

    fn visit_str<E>(self, _: &str) -> Result<Syntax, E> {
        Ok(Syntax)
    }

    fn visit_unit<E>(self) -> Result<Syntax, E> {
        Ok(Syntax)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Syntax, A::Error> {
        while seq.next_element::<Syntax>()?.is_some() {}
        Ok(Syntax)
    }

    /// An object, or an arbitrary-precision number (serde_json's one-entry map).
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Syntax, A::Error> {
        while map.next_entry::<Syntax, Syntax>()?.is_some() {}
        Ok(Syntax)
    }
}

/// JavaScript's `JSON.parse` keeps `__proto__` as an own key, but an upstream that copies
/// params by assignment (`Object.assign`, deep merges) turns it into the prototype, so
/// `{"__proto__":{"requestState":..}}` reads as a requestState the gate never saw.
pub(super) const PROTO_KEY: &str = "__proto__";
/// The key serde_json uses to smuggle an arbitrary-precision number through a map. The
/// tree path reads an object with it as its first key as the number its string spells;
/// the scanner refuses the key wherever it is ([`scan`](mod@scan)).
pub(super) const NUMBER_TOKEN: &str = "$serde_json::private::Number";
/// The key serde_json uses to carry a raw value through a map. With its `raw_value`
/// feature (this crate's, and any Rust upstream's that enables it), a `Value` read from
/// an object with it as its first key is the JSON its string spells, not the object:
/// `{"$serde_json::private::RawValue":"{\"requestState\":\"..\"}"}` is a state to
/// such a reader and an object of one odd key to every other. Refused wherever it is,
/// by the scanner and the tree path alike (found by the `gate` fuzz target).
pub(super) const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// What the strict visitor refused, recorded beside serde's error (which can only carry
/// text) so the caller gets the variant without matching on messages.
#[derive(Debug, Clone, Copy)]
pub(super) enum StrictRefusal {
    DuplicateKey,
    Proto,
    /// Only the scanner can tell the key from a number ([`NUMBER_TOKEN`]).
    NumberToken,
    RawValueToken,
    TooManyValues,
}

impl StrictRefusal {
    /// The refusal of a key that the scanner and the light reader refuse wherever it
    /// stands, whatever its value (`__proto__` and serde_json's two stand-in keys);
    /// `None` for any other key. (The tree path reads the number stand-in as serde_json
    /// hands it over, first in its object only: see [`NUMBER_TOKEN`].)
    #[inline(always)]
    pub(super) fn of_key(key: &str) -> Option<Self> {
        match key {
            PROTO_KEY => Some(StrictRefusal::Proto),
            NUMBER_TOKEN => Some(StrictRefusal::NumberToken),
            RAW_VALUE_TOKEN => Some(StrictRefusal::RawValueToken),
            _ => None,
        }
    }

    pub(super) fn error(self) -> ParseError {
        match self {
            StrictRefusal::DuplicateKey => ParseError::DuplicateKey,
            StrictRefusal::Proto => ParseError::AmbiguousKey(PROTO_KEY.into()),
            StrictRefusal::NumberToken => ParseError::AmbiguousKey(NUMBER_TOKEN.into()),
            StrictRefusal::RawValueToken => ParseError::AmbiguousKey(RAW_VALUE_TOKEN.into()),
            StrictRefusal::TooManyValues => ParseError::TooManyValues,
        }
    }
}

/// State shared by every level of one strict parse.
struct Strict {
    /// Values that may still start.
    left: Cell<usize>,
    refusal: Cell<Option<StrictRefusal>>,
}

impl Strict {
    fn refuse<E: de::Error>(&self, refusal: StrictRefusal) -> E {
        self.refusal.set(Some(refusal));
        E::custom(format_args!("{refusal:?}"))
    }
}

/// One JSON value: every value of the document, at any depth, starts here (keys and the
/// literal inside an arbitrary-precision number do not), which is what makes it the one
/// place to count.
struct StrictSeed<'a>(&'a Strict);

impl<'de> DeserializeSeed<'de> for StrictSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self.0.left.get().checked_sub(1) {
            Some(left) => self.0.left.set(left),
            None => return Err(self.0.refuse(StrictRefusal::TooManyValues)),
        }
        d.deserialize_any(StrictVisitor(self.0))
    }
}

struct StrictVisitor<'a>(&'a Strict);

impl<'de> Visitor<'de> for StrictVisitor<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(StrictSeed(self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            if first && key == NUMBER_TOKEN {
                // An arbitrary-precision number, not an object: keep the literal. It was
                // counted once, as the value this map stands for.
                let literal: String = map.next_value()?;
                return literal
                    .parse::<Number>()
                    .map(Value::Number)
                    .map_err(de::Error::custom);
            }
            first = false;
            if key == PROTO_KEY {
                return Err(self.0.refuse(StrictRefusal::Proto));
            }
            if key == RAW_VALUE_TOKEN {
                return Err(self.0.refuse(StrictRefusal::RawValueToken));
            }
            let value = map.next_value_seed(StrictSeed(self.0))?;
            if object.insert(key, value).is_some() {
                return Err(self.0.refuse(StrictRefusal::DuplicateKey));
            }
        }
        Ok(Value::Object(object))
    }
}
