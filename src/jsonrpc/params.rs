//! The `params` of a call as the phases after the gate see it: members read by name and
//! a few named edits, never the container itself, so how the gate holds a message is
//! its own business (today a parsed tree; the edits would be splices into the client's
//! scanned bytes just as well).
//!
//! Invariant: every change the phases make to a message goes through here: the state
//! replaced by the upstream's plaintext or removed, unasked answers dropped, a handle
//! argument replaced by the upstream's raw handle, an idempotency key stripped. What a
//! member reads as is what the gate checked ([`super::classify`]): no look-alike of a
//! guarded member is beside it.

use serde_json::{Map, Value};

/// The `params` of one call (absent when the message had none).
pub struct Params<'a>(Option<&'a mut Map<String, Value>>);

/// `inputResponses` is there but is not an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAnObject;

impl<'a> Params<'a> {
    pub fn new(params: Option<&'a mut Map<String, Value>>) -> Self {
        Params(params)
    }

    /// A call without `params`.
    pub fn absent() -> Params<'static> {
        Params(None)
    }

    /// Whether the call has a `params` object.
    pub fn is_present(&self) -> bool {
        self.0.is_some()
    }

    /// A member, as the gate checked it.
    pub fn get(&self, member: &str) -> Option<&Value> {
        self.0.as_deref()?.get(member)
    }

    /// A member read by the look-alike rule ([`super::member`]): `None` when it is
    /// absent, or when a sibling reads like it (the gate refuses those at this level;
    /// readers of optional declarations ask this way all the same).
    pub fn member(&self, name: &str) -> Option<&Value> {
        super::member(self.0.as_deref()?, name).ok().flatten()
    }

    /// A member that is a string.
    pub fn get_str(&self, member: &str) -> Option<&str> {
        self.get(member).and_then(Value::as_str)
    }

    /// Replace a member's value (or add the member).
    pub fn set(&mut self, member: &str, value: Value) {
        if let Some(params) = self.0.as_deref_mut() {
            params.insert(member.to_owned(), value);
        }
    }

    /// Remove a member.
    pub fn remove(&mut self, member: &str) -> Option<Value> {
        self.0.as_deref_mut()?.remove(member)
    }

    /// Keep only the `inputResponses` entries whose key `keep` accepts: how many were
    /// dropped (none when there is no `inputResponses`, or it is `null`).
    pub fn retain_answers(
        &mut self,
        mut keep: impl FnMut(&str) -> bool,
    ) -> Result<usize, NotAnObject> {
        match self
            .0
            .as_deref_mut()
            .and_then(|p| p.get_mut("inputResponses"))
        {
            None | Some(Value::Null) => Ok(0),
            Some(Value::Object(answers)) => {
                let before = answers.len();
                answers.retain(|key, _| keep(key));
                Ok(before - answers.len())
            }
            Some(_) => Err(NotAnObject),
        }
    }

    /// Replace the value at `pointer` (RFC 6901) inside `member`; `false` when there is
    /// nothing there.
    pub fn replace_at(&mut self, member: &str, pointer: &str, value: Value) -> bool {
        let found = self
            .0
            .as_deref_mut()
            .and_then(|p| p.get_mut(member))
            .and_then(|m| m.pointer_mut(pointer));
        match found {
            Some(slot) => {
                *slot = value;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn members_are_read_and_edited_by_name() {
        let mut map = object(json!({
            "name": "t",
            "requestState": "v1.x",
            "arguments": {"a": {"b": "h1.sealed"}},
            "inputResponses": {"asked": 1, "unasked": 2},
            "idempotencyKey": "k"
        }));
        let mut params = Params::new(Some(&mut map));
        assert!(params.is_present());
        assert_eq!(params.get_str("name"), Some("t"));
        params.set("requestState", json!("plain"));
        assert_eq!(params.remove("idempotencyKey"), Some(json!("k")));
        assert_eq!(params.retain_answers(|k| k == "asked"), Ok(1));
        assert!(params.replace_at("arguments", "/a/b", json!("raw")));
        assert!(!params.replace_at("arguments", "/a/c", json!("raw")));
        assert_eq!(
            Value::Object(map),
            json!({
                "name": "t",
                "requestState": "plain",
                "arguments": {"a": {"b": "raw"}},
                "inputResponses": {"asked": 1}
            })
        );
    }

    #[test]
    fn answers_that_are_not_an_object_are_told_apart_from_none() {
        let mut map = object(json!({"inputResponses": [1]}));
        assert_eq!(
            Params::new(Some(&mut map)).retain_answers(|_| true),
            Err(NotAnObject)
        );
        let mut map = object(json!({"inputResponses": null}));
        assert_eq!(Params::new(Some(&mut map)).retain_answers(|_| false), Ok(0));
        let mut absent = Params::absent();
        assert!(!absent.is_present());
        assert_eq!(absent.retain_answers(|_| false), Ok(0));
        assert_eq!(absent.get("name"), None);
    }
}
