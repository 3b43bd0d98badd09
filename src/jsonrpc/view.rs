//! One reading of a JSON value, whatever holds it: a `serde_json` tree (what an edit
//! leaves, what the oracles build) or a [`LiteJson`](super::LiteJson) read from the text it stands in
//! (a retry's answers, a token's recorded questions). The rules that read answers are
//! written once against [`JsonView`], so both hold them alike.
//!
//! Invariant: on the same JSON text, a `Value` from the strict parse and a `LiteJson`
//! answer every question of [`JsonView`] the same way (the `answers` fuzz target holds
//! the two readings of a retry's answers to one verdict).

use super::{ParseError, fold, folds_equal, printable};
use serde_json::Value;

/// A JSON value, read: numbers as `serde_json` with `arbitrary_precision` reads them
/// (from their literal text), objects by exact key.
pub trait JsonView: Sized {
    /// The string, if it is one.
    fn as_str(&self) -> Option<&str>;
    /// The boolean, if it is one.
    fn as_bool(&self) -> Option<bool>;
    /// The number's literal, as the text spells it, if it is a number.
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
const PAIRWISE_KEYS: usize = 8;

/// No two of the keys `keys()` goes over fold together; the later one of a pair is
/// named.
fn distinct_keys<'k, I: Iterator<Item = &'k str>>(keys: impl Fn() -> I) -> Result<(), ParseError> {
    if keys().nth(PAIRWISE_KEYS).is_none() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::{LiteArena, LiteJson};
    use serde_json::json;

    fn ambiguous(key: &str) -> ParseError {
        ParseError::AmbiguousKey(key.into())
    }

    /// Pair by pair or through the set (past eight keys), over a tree or over the text:
    /// the later key of a pair that folds together is named.
    #[test]
    fn keys_that_fold_together_are_not_distinct() {
        let check = |value: Value| {
            let text = value.to_string();
            let verdict = distinct(&value);
            let arena = LiteArena::new();
            assert_eq!(distinct(&LiteJson::read(&text, &arena).unwrap()), verdict);
            verdict
        };
        assert_eq!(check(json!({"region": 1, "name": 2})), Ok(()));
        assert_eq!(
            check(json!({"region": 1, "Region": 2})),
            Err(ambiguous("Region"))
        );
        assert_eq!(
            check(json!({"first_name": 1, "firstName": 2})),
            Err(ambiguous("firstName"))
        );
        let mut many: serde_json::Map<String, Value> =
            (0..12).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(check(Value::Object(many.clone())), Ok(()));
        many.insert("K_7".into(), json!(0));
        assert_eq!(check(Value::Object(many)), Err(ambiguous("K_7")));
        assert_eq!(check(json!([1, 1])), Ok(()));
    }

    #[test]
    fn a_member_is_read_only_without_a_look_alike() {
        let value = json!({"action": "accept", "content": 1});
        assert_eq!(member(&value, "action"), Ok(Some(&json!("accept"))));
        assert_eq!(member(&value, "model"), Ok(None));
        let value = json!({"action": "accept", "ACTION": "decline"});
        assert_eq!(member(&value, "action"), Err(ambiguous("ACTION")));
        let text = value.to_string();
        let arena = LiteArena::new();
        let lite = LiteJson::read(&text, &arena).unwrap();
        assert_eq!(member(&lite, "action"), Err(ambiguous("ACTION")));
        assert_eq!(member(&json!("s"), "action"), Ok(None));
    }
}
