use super::*;
use http::HeaderValue;
use serde_json::json;

fn learned(schema: Value) -> ParamHeaders {
    let mut headers = ParamHeaders::default();
    headers.learn(&[json!({"name": "deploy", "inputSchema": schema})]);
    headers
}

fn region_schema() -> Value {
    json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "replicas": {"type": "integer", "x-mcp-header": "Replicas"},
        "target": {"type": "object", "properties": {
            "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"}
        }},
        "note": {"type": "string"}
    }})
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn check(
    params: &ParamHeaders,
    arguments: Value,
    pairs: &[(&str, &str)],
) -> Result<(), ParamMismatch> {
    params.check("deploy", arguments.as_object(), &headers(pairs))
}

#[test]
fn headers_that_mirror_their_arguments_pass() {
    let params = learned(region_schema());
    let arguments = json!({"region": "eu-west", "replicas": 3, "target": {"dry": true}});
    let all = [
        ("Mcp-Param-Region", "eu-west"),
        ("mcp-param-replicas", "3"),
        ("MCP-PARAM-DRY-RUN", "true"),
    ];
    assert_eq!(check(&params, arguments.clone(), &all), Ok(()));
    // Integers compare numerically; base64 values are decoded; whitespace around goes.
    let numeric = json!({"region": "é ", "replicas": 3.0});
    let encoded = format!("=?base64?{}?=", STANDARD.encode_to_string("é ".as_bytes()));
    let pairs = [
        ("mcp-param-region", encoded.as_str()),
        ("mcp-param-replicas", " 3.00 "),
    ];
    assert_eq!(check(&params, numeric, &pairs), Ok(()));
    // Nothing mirrored, nothing sent; a tool that mirrors nothing is not checked.
    assert_eq!(check(&params, json!({"note": "x"}), &[]), Ok(()));
    let unknown = params.check("other", None, &headers(&[("mcp-param-region", "x")]));
    assert_eq!(unknown, Ok(()));
    // A null argument is absent.
    assert_eq!(check(&params, json!({"region": null}), &[]), Ok(()));
}

#[test]
fn every_disagreement_is_a_mismatch() {
    let params = learned(region_schema());
    let region = || json!({"region": "eu-west"});
    type Case<'a> = (Value, Vec<(&'a str, &'a str)>, ParamMismatch);
    let cases: [Case<'_>; 7] = [
        (region(), vec![], ParamMismatch::Missing),
        (
            region(),
            vec![("mcp-param-region", "us-east")],
            ParamMismatch::Differs,
        ),
        (
            region(),
            vec![("mcp-param-region", "EU-WEST")],
            ParamMismatch::Differs,
        ),
        (
            region(),
            vec![
                ("mcp-param-region", "eu-west"),
                ("mcp-param-region", "eu-west"),
            ],
            ParamMismatch::Repeated,
        ),
        (
            region(),
            vec![("mcp-param-region", "=?base64?!!?=")],
            ParamMismatch::Malformed,
        ),
        (
            json!({}),
            vec![("mcp-param-region", "eu-west")],
            ParamMismatch::WithoutArgument,
        ),
        (
            json!({"replicas": 3}),
            vec![("mcp-param-replicas", "3.5")],
            ParamMismatch::Differs,
        ),
    ];
    for (arguments, pairs, expected) in cases {
        assert_eq!(
            check(&params, arguments.clone(), &pairs),
            Err(expected),
            "{arguments} {pairs:?}"
        );
    }
    // Non-canonical base64 (stray trailing bits) is malformed, as the SDK decodes it.
    let stray = [("mcp-param-region", "=?base64?ZXV=?=")];
    assert_eq!(
        check(&params, json!({"region": "eu"}), &stray),
        Err(ParamMismatch::Malformed)
    );
}

#[test]
fn a_schema_with_an_invalid_annotation_checks_nothing() {
    for invalid in [
        // Off the properties chain.
        json!({"type": "object", "items": {"type": "string", "x-mcp-header": "A"}}),
        json!({"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "A"}},
               "$defs": {"b": {"type": "string", "x-mcp-header": "B"}}}),
        // Not a token, not a permitted type, repeated whatever its case, on the root.
        json!({"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "A B"}}}),
        json!({"type": "object", "properties": {"a": {"type": "number", "x-mcp-header": "A"}}}),
        json!({"type": "object", "properties": {
            "a": {"type": "string", "x-mcp-header": "Zone"},
            "b": {"type": "string", "x-mcp-header": "zone"}}}),
        json!({"type": "object", "x-mcp-header": "Root"}),
    ] {
        let params = learned(invalid.clone());
        assert!(params.is_empty(), "{invalid}");
        assert_eq!(check(&params, json!({"a": "x"}), &[]), Ok(()), "{invalid}");
    }
}

#[test]
fn a_later_listing_replaces_a_tools_annotations() {
    let mut params = learned(region_schema());
    params.learn(&[json!({"name": "deploy", "inputSchema": {"type": "object"}})]);
    assert!(params.is_empty());
}
