//! A few thousand bodies made from valid MCP messages by a small deterministic generator:
//! bytes flipped, inserted and deleted; JSON fragments spliced in (duplicate and escaped
//! keys, look-alikes, `__proto__`, lone surrogates, serde_json's number token); keys
//! re-spelled with escapes; whole bodies nested to around serde_json's depth limit. Each
//! goes through [`agree`] without a cap, at exactly its number of values, one below and
//! at a random cap below.
use super::agree;
use crate::jsonrpc::strict::NUMBER_TOKEN;
use crate::jsonrpc::{ParseError, parse_bounded};
use serde_json::Value;

const SEEDS: &[&str] = &[
    r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search","arguments":{"q":"rust","limit":10,"tags":["a","b"],"deep":{"x":[1,2.5,-3e2,null,true]}},"requestState":"eyJ2IjoxLCJrIjoiazEiLCJzIjoiQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBIn0","inputResponses":{"confirm":{"action":"accept","content":{"ok":true}}},"_meta":{"progressToken":"p1","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{},"url":{}},"sampling":{"tools":{}},"roots":{"listChanged":true}}},"idempotencyKey":"k-1"}}"#,
    r#"{"jsonrpc":"2.0","id":"r-1","result":{"resultType":"input_required","inputRequests":{"confirm":{"method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}}}}"#,
    r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"bad","data":{"resultType":"x","why":[1,2]}}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"\u00e9t\u00e9 \ud834\udd1e"}}"#,
    r#"{"jsonrpc":"2.0","id":null,"method":"resources/read","params":{"uri":"file:///a\/b","taskId":"t1"}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2026-07-28","capabilities":{},"clientInfo":{"name":"c","version":"1.0"}}}"#,
    r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
    r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}],"isError":false}}"#,
];

/// Members worth adding to an object (after its `{`).
const MEMBERS: &[&str] = &[
    r#""a":1,"#,
    r#""jsonrpc":"2.0","#,
    r#""id":[],"#,
    r#""id":{"$serde_json::private::Number":"-0"},"#,
    r#""method":1,"#,
    r#""params":5,"#,
    r#""result":{},"#,
    r#""requestState":"x","#,
    r#""uri":7,"#,
    r#""name":{},"#,
    r#""inputResponses":{"é":1},"#,
    r#""data":{"requestState":1},"#,
    r#""io.modelcontextprotocol/clientCapabilities":{"sampling":{"tools":1,"TOOLS":2}},"#,
    r#""elicitation":{"Form":{}},"#,
    r#""roots":{},"#,
    r#""Roots":{},"#,
    r#""a":2,"#,
    r#""q":1,"q":2,"#,
    r#""__proto__":1,"#,
    r#""k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":0,"k11":1,"k12":2,"k13":3,"k14":4,"k15":5,"k16":6,"k1":0,"#,
];

/// Fragments worth splicing in anywhere.
const FRAGMENTS: &[&str] = &[
    r#""a":1,"#,
    r#""name":"x","#,
    r#""n\u0061me":"y","#,
    r#""Name":1,"#,
    r#""request_state":"s","#,
    r#""requestState":"s","#,
    r#""__proto__":{},"#,
    r#""__pr\u006fto__":1,"#,
    r#""ſ":1,"#,
    r#""\u017f":1,"#,
    r#""regıon":1,"#,
    r#""ELICITATION":{},"#,
    r#""Tools":{},"#,
    r#""_Meta":{},"#,
    r#"{"$serde_json::private::Number":"12"}"#,
    r#"{"$serde_json::private::Number":"1E5"}"#,
    r#"{"$serde_json::private::Number":1}"#,
    r#""$serde_json::private::Number":"#,
    "\\ud800",
    "\\udc00",
    "\\ud834\\udd1e",
    "\\u0000",
    "\\",
    "\"",
    "1e999",
    "-0",
    "01",
    "1.",
    ",",
    ":",
    "[",
    "]",
    "{",
    "}",
    "[[[[",
    " \t\r\n",
    "\u{c}",
    "null",
    "tru",
    "é",
    "\u{feff}",
];

/// Single bytes worth writing over another.
const BYTES: &[u8] = b"{}[]\":,\\ u0123456789aAeE+-.tfnx_\t\n\x00\x1f\x7f\xc3\xa9\xff\xed";

/// xorshift64*: the same bodies on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, body: &mut Vec<u8>) {
    let at = rng.below(body.len() + 1);
    match rng.below(10) {
        0 if at < body.len() => body[at] = BYTES[rng.below(BYTES.len())],
        1 => {
            let fragment = FRAGMENTS[rng.below(FRAGMENTS.len())].as_bytes();
            body.splice(at..at, fragment.iter().copied());
        }
        2 => {
            let end = (at + 1 + rng.below(4)).min(body.len());
            body.drain(at.min(end)..end);
        }
        3 => {
            // Copy a stretch elsewhere: members and values turn up twice.
            let len = 1 + rng.below(24);
            let from = rng.below(body.len());
            let piece = body[from..(from + len).min(body.len())].to_vec();
            let to = rng.below(body.len() + 1);
            body.splice(to..to, piece);
        }
        4 => {
            // Re-spell a letter as an escape: the same key inside a string.
            if let Some(i) = (at..body.len()).find(|&i| body[i].is_ascii_alphabetic()) {
                let escape = format!("\\u{:04x}", body[i]);
                body.splice(i..=i, escape.bytes());
            }
        }
        5 => {
            if let Some(i) = (at..body.len()).find(|&i| body[i].is_ascii_alphabetic()) {
                body[i] ^= 0x20;
            }
        }
        6 => {
            let (open, close): (&[u8], &[u8]) = match rng.below(2) {
                0 => (b"[", b"]"),
                _ => (b"{\"k\":", b"}"),
            };
            let levels = 124 + rng.below(6);
            let mut nested = open.repeat(levels);
            nested.append(body);
            nested.extend(close.repeat(levels));
            *body = nested;
        }
        7 | 8 => {
            // A member after some object's `{`: duplicates, look-alikes, wrong shapes.
            let opens: Vec<usize> = (0..body.len()).filter(|&i| body[i] == b'{').collect();
            if !opens.is_empty() {
                let at = opens[rng.below(opens.len())] + 1;
                let member = MEMBERS[rng.below(MEMBERS.len())].as_bytes();
                body.splice(at..at, member.iter().copied());
            }
        }
        _ => {
            let fragment = FRAGMENTS[rng.below(FRAGMENTS.len())].as_bytes();
            let end = (at + fragment.len()).min(body.len());
            body.splice(at..end, fragment.iter().copied());
        }
    }
}

/// Every scalar, array and object, as `parse_bounded` counts them.
fn count(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(members) => members.values().map(count).sum(),
        _ => 0,
    }
}

#[test]
fn generated_bodies_get_the_trees_verdict() {
    let mut rng = Rng(0x5eed_cafe_f00d_d00d);
    let mut verdicts = std::collections::BTreeMap::new();
    for round in 0..8000 {
        let mut body = SEEDS[round % SEEDS.len()].as_bytes().to_vec();
        for _ in 0..1 + rng.below(2) {
            mutate(&mut rng, &mut body);
        }
        let verdict = agree(&body, usize::MAX);
        // The tree counts serde_json's number stand-in as one number: its count says
        // nothing of a body the scanner refuses for it.
        let stand_in = Err(ParseError::AmbiguousKey(NUMBER_TOKEN.into()));
        if let Ok(value) = parse_bounded(&body, usize::MAX)
            && verdict != stand_in
        {
            // Exactly its values pass; one fewer, or any cap below, refuses the body.
            let n = count(&value);
            assert_eq!(agree(&body, n), verdict);
            let too_many = Err(ParseError::TooManyValues);
            assert_eq!(agree(&body, n - 1), too_many);
            assert_eq!(agree(&body, rng.below(n)), too_many);
        }
        let label = verdict.map_or_else(|e| e.label(), |_| "accepted");
        *verdicts.entry(label).or_insert(0) += 1;
    }
    // The generator reaches every kind of verdict, not just syntax errors.
    for label in [
        "accepted",
        "syntax",
        "duplicate_key",
        "ambiguous_key",
        "non_ascii_key",
        "batch",
        "not_a_message",
        "envelope",
        "params",
    ] {
        assert!(
            verdicts.get(label).is_some_and(|n| *n > 5),
            "{label}: {verdicts:?}"
        );
    }
}
