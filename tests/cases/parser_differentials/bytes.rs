//! Bodies that are not exactly one clean JSON value, and bodies the gate cannot read as
//! UTF-8 JSON (compressed, mislabelled, over the body limit).

use super::{
    BASE, MAX_BODY, Row, arguments, base, deep, invalid_params, not_a_message, parse_error,
    refused, row,
};
use mcp_state_guard::facade::error::ErrorKind;
use std::io::Write;

pub(super) fn rows() -> Vec<Row> {
    let mut non_utf8 = base("web-1", "web-\u{1}").into_bytes();
    non_utf8
        .iter_mut()
        .filter(|b| **b == 1)
        .for_each(|b| *b = 0xff);
    let (ct, mcp_name) = ("content-type", "mcp-name");
    vec![
        // Bytes that are not exactly one clean JSON value.
        row("batch", format!("[{BASE}]"), not_a_message()),
        row("string", "\"tools/call\"", not_a_message()),
        row("null", "null", not_a_message()),
        row("non-UTF-8 in a string", non_utf8, parse_error()),
        row("BOM", format!("\u{feff}{BASE}"), parse_error()),
        row("two objects", format!("{BASE}{BASE}"), parse_error()),
        row("trailing garbage", format!("{BASE}x"), parse_error()),
        row("empty", "", parse_error()),
        row(
            "lone surrogate",
            base("web-1", r"web-\ud800"),
            parse_error(),
        ),
        row(
            "NaN (Python accepts it)",
            base(r#""free""#, "NaN"),
            parse_error(),
        ),
        row("depth 200", deep(200), parse_error()),
        row(
            "name not a string",
            base(r#""provision""#, "7"),
            invalid_params(),
        )
        .set(mcp_name, None),
        row(
            "params an array",
            format!(
                "{}]}}",
                base("\"params\":{", "\"params\":[{")
                    .strip_suffix('}')
                    .unwrap()
            ),
            invalid_params(),
        ),
        // Bodies the gate cannot read as UTF-8 JSON.
        row("gzip", gzip(BASE), refused(415, ErrorKind::ContentEncoding))
            .add("content-encoding", "gzip"),
        row("text/plain", BASE, refused(415, ErrorKind::ContentType)).set(ct, Some("text/plain")),
        row(
            "no content type",
            BASE,
            refused(415, ErrorKind::ContentType),
        )
        .set(ct, None),
        row("latin1", BASE, refused(415, ErrorKind::ContentType))
            .set(ct, Some("application/json; charset=latin1")),
        row(
            "two content types",
            BASE,
            refused(415, ErrorKind::ContentType),
        )
        .add(ct, "application/json"),
        row(
            "over the body limit",
            arguments(&format!(r#""w":"{}""#, "w".repeat(MAX_BODY))),
            refused(413, ErrorKind::BodyTooLarge),
        ),
    ]
}

fn gzip(text: &str) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap()
}
