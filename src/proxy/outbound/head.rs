//! An upstream answer's head as the response phase reads it: its transfer codings, its
//! content coding, its label and whether it carries a hop-by-hop header, found in one
//! pass over the map (an answer carries three or four names; a hashed lookup of each
//! name asked about costs more than a look at each one there is).

use crate::proxy::upstream;
use http::header::{self, HeaderMap, HeaderValue};

/// How the upstream labelled its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyLabel {
    Json,
    EventStream,
    /// JSON or SSE in a charset the sealer does not read, or a label that mentions them
    /// in a way clients disagree on: cannot be inspected.
    Unreadable,
    /// Anything else, or no label: sniffed.
    Other,
}

/// What the response phase reads of an answer's head.
#[derive(Debug, Clone, Copy)]
pub(super) struct AnswerHead {
    /// Every transfer coding listed is `chunked` (or none is listed).
    pub(super) chunked_only: bool,
    /// Every `Content-Encoding` value lists identity only (or there is none).
    pub(super) identity_encoding: bool,
    pub(super) label: BodyLabel,
    /// A fixed hop-by-hop name is there (`Connection` among them: without one, nothing
    /// else is named hop-by-hop), so the head has something to strip.
    pub(super) hop_by_hop: bool,
}

impl AnswerHead {
    /// Every value of every name looked at once.
    pub(super) fn read(headers: &HeaderMap) -> Self {
        let mut head = AnswerHead {
            chunked_only: true,
            identity_encoding: true,
            label: BodyLabel::Other,
            hop_by_hop: false,
        };
        let (mut content_type, mut types) = (None, 0);
        for (name, value) in headers {
            if name == header::CONTENT_TYPE {
                content_type.get_or_insert(value);
                types += 1;
            } else if name == header::CONTENT_ENCODING {
                head.identity_encoding &= crate::body::lists_only(value, "identity");
            } else if upstream::is_fixed_hop_by_hop(name) {
                head.hop_by_hop = true;
                if name == header::TRANSFER_ENCODING {
                    head.chunked_only &= crate::body::lists_only(value, "chunked");
                }
            }
        }
        head.label = match (content_type, types) {
            (Some(only), 1) => label_of_one(only),
            (Some(_), _) => label_of_many(headers),
            (None, _) => BodyLabel::Other,
        };
        head
    }
}

/// The label of an answer with one `Content-Type`. The two types nearly every upstream
/// writes, spelled exactly so, are what the rules of [`label_of`] make of them, without
/// the lowercasing and the splitting.
fn label_of_one(value: &HeaderValue) -> BodyLabel {
    match value.as_bytes() {
        b"application/json" => BodyLabel::Json,
        b"text/event-stream" => BodyLabel::EventStream,
        _ => label_of(value),
    }
}

/// The label of an answer with several `Content-Type`s. Clients merge repeated types in
/// different ways: if any of them could be read as JSON or SSE, nobody can say which;
/// otherwise it is sniffed as for any other label.
fn label_of_many(headers: &HeaderMap) -> BodyLabel {
    let mentions = headers.get_all(header::CONTENT_TYPE).iter().any(|v| {
        let v = String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase();
        v.contains("json") || v.contains("event-stream")
    });
    if mentions {
        BodyLabel::Unreadable
    } else {
        BodyLabel::Other
    }
}

/// The label of the one `Content-Type` an answer has.
pub(super) fn label_of(first: &HeaderValue) -> BodyLabel {
    let Ok(value) = first.to_str() else {
        // Clients decode such bytes as Latin-1 and may still see `application/json`.
        return BodyLabel::Unreadable;
    };
    // Clients pick their parser by prefix (the reference SDK client uses
    // `startswith("application/json")`), so classify the way they read it; a type
    // that mentions JSON or event streams in any other way is refused, not waved on.
    let value = value.trim();
    // Lowercased only when it is not already (nearly every upstream writes it so).
    let value: std::borrow::Cow<'_, str> = if value.bytes().any(|b| b.is_ascii_uppercase()) {
        value.to_ascii_lowercase().into()
    } else {
        value.into()
    };
    let essence = value.split([';', ',']).next().unwrap_or_default().trim();
    let label = if value.starts_with("text/event-stream") {
        BodyLabel::EventStream
    } else if value.starts_with("application/json")
        || (essence.starts_with("application/") && essence.ends_with("+json"))
    {
        BodyLabel::Json
    } else if value.contains("json") || value.contains("event-stream") {
        BodyLabel::Unreadable
    } else {
        BodyLabel::Other
    };
    // The sealer reads UTF-8; a client told `charset=utf-16` decodes other text.
    if matches!(label, BodyLabel::Json | BodyLabel::EventStream) && !utf8_charset(&value) {
        return BodyLabel::Unreadable;
    }
    label
}

/// No `charset` parameter, or only UTF-8 ones.
fn utf8_charset(content_type: &str) -> bool {
    content_type
        .split([';', ','])
        .skip(1)
        .all(|param| match param.split_once('=') {
            Some((name, value)) if name.trim() == "charset" => {
                matches!(value.trim().trim_matches('"'), "utf-8" | "utf8")
            }
            _ => true,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderName;

    /// An answer flagged as holding no hop-by-hop header is one the strip leaves as it
    /// is (so skipping it is the same), and one flagged holds a name the strip removes;
    /// over every head of up to three lines of these names.
    #[test]
    fn a_head_without_hop_by_hop_names_is_one_the_strip_leaves_alone() {
        let names = [
            "content-type",
            "content-length",
            "connection",
            "keep-alive",
            "transfer-encoding",
            "te",
            "upgrade",
            "x-hop",
            "mcp-session-id",
        ];
        for lines in crate::proxy::every_head(&names, 3) {
            let mut map = HeaderMap::new();
            for name in &lines {
                let value = if *name == "connection" {
                    "x-hop"
                } else {
                    "chunked"
                };
                map.append(
                    HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                );
            }
            let head = AnswerHead::read(&map);
            let mut stripped = map.clone();
            upstream::strip_hop_by_hop(&mut stripped);
            assert_eq!(head.hop_by_hop, stripped != map, "{lines:?}");
        }
    }
}
