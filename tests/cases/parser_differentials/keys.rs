//! Keys a parser could read as another: the same key twice, at every level and through
//! escapes (Python keeps the last); spellings a lenient parser takes (pydantic by name or
//! alias, case folding); Unicode look-alikes that other parsers fold to a guarded name.

use super::{Row, arguments, envelope, invalid_request, params, parse_error, retry, row};

/// `anon`: a token minted for `BASE`, as JSON.
pub(super) fn rows(anon: &str) -> Vec<Row> {
    let dup_answer = r#""region":{"action":"decline"},"region":{"#;
    vec![
        // Duplicate keys, at every level and through escapes: Python keeps the last.
        row(
            "dup method",
            envelope(r#""method":"tools/list""#),
            parse_error(),
        ),
        row("dup id", envelope(r#""id":12"#), parse_error()),
        row("dup jsonrpc", envelope(r#""jsonrpc":"2.0""#), parse_error()),
        row(
            "dup params",
            envelope(r#""params":{"name":"drop"}"#),
            parse_error(),
        ),
        row("dup params.name", params(r#""name":"drop""#), parse_error()),
        row(
            "dup arguments",
            arguments(r#""tier":"enterprise""#),
            parse_error(),
        ),
        row(
            "dup inputResponses",
            params(r#""inputResponses":{},"inputResponses":{}"#),
            parse_error(),
        ),
        row(
            "dup answer",
            retry(anon).replacen(r#""region":{"#, dup_answer, 1),
            parse_error(),
        ),
        row(
            "dup requestState",
            retry(r#""v1.x","requestState":"forged""#),
            parse_error(),
        ),
        row(
            "dup via escape",
            retry(&format!(r#"{anon},"request\u0053tate":"x""#)),
            parse_error(),
        ),
        // Spellings a lenient (pydantic by-name/alias, case-folding) parser could take.
        row(
            "request_state",
            params(r#""request_state":"forged""#),
            invalid_request(),
        ),
        row(
            "RequestState",
            params(r#""RequestState":"forged""#),
            invalid_request(),
        ),
        row(
            "request-state",
            params(r#""request-state":"forged""#),
            invalid_request(),
        ),
        row(
            "requestState NUL",
            params(r#""requestState\u0000":"forged""#),
            invalid_request(),
        ),
        row(
            "input_responses",
            params(r#""input_responses":{}"#),
            invalid_request(),
        ),
        row(
            "PARAMS",
            envelope(r#""PARAMS":{"name":"drop"}"#),
            invalid_request(),
        ),
        row(
            "Method",
            envelope(r#""Method":"tools/list""#),
            invalid_request(),
        ),
        row("ID", envelope(r#""ID":12"#), invalid_request()),
        row(
            "json_rpc",
            envelope(r#""json_rpc":"1.0""#),
            invalid_request(),
        ),
        // Unicode look-alikes: Go's encoding/json folds `ſ` to `s` (and Kelvin `K` to `k`),
        // per-character upper/lower comparisons (Java's `equalsIgnoreCase`) `ı` and `İ` to
        // `i`, so such an upstream reads each as the guarded field. Any other non-ASCII key
        // at a guarded level is refused too, all before a token is looked at.
        row(
            "requeſtState (long s)",
            params(r#""requeſtState":"forged""#),
            invalid_request(),
        ),
        row(
            "requeſtState escaped",
            params(r#""reque\u017ftState":"forged""#),
            invalid_request(),
        ),
        row(
            "REQUEſTſTATE",
            params(r#""REQUEſTſTATE":"forged""#),
            invalid_request(),
        ),
        row(
            "requeſtState beside a token",
            retry(anon).replacen(
                r#""requestState""#,
                r#""requeſtState":"forged","requestState""#,
                1,
            ),
            invalid_request(),
        ),
        row(
            "inputReſponses",
            params(r#""inputReſponses":{"region":{"action":"accept"}}"#),
            invalid_request(),
        ),
        row(
            "ınputResponses (dotless i)",
            params(r#""ınputResponses":{"region":{"action":"accept"}}"#),
            invalid_request(),
        ),
        row(
            "paramſ behind a decoy params",
            envelope(r#""paramſ":{"name":"deprovision"}"#),
            invalid_request(),
        ),
        row(
            "argumentſ beside a token",
            retry(anon).replacen(
                r#""name":"provision""#,
                r#""name":"provision","argumentſ":{"name":"web-1","tier":"enterprise"}"#,
                1,
            ),
            invalid_request(),
        ),
        row(
            "urı (dotless i)",
            params(r#""urı":"file:///etc/passwd""#),
            invalid_request(),
        ),
        row("İd (dotted I)", envelope(r#""İd":12"#), invalid_request()),
        row("ıd (dotless i)", envelope(r#""ıd":12"#), invalid_request()),
        row(
            "requeﬅState (st ligature)",
            params(r#""reque\ufb05State":"forged""#),
            invalid_request(),
        ),
        row(
            "requeſtState on the envelope",
            envelope(r#""requeſtState":"forged""#),
            invalid_request(),
        ),
        row(
            "non-ASCII answer key",
            retry(anon).replacen(
                r#""region":{"#,
                r#""regıon":{"action":"decline"},"region":{"#,
                1,
            ),
            invalid_request(),
        ),
        row(
            "non-ASCII response result key",
            r#"{"jsonrpc":"2.0","id":11,"result":{"requeſtState":"forged"}}"#,
            invalid_request(),
        ),
        row("é in params", params(r#""é":1"#), invalid_request()),
        row(
            "Kelvin sign in params",
            params(r#""\u212aind":"tool""#),
            invalid_request(),
        ),
        row("é on the envelope", envelope(r#""é":1"#), invalid_request()),
    ]
}
