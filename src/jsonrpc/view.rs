//! One reading of a JSON value, whatever holds it: a `serde_json` tree (what an edit
//! leaves, what the oracles build) or a [`LiteJson`](super::LiteJson) read from the text
//! it stands in (a retry's answers, a token's recorded questions, the declared
//! capabilities, a call's arguments). The rules that read them (the answers' rules, the
//! capability paths, the look-alike rule, the arguments' canonical form) are written
//! once against [`JsonView`], so both hold them alike.
//!
//! Invariant: on the same JSON text, a `Value` from the strict parse and a `LiteJson`
//! answer every question of [`JsonView`] the same way, but for the spelling of a number's
//! literal (the `scan` fuzz target holds the two readings of every scanned span to each
//! other, the `answers` target the two readings of a retry's answers to one verdict).

use super::{ParseError, fold, folds_equal, printable};
use serde_json::Value;

/// A JSON value, read: numbers as `serde_json` with `arbitrary_precision` reads them
/// (from their literal), objects by exact key.
pub trait JsonView: Sized {
    /// The string, if it is one.
    fn as_str(&self) -> Option<&str>;
    /// The boolean, if it is one.
    fn as_bool(&self) -> Option<bool>;
    /// The number's literal, if it is a number: as the text spells it (`LiteJson`), or as
    /// serde_json keeps it (`Value`, which respells an exponent: `1E3` is `1e+3`). Every
    /// reader parses it; none compares the spelling.
    fn number_literal(&self) -> Option<&str>;
    /// Whether it is `null`.
    fn is_null(&self) -> bool;
    /// The items, if it is an array.
    fn as_array(&self) -> Option<&[Self]>;
    /// The members, if it is an object: keys in the text's order.
    fn entries(&self) -> Option<impl Iterator<Item = (&str, &Self)>>;
    /// The member spelled exactly `name`, if it is an object that holds one.
    fn get(&self, name: &str) -> Option<&Self>;

    /// The number as a finite `f64`, if it is a number that reads as one.
    fn as_f64(&self) -> Option<f64> {
        (self.number_literal()?.parse::<f64>().ok()).filter(|float| float.is_finite())
    }
    /// The number as a `u64`, if its literal is one.
    fn as_u64(&self) -> Option<u64> {
        self.number_literal()?.parse().ok()
    }
    /// Whether it is a number.
    fn is_number(&self) -> bool {
        self.number_literal().is_some()
    }
    /// Whether it is a string.
    fn is_string(&self) -> bool {
        self.as_str().is_some()
    }
    /// Whether it is a boolean.
    fn is_boolean(&self) -> bool {
        self.as_bool().is_some()
    }
    /// Whether it is an object.
    fn is_object(&self) -> bool {
        self.entries().is_some()
    }
}

impl JsonView for Value {
    fn as_str(&self) -> Option<&str> {
        Value::as_str(self)
    }
    fn as_bool(&self) -> Option<bool> {
        Value::as_bool(self)
    }
    fn number_literal(&self) -> Option<&str> {
        // With `arbitrary_precision`, a number keeps the literal it was read from.
        Value::as_number(self).map(serde_json::Number::as_str)
    }
    fn is_null(&self) -> bool {
        Value::is_null(self)
    }
    fn as_array(&self) -> Option<&[Value]> {
        Value::as_array(self).map(Vec::as_slice)
    }
    fn entries(&self) -> Option<impl Iterator<Item = (&str, &Value)>> {
        Value::as_object(self).map(|object| object.iter().map(|(k, v)| (k.as_str(), v)))
    }
    fn get(&self, name: &str) -> Option<&Value> {
        Value::as_object(self)?.get(name)
    }
}

/// The member `name` of `object`, or `None` when it is there in no spelling (or `object`
/// is no object). Refused (as [`ParseError::AmbiguousKey`], naming the look-alike
/// printable) when another key folds to `name`, whether or not `name` itself is there.
pub(crate) fn member<'v, V: JsonView>(
    object: &'v V,
    name: &str,
) -> Result<Option<&'v V>, ParseError> {
    if let Some(entries) = object.entries() {
        look_alike(entries.map(|(key, _)| key), name)?;
    }
    Ok(object.get(name))
}

/// Refused when a key other than `name` folds to it.
fn look_alike<'k>(mut keys: impl Iterator<Item = &'k str>, name: &str) -> Result<(), ParseError> {
    // Compared as they fold, character by character: nothing is built per key (this
    // runs for every name read, at every level of every path).
    match keys.find(|key| *key != name && folds_equal(key, name)) {
        Some(key) => Err(ParseError::AmbiguousKey(printable(key))),
        None => Ok(()),
    }
}

/// Refuse an object in which two keys fold together, for one whose every member is read
/// (accepted form content): each is read by the rule of [`member`].
pub(crate) fn distinct<V: JsonView>(object: &V) -> Result<(), ParseError> {
    if !object.is_object() {
        return Ok(());
    }
    distinct_keys(|| object.entries().into_iter().flatten().map(|(key, _)| key))
}

/// Up to this many keys, they are compared pair by pair as they fold (nothing built);
/// past it, each folded key goes into a set.
const PAIRWISE_FOLDS: usize = 8;

/// No two of the keys `keys()` goes over fold together; the later one of a pair is
/// named.
fn distinct_keys<'k, I: Iterator<Item = &'k str>>(keys: impl Fn() -> I) -> Result<(), ParseError> {
    if keys().nth(PAIRWISE_FOLDS).is_none() {
        for (i, key) in keys().enumerate() {
            if keys().take(i).any(|earlier| folds_equal(earlier, key)) {
                return Err(ParseError::AmbiguousKey(printable(key)));
            }
        }
        return Ok(());
    }
    let mut seen = std::collections::HashSet::new();
    for key in keys() {
        if !seen.insert(fold(key)) {
            return Err(ParseError::AmbiguousKey(printable(key)));
        }
    }
    Ok(())
}
