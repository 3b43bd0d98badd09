//! The claims envelope inside a token: what it binds (method, target, argument digest,
//! request path, audience, principal, expiry) and how it is written and read.
//!
//! Invariant: claims are written exactly as the reference writes them (key order, Python
//! float and string forms), so a token minted here is byte-identical to the SDK's for the
//! same nonce, salt and clock; our own claims (`su`, `ns`, `q`, `u`) come last and only
//! when set. The reference reads only its own claims (`v iat exp m t a s aud p`) and
//! ignores the rest.

use super::canonical::{write_python_float, write_string};

pub(crate) const ENVELOPE_VERSION: u8 = 1;

/// The claims this sidecar mints.
pub(crate) struct MintClaims<'a> {
    pub(crate) iat: f64,
    pub(crate) exp: f64,
    pub(crate) binding: &'a RequestBinding,
    pub(crate) state: StateText<'a>,
    pub(crate) audience: Option<&'a str>,
    pub(crate) principal_claim: Option<PrincipalClaim>,
    pub(crate) single_use: bool,
    pub(crate) no_upstream_state: bool,
    pub(crate) asked: Option<&'a [String]>,
    /// Per asked key, what was asked (`qd`): method, elicitation mode, schema.
    /// As its claim's text, already in the token's encoding.
    pub(crate) questions: Option<&'a str>,
    /// The round number and the flow's start (`n`, `fs`).
    pub(crate) flow: Option<Flow>,
}

/// The upstream's state as the sealer is given it.
#[derive(Debug, Clone, Copy)]
pub enum StateText<'a> {
    /// The plaintext, which the claims write in the reference's spelling.
    Plain(&'a str),
    /// A JSON string token (quotes included) already in the reference's spelling
    /// (`canonical::python_spelled_len` said so): written as it is.
    Spelled(&'a str),
}

impl StateText<'_> {
    fn len_hint(&self) -> usize {
        match self {
            StateText::Plain(state) => state.len() * 9 / 8,
            StateText::Spelled(token) => token.len(),
        }
    }
}

impl<'a> From<&'a str> for StateText<'a> {
    fn from(state: &'a str) -> Self {
        StateText::Plain(state)
    }
}

/// Where a token stands in its multi-round flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flow {
    /// 1 for the first `input_required` answer of a flow.
    pub(crate) round: u32,
    /// Unix seconds when the flow's first round was minted.
    pub(crate) started: f64,
}

impl MintClaims<'_> {
    /// Compact JSON in the reference's key order: `v iat exp m t a s [aud] [p]`, then ours.
    /// A generous estimate of the encoded length (escapes may add a little more).
    pub(crate) fn len_hint(&self) -> usize {
        const FIXED: usize = 160;
        FIXED
            + self.binding.method().len()
            + self.binding.target().len()
            + self.state.len_hint()
            + self.audience.map_or(0, str::len)
            + self.principal_claim.map_or(0, |p| p.as_str().len())
            + self
                .asked
                .map_or(0, |a| a.iter().map(|k| k.len() + 3).sum())
            + self.binding.path().map_or(0, str::len)
            + self.questions.map_or(0, str::len)
    }

    pub(crate) fn encode_into(&self, out: &mut String) {
        out.push_str("{\"v\":");
        // Integers by `itoa` (the digits `Display` writes, without the formatter).
        out.push_str(itoa::Buffer::new().format(ENVELOPE_VERSION));
        out.push_str(",\"iat\":");
        write_python_float(self.iat, out);
        out.push_str(",\"exp\":");
        write_python_float(self.exp, out);
        out.push_str(",\"m\":");
        write_string(self.binding.method(), out);
        out.push_str(",\"t\":");
        write_string(self.binding.target(), out);
        out.push_str(",\"a\":");
        write_string(self.binding.args_digest(), out);
        out.push_str(",\"s\":");
        match self.state {
            StateText::Plain(state) => write_string(state, out),
            StateText::Spelled(token) => out.push_str(token),
        }
        if let Some(aud) = self.audience {
            out.push_str(",\"aud\":");
            write_string(aud, out);
        }
        if let Some(p) = &self.principal_claim {
            out.push_str(",\"p\":");
            write_string(p.as_str(), out);
        }
        if self.single_use {
            out.push_str(",\"su\":true");
        }
        if self.no_upstream_state {
            out.push_str(",\"ns\":true");
        }
        if let Some(asked) = self.asked {
            // As `write_python_json` writes a list of strings, without building one.
            out.push_str(",\"q\":[");
            for (i, key) in asked.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
            }
            out.push(']');
        }
        if let Some(path) = self.binding.path() {
            out.push_str(",\"u\":");
            write_string(path, out);
        }
        if let Some(questions) = self.questions {
            out.push_str(",\"qd\":");
            out.push_str(questions);
        }
        if let Some(flow) = self.flow {
            out.push_str(",\"n\":");
            out.push_str(itoa::Buffer::new().format(flow.round));
            out.push_str(",\"fs\":");
            write_python_float(flow.started, out);
        }
        out.push('}');
    }
}

pub(crate) mod binding;
mod opened;
mod principal;

use binding::RequestBinding;

pub(crate) use opened::OpenedClaims;
pub use opened::Questions;
pub(crate) use principal::{PrincipalClaim, PrincipalMemo, principal_claim, principal_matches};

#[cfg(test)]
mod tests {
    use super::super::canonical::write_python_json;
    use super::*;
    use binding::{BindingError, args_digest};
    use serde_json::{Map, Value, json};

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn empty_and_falsy_arguments_digest_as_empty_object() {
        let empty = args_digest::<Value>(None).unwrap();
        // base64url(sha256(b"{}")[:16]), as the reference computes it.
        assert_eq!(empty, "RBNvo1WzZ4oRRq0W9-hkng");
        for falsy in [
            json!(null),
            json!(false),
            json!(0),
            json!(0.0),
            json!(""),
            json!([]),
            json!({}),
        ] {
            let b = RequestBinding::of(
                "tools/call",
                Some(&params(json!({"name":"x","arguments":falsy}))),
            )
            .unwrap();
            assert_eq!(b.args_digest(), empty, "falsy {falsy}");
        }
        let b = RequestBinding::of(
            "tools/call",
            Some(&params(json!({"name":"x","arguments":[0]}))),
        )
        .unwrap();
        assert_ne!(b.args_digest(), empty);
    }

    #[test]
    fn resources_bind_the_uri_and_ignore_arguments() {
        let b = RequestBinding::of(
            "resources/read",
            Some(&params(
                json!({"uri":"config://prod","name":"ignored","arguments":{"a":1}}),
            )),
        )
        .unwrap();
        assert_eq!(b.target(), "config://prod");
        assert_eq!(b.args_digest(), args_digest::<Value>(None).unwrap());
    }

    #[test]
    fn non_string_targets_are_refused() {
        for bad in [json!(null), json!(1), json!(["x"])] {
            assert_eq!(
                RequestBinding::of("tools/call", Some(&params(json!({"name": bad})))),
                Err(BindingError::NonStringTarget("name"))
            );
        }
        let absent = RequestBinding::of("tools/list", None).unwrap();
        assert_eq!(absent.target(), "");
    }

    #[test]
    fn argument_digest_ignores_key_order_but_not_values() {
        let a = args_digest(Some(&json!({"b":1,"a":[1,2]}))).unwrap();
        let b = args_digest(Some(&json!({"a":[1,2],"b":1}))).unwrap();
        let c = args_digest(Some(&json!({"a":[2,1],"b":1}))).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 22);
    }

    #[test]
    fn encode_matches_reference_layout() {
        let binding = RequestBinding::of(
            "tools/call",
            Some(&params(
                json!({"name":"provision","arguments":{"name":"web-1"}}),
            )),
        )
        .unwrap();
        let claims = MintClaims {
            iat: 1_800_000_000.0,
            exp: 1_800_000_600.0,
            binding: &binding,
            state: "{\"tier\":\"free\",\"é\":1}".into(),
            audience: Some("svc"),
            principal_claim: None,
            single_use: true,
            no_upstream_state: false,
            asked: Some(&["region".to_owned()]),
            questions: None,
            flow: None,
        };
        let mut text = String::new();
        claims.encode_into(&mut text);
        assert_eq!(
            text,
            format!(
                r#"{{"v":1,"iat":1800000000.0,"exp":1800000600.0,"m":"tools/call","t":"provision","a":"{}","s":"{{\"tier\":\"free\",\"\u00e9\":1}}","aud":"svc","su":true,"q":["region"]}}"#,
                binding.args_digest()
            )
        );
        // A state given as a token already so spelled is written as it is: the same claims.
        let spelled = MintClaims {
            state: StateText::Spelled(r#""{\"tier\":\"free\",\"\u00e9\":1}""#),
            ..claims
        };
        let mut again = String::new();
        spelled.encode_into(&mut again);
        assert_eq!(again, text);
        let opened = OpenedClaims::decode(text.as_bytes()).unwrap();
        // The state as the claims spell it, and as it reads.
        assert_eq!(opened.s, r#""{\"tier\":\"free\",\"\u00e9\":1}""#);
        let state: String = serde_json::from_str(opened.s).unwrap();
        assert_eq!(state, "{\"tier\":\"free\",\"é\":1}");
        assert!(opened.su);
        assert_eq!(opened.q, Some(vec!["region".to_owned()]));
    }

    #[test]
    fn asked_keys_are_written_as_the_reference_writes_the_list() {
        let binding = RequestBinding::of("tools/call", None).unwrap();
        for asked in [
            vec![],
            vec!["a".to_owned()],
            vec!["b\"\\".into(), "\u{e9}\u{1F600}".into(), String::new()],
        ] {
            let claims = MintClaims {
                iat: 1.0,
                exp: 2.0,
                binding: &binding,
                state: "".into(),
                audience: None,
                principal_claim: None,
                single_use: false,
                no_upstream_state: false,
                asked: Some(&asked),
                questions: None,
                flow: None,
            };
            let mut text = String::new();
            claims.encode_into(&mut text);
            let mut list = String::new();
            let tree = Value::Array(asked.iter().cloned().map(Value::String).collect());
            write_python_json(&tree, false, &mut list).unwrap();
            assert!(text.ends_with(&format!(",\"q\":{list}}}")), "{text}");
            let opened = OpenedClaims::decode(text.as_bytes()).unwrap();
            assert_eq!(opened.q, Some(asked));
        }
    }

    #[test]
    fn path_claim_comes_last_and_escapes_like_the_reference() {
        let binding = RequestBinding::of("tools/list", None)
            .unwrap()
            .at_path("/t%2F1/a\"b\\c/\u{e9}");
        let claims = MintClaims {
            iat: 1_800_000_000.0,
            exp: 1_800_000_600.0,
            binding: &binding,
            state: "x".into(),
            audience: Some("svc"),
            principal_claim: Some(principal_claim("alice", [0; 8])),
            single_use: true,
            no_upstream_state: false,
            asked: None,
            questions: None,
            flow: None,
        };
        let mut text = String::new();
        claims.encode_into(&mut text);
        let p = principal_claim("alice", [0; 8]);
        assert!(
            text.ends_with(&format!(
                r#","aud":"svc","p":"{}","su":true,"u":"/t%2F1/a\"b\\c/\u00e9"}}"#,
                p.as_str()
            )),
            "{text}"
        );
        assert!(text.len() <= claims.len_hint());
        let opened = OpenedClaims::decode(text.as_bytes()).unwrap();
        assert_eq!(opened.u.as_deref(), binding.path());
        // Without a path there is no claim: the reference's layout, byte for byte.
        let bare = RequestBinding::of("tools/list", None).unwrap();
        let mut text = String::new();
        MintClaims {
            binding: &bare,
            ..claims
        }
        .encode_into(&mut text);
        assert!(!text.contains("\"u\""), "{text}");
    }

    #[test]
    fn path_claim_must_be_a_string() {
        let base = r#"{"v":1,"iat":1,"exp":2,"s":"x""#;
        let parse = |u: &str| {
            OpenedClaims::decode(format!("{base}{u}}}").as_bytes())
                .map(|c| c.u.map(std::borrow::Cow::into_owned))
        };
        assert_eq!(parse(""), Some(None));
        assert_eq!(parse(r#","u":"/a""#), Some(Some("/a".to_owned())));
        assert_eq!(parse(r#","u":"/a\"b""#), Some(Some("/a\"b".to_owned())));
        for bad in [
            r#","u":null"#,
            r#","u":1"#,
            r#","u":[]"#,
            r#","u":{}"#,
            r#","u":false"#,
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        // A repeated claim is refused rather than resolved one way or the other.
        assert_eq!(parse(r#","u":"/a","u":"/b""#), None);
    }

    #[test]
    fn decode_refuses_wrong_version_and_missing_fields() {
        assert!(OpenedClaims::decode(br#"{"v":2,"iat":1,"exp":2,"s":"x"}"#).is_none());
        assert!(OpenedClaims::decode(br#"{"v":1,"iat":1,"exp":2}"#).is_none());
        assert!(OpenedClaims::decode(br#"{"v":1,"iat":1,"exp":2,"s":5}"#).is_none());
        assert!(OpenedClaims::decode(br#"{"v":1,"iat":"1","exp":2,"s":"x"}"#).is_none());
        assert!(OpenedClaims::decode(b"not json").is_none());
        // A state is a string the strict scan reads: not null, an object, a lone
        // surrogate (which unescaping the state refused, before it was kept as a token).
        for state in [
            r#"null"#,
            r#"{}"#,
            r#""\ud800""#,
            r#""\udc00x""#,
            r#""a\ud800\u0041""#,
        ] {
            let claims = format!(r#"{{"v":1,"iat":1,"exp":2,"s":{state}}}"#);
            assert!(OpenedClaims::decode(claims.as_bytes()).is_none(), "{state}");
        }
        assert!(OpenedClaims::decode(br#"{"v":1,"iat":1,"exp":2,"s":"x"}"#).is_some());
        let pair = OpenedClaims::decode(br#"{"v":1,"iat":1,"exp":2,"s":"\ud83d\ude00"}"#);
        assert_eq!(pair.unwrap().s, r#""\ud83d\ude00""#);
    }
}
