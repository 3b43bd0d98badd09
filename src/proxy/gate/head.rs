//! A request's head as the gate reads it: every header the gate looks at, found in one
//! pass over the map. A request carries a handful of names, and a look at each costs
//! less than a hashed lookup of each name the gate asks about (three of them custom,
//! hashed byte by byte).

use http::header::{self, HeaderMap, HeaderValue};

/// A header the gate reads: its first value, and whether another followed.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Field<'h> {
    pub(super) first: Option<&'h HeaderValue>,
    pub(super) repeated: bool,
}

impl<'h> Field<'h> {
    fn see(&mut self, value: &'h HeaderValue) {
        if self.first.is_some() {
            self.repeated = true;
        } else {
            self.first = Some(value);
        }
    }
}

/// The headers the gate checks, read from one request's head.
#[derive(Debug, Clone, Copy)]
pub(super) struct GateHead<'h> {
    pub(super) content_type: Field<'h>,
    pub(super) content_length: Field<'h>,
    /// Whether every `Content-Encoding` value lists identity only (none: it does).
    pub(super) identity_encoding: bool,
    pub(super) protocol_version: Field<'h>,
    pub(super) method: Field<'h>,
    pub(super) name: Field<'h>,
}

impl<'h> GateHead<'h> {
    /// Every value of every name, in the map's order (a repeated name's values in
    /// order), looked at once.
    pub(super) fn read(headers: &'h HeaderMap) -> Self {
        let mut head = GateHead {
            content_type: Field::default(),
            content_length: Field::default(),
            identity_encoding: true,
            protocol_version: Field::default(),
            method: Field::default(),
            name: Field::default(),
        };
        for (name, value) in headers {
            if name == header::CONTENT_TYPE {
                head.content_type.see(value);
            } else if name == header::CONTENT_LENGTH {
                head.content_length.see(value);
            } else if name == header::CONTENT_ENCODING {
                head.identity_encoding &= crate::body::lists_only(value, "identity");
            } else if let Some(mcp) = name.as_str().strip_prefix("mcp-") {
                match mcp {
                    "protocol-version" => head.protocol_version.see(value),
                    "method" => head.method.see(value),
                    "name" => head.name.see(value),
                    _ => {}
                }
            }
        }
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderName;

    /// Each field holds what a lookup of its name gives (the first value, and whether
    /// there is a second), whatever else the head holds and in whatever order.
    #[test]
    fn each_field_is_what_a_lookup_of_its_name_gives() {
        let names = [
            "content-type",
            "content-length",
            "mcp-protocol-version",
            "mcp-method",
            "mcp-name",
            "mcp-param-region",
            "mcp-names",
            "x-mcp-name",
            "accept",
            "host",
        ];
        // Every head of up to four lines over these names, values numbered in order.
        let heads = crate::proxy::every_head(&names, 4);
        assert!(heads.len() > 10_000);
        for lines in heads {
            let mut map = HeaderMap::new();
            for (i, name) in lines.iter().enumerate() {
                map.append(
                    HeaderName::from_static(name),
                    HeaderValue::from_str(&i.to_string()).unwrap(),
                );
            }
            let head = GateHead::read(&map);
            for (field, name) in [
                (head.content_type, "content-type"),
                (head.content_length, "content-length"),
                (head.protocol_version, "mcp-protocol-version"),
                (head.method, "mcp-method"),
                (head.name, "mcp-name"),
            ] {
                let mut values = map.get_all(name).iter();
                assert_eq!(field.first, values.next(), "{name} in {lines:?}");
                assert_eq!(
                    field.repeated,
                    values.next().is_some(),
                    "{name} in {lines:?}"
                );
            }
        }
    }

    #[test]
    fn every_encoding_value_must_list_identity_only() {
        let read = |values: &[&'static str]| {
            let mut map = HeaderMap::new();
            map.append(header::CONTENT_TYPE, HeaderValue::from_static("x"));
            for v in values {
                map.append(header::CONTENT_ENCODING, HeaderValue::from_static(v));
            }
            GateHead::read(&map).identity_encoding
        };
        for (values, identity) in [
            (&[][..], true),
            (&["identity"], true),
            (&["Identity , identity"], true),
            (&["identity", "identity"], true),
            (&["gzip"], false),
            (&["identity", "gzip"], false),
            (&["gzip", "identity"], false),
            (&["identity,"], false),
        ] {
            assert_eq!(read(values), identity, "{values:?}");
        }
    }
}
